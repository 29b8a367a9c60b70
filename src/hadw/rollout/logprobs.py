"""Teacher-forced log-probs of response tokens: the policy's new log π_θ(o_t | q, o_<t) for the loss.

It reproduces generation exactly: position ids come from the attention mask (cumsum - 1), as in the
engine, so a left-padded prompt sees the same positions whether it was sampled or re-scored, and the
temperature is the sampling one (see sampling.py for the log-prob convention).
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PreTrainedModel


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """[N, L] 0/1 mask -> [N, L] long positions, counting real tokens only (pads get 0)."""
    positions = attention_mask.long().cumsum(dim=-1) - 1
    return positions.masked_fill(attention_mask == 0, 0)


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs of identical (left-padded) prompt rows: (first [U] row of each run, inverse [N] row -> run).

    prompt_*: [N, P]. Rows of a group (the G samples of one prompt) are adjacent in every batch hadw
    builds, so consecutive runs find them; a repeated prompt elsewhere is a separate run (still correct).
    """
    rows = torch.cat([prompt_ids, prompt_mask.long()], dim=1)
    _, inverse = torch.unique_consecutive(rows, dim=0, return_inverse=True)
    first = torch.zeros(int(inverse[-1]) + 1, dtype=torch.long, device=rows.device)
    first.scatter_reduce_(0, inverse, torch.arange(len(rows), device=rows.device), "amin", include_self=False)
    return first, inverse


def cache_kwarg(model: torch.nn.Module) -> str | None:
    """The forward's name for a KV cache (transformers 5 renamed `past_key_values` to `cache`); None if
    the forward takes neither and no **kwargs (some remote-code models). A peft model's forward takes **kwargs and
    passes them on: its base model's forward names the argument (`past_key_values` through it warned on every
    decode step of a LoRA run)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(base.forward).parameters
    if "cache" in params:
        return "cache"
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return "past_key_values" if "past_key_values" in params or takes_any else None


def prefill_shared(
    model: PreTrainedModel,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    first: torch.Tensor,
    inverse: torch.Tensor,
) -> tuple[torch.Tensor, DynamicCache]:
    """Run each distinct prompt row once (`prompt_groups`'s first / inverse) and give every row its cache.

    prompt_*: [N, P] left-padded. Returns (next-token logits [N, V] at the last prompt position, a
    DynamicCache with N rows). The expansion is an index_select, so gradients flow back to the shared
    forward when autograd is on (the update) and nothing is copied twice when it is off (rollouts).
    """
    cache = DynamicCache(config=model.config)
    logits = model(
        input_ids=prompt_ids[first],
        attention_mask=prompt_mask[first],
        position_ids=position_ids_from_mask(prompt_mask[first]),
        use_cache=True,
        logits_to_keep=1,
        **{cache_kwarg(model) or "past_key_values": cache},
    ).logits[:, -1, :]  # [U, V]
    for layer in cache.layers:
        layer.reorder_cache(inverse)  # [U, ...] -> [N, ...]
    return logits[inverse], cache


def _has_dropout(model: torch.nn.Module) -> bool:
    return model.training and any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def _response_logits_shared_prompts(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_len: int
) -> torch.Tensor | None:
    """Logits [N, R, V] predicting the R response tokens, running each distinct prompt once.

    The prompt's forward (with its gradient) is shared by its group's rows through the KV cache, which
    index_select expands to every row (differentiable), then the responses run on top of it. The maths
    is the one-pass forward's; the prompt columns cost 1/G. Returns None when nothing is shared or it
    cannot apply (gradient checkpointing turns the cache off; active dropout would be shared too).
    """
    prompt_len = input_ids.shape[1] - response_len
    first, inverse = prompt_groups(input_ids[:, :prompt_len], attention_mask[:, :prompt_len])
    checkpointing = getattr(model, "is_activation_checkpointing", None)  # transformers >= 5.x spelling
    if checkpointing is None:
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if len(first) == len(inverse) or checkpointing or _has_dropout(model) or cache_kwarg(model) is None:
        return None
    head, cache = prefill_shared(model, input_ids[:, :prompt_len], attention_mask[:, :prompt_len], first, inverse)
    if response_len == 1:
        return head[:, None]
    # The last response token predicts nothing we score: feed tokens 0 .. R-2.
    rest = model(
        input_ids=input_ids[:, prompt_len:-1],
        attention_mask=attention_mask[:, :-1],
        position_ids=position_ids_from_mask(attention_mask)[:, prompt_len:-1],
        use_cache=True,
        **{cache_kwarg(model): cache},
    ).logits  # [N, R - 1, V]
    return torch.cat([head[:, None], rest], dim=1)


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
    share_prompts: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs of the last R tokens of each row under `model` (differentiable).

    input_ids, attention_mask: [N, P + R], i.e. `RolloutBatch.input_ids` / `.attention_mask`
    (prompt left-padded, response right-padded). response_mask: [N, R] (zeroes masked positions)
    or the int R (nothing zeroed). temperature: the sampling temperature (0 = greedy is scored at 1).
    Returns logprobs [N, R] float32, or (logprobs, entropy) each [N, R] when return_entropy; the entropy
    carries a gradient only with entropy_grad (an entropy bonus), else it is a metric computed without a graph.

    Memory: the LM head runs on the R + 1 last positions only (`logits_to_keep`), and the vocabulary
    axis is reduced with gather/logsumexp; micro-batch N upstream to bound activations.
    share_prompts: run each run of identical prompt rows once (`_response_logits_shared_prompts`); same
    values and gradients up to float rounding, prompt columns at 1/G of the cost. Needs a model whose
    forward takes a transformers Cache (`past_key_values`).
    """
    response_len = response_mask if isinstance(response_mask, int) else response_mask.shape[1]
    if not 0 < response_len < input_ids.shape[1]:
        raise ValueError(
            f"compute_logprobs: response length {response_len} must be in [1, {input_ids.shape[1] - 1}] "
            f"(input_ids has {input_ids.shape[1]} columns and needs at least one prompt token)"
        )
    temperature = temperature if temperature > 0 else 1.0
    logits = _response_logits_shared_prompts(model, input_ids, attention_mask, response_len) if share_prompts else None
    if logits is None:
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
