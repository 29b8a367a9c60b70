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
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(logits / T) at `tokens`, and optionally the entropy of that distribution.

    logits: [N, R, V] (any float dtype, computed in float32); tokens: [N, R] long.
    Returns (logprobs [N, R] float32, entropy [N, R] float32 or None). Uses gather − logsumexp, so
    the only [N, R, V] float32 tensor alive is the scaled logits (plus probs for the entropy).
    """
    scaled = logits.float() / temperature
    log_norm = torch.logsumexp(scaled, dim=-1)
    logprobs = scaled.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - log_norm
    entropy = None
    if with_entropy:
        probs = torch.softmax(scaled, dim=-1)
        entropy = log_norm - (probs * scaled).sum(dim=-1)  # H = logsumexp(z) - E_p[z]
    return logprobs, entropy


def compute_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor | int,
    temperature: float = 1.0,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs of the last R tokens of each row under `model` (differentiable).

    input_ids, attention_mask: [N, P + R], i.e. `RolloutBatch.input_ids` / `.attention_mask`
    (prompt left-padded, response right-padded). response_mask: [N, R] (zeroes masked positions)
    or the int R (nothing zeroed). temperature: the sampling temperature (0 = greedy is scored at 1).
    Returns logprobs [N, R] float32, or (logprobs, entropy) each [N, R] when return_entropy.

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
    logprobs, entropy = token_logprobs_from_logits(logits, tokens, temperature, with_entropy=return_entropy)
    if not isinstance(response_mask, int):
        keep = response_mask.bool()
        logprobs = logprobs.masked_fill(~keep, 0.0)
        entropy = entropy.masked_fill(~keep, 0.0) if entropy is not None else None
    return (logprobs, entropy) if return_entropy else logprobs
