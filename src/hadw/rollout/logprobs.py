"""Teacher-forced log-probs of response tokens: the policy's new log π_θ(o_t | q, o_<t) for the loss.

It reproduces generation exactly: position ids come from the attention mask (cumsum - 1), as in the
engine, so a left-padded prompt sees the same positions whether it was sampled or re-scored, and the
temperature is the sampling one (see sampling.py for the log-prob convention).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """[N, L] 0/1 mask -> [N, L] long positions, counting real tokens only (pads get 0)."""
    positions = attention_mask.long().cumsum(dim=-1) - 1
    return positions.masked_fill(attention_mask == 0, 0)


def token_logprobs_from_logits(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    chunk: int = 128,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(logits / T) at `tokens`, and optionally the entropy of that distribution.

    logits: [N, R, V] (any float dtype, computed in float32); tokens: [N, R] long.
    Returns (logprobs [N, R] float32, entropy [N, R] float32 or None). Uses gather − logsumexp, so the only
    [N, R, V] float32 tensor alive is the (scaled) logits. The entropy is a metric unless entropy_grad (an
    entropy bonus in the loss): then it keeps its graph; else it is computed without one, `chunk` rows of
    N·R at a time, so no [N, R, V] softmax is materialised (as TRL's entropy_from_logits).
    """
    scaled = logits.float()
    if temperature != 1.0:
        scaled = scaled / temperature
    log_norm = torch.logsumexp(scaled, dim=-1)
    logprobs = scaled.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - log_norm
    entropy = None
    if with_entropy and entropy_grad:
        entropy = log_norm - (torch.softmax(scaled, dim=-1) * scaled).sum(dim=-1)  # H = logsumexp(z) - E_p[z]
    elif with_entropy:
        with torch.no_grad():
            flat, norm = scaled.detach().flatten(0, -2), log_norm.detach().flatten()
            entropy = torch.cat([
                norm[i : i + chunk] - (torch.softmax(z, dim=-1) * z).sum(dim=-1)
                for i, z in ((i, flat[i : i + chunk]) for i in range(0, len(flat), chunk))
            ]).view(log_norm.shape)  # fmt: skip
    return logprobs, entropy


def compute_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor | int,
    temperature: float = 1.0,
    return_entropy: bool = False,
    entropy_grad: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs of the last R tokens of each row under `model` (differentiable).

    input_ids, attention_mask: [N, P + R], i.e. `RolloutBatch.input_ids` / `.attention_mask`
    (prompt left-padded, response right-padded). response_mask: [N, R] (zeroes masked positions)
    or the int R (nothing zeroed). temperature: the sampling temperature (0 = greedy is scored at 1).
    Returns logprobs [N, R] float32, or (logprobs, entropy) each [N, R] when return_entropy; the entropy
    carries a gradient only with entropy_grad (an entropy bonus), else it is a metric computed without a graph.

    Memory: the LM head runs on the R + 1 last positions only (`logits_to_keep`), and the vocabulary
    axis is reduced with gather/logsumexp; micro-batch N upstream to bound activations.
    """
    response_len = response_mask if isinstance(response_mask, int) else response_mask.shape[1]
    if not 0 < response_len < input_ids.shape[1]:
        raise ValueError(
            f"compute_logprobs: response length {response_len} must be in [1, {input_ids.shape[1] - 1}] "
            f"(input_ids has {input_ids.shape[1]} columns and needs at least one prompt token)"
        )
    temperature = temperature if temperature > 0 else 1.0
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
        logits_to_keep=response_len + 1,
    )
    # The logit at position j predicts token j + 1: drop the last one (it predicts past the end).
    logits = out.logits[:, :-1, :]
    tokens = input_ids[:, -response_len:]
    logprobs, entropy = token_logprobs_from_logits(
        logits, tokens, temperature, with_entropy=return_entropy, entropy_grad=entropy_grad
    )
    if not isinstance(response_mask, int):
        keep = response_mask.bool()
        logprobs = logprobs.masked_fill(~keep, 0.0)
        entropy = entropy.masked_fill(~keep, 0.0) if entropy is not None else None
    return (logprobs, entropy) if return_entropy else logprobs
