"""Teacher-forced log-probs of response tokens: the policy's new log π_θ(o_t | q, o_<t) for the loss.

It reproduces generation exactly: position ids come from the attention mask (cumsum - 1), as in the
engine, so a left-padded prompt sees the same positions whether it was sampled or re-scored, and the
temperature is the sampling one (see sampling.py for the log-prob convention).

Memory: a real vocabulary makes the LM head's output the largest tensor of the update (SmolLM2's 49 152 columns
x 4 bytes x every response token: 0.8 GB per 4k-token row, several times that with log-softmax and its
backward). When a mini-batch's logits would exceed LOGITS_CHUNK_BYTES, `compute_logprobs` runs the model's
body for the hidden states and the head + log-softmax + gather over chunks of tokens, each chunk under
activation checkpointing, so neither the forward nor the backward holds more than one chunk's logits.
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache, PreTrainedModel

# Float32 logits one LM-head chunk may hold (its softmax and backward add ~3 more of that size). 64 MiB is
# 341 tokens of a 49 152-word vocabulary, 110 of Qwen's 151 936: rows enough for an efficient matmul, and a
# peak that the body's own activations dwarf. Below it (all the tiny model's batches) the logits of the whole
# micro-batch come from the one-pass forward, bit for bit as before chunking existed.
LOGITS_CHUNK_BYTES = 64 * 2**20

# Config fields with which a model's forward transforms the head's output (softcapping, scaling): the chunked
# path applies the bare head, so such models keep the one-pass forward (the list TRL's fused head reads).
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                     "logits_scaling")  # fmt: skip


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


def _tail(module: torch.nn.Module, keep: int, hidden: bool, **inputs) -> torch.Tensor:
    """[N, keep, V] logits of the last `keep` positions from a CausalLM, or [N, keep, H] hidden states from its body."""
    if hidden:
        return module(**inputs).last_hidden_state[:, -keep:]
    return module(**inputs, logits_to_keep=keep).logits


def _response_logits_shared_prompts(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_len: int,
    body: torch.nn.Module | None = None,
) -> torch.Tensor | None:
    """Logits [N, R, V] predicting the R response tokens, running each distinct prompt once; with `body` (the
    model's decoder without its head) the hidden states [N, R, H] the head would read instead.

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
    module = model if body is None else body
    if len(first) == len(inverse) or checkpointing or _has_dropout(model) or cache_kwarg(module) is None:
        return None
    if body is None:
        head, cache = prefill_shared(model, input_ids[:, :prompt_len], attention_mask[:, :prompt_len], first, inverse)
    else:  # prefill_shared's steps, reading the hidden state of the last prompt position instead of its logits
        prompt_ids, prompt_mask = input_ids[first, :prompt_len], attention_mask[first, :prompt_len]
        cache = DynamicCache(config=model.config)
        head = _tail(body, 1, True, input_ids=prompt_ids, attention_mask=prompt_mask, use_cache=True,
                     position_ids=position_ids_from_mask(prompt_mask), **{cache_kwarg(body): cache})[:, -1]  # fmt: skip
        for layer in cache.layers:
            layer.reorder_cache(inverse)  # [U, ...] -> [N, ...]
        head = head[inverse]
    if response_len == 1:
        return head[:, None]
    # The last response token predicts nothing we score: feed tokens 0 .. R-2.
    rest = _tail(
        module,
        response_len - 1,
        body is not None,
        input_ids=input_ids[:, prompt_len:-1],
        attention_mask=attention_mask[:, :-1],
        position_ids=position_ids_from_mask(attention_mask)[:, prompt_len:-1],
        use_cache=True,
        **{cache_kwarg(module): cache},
    )  # [N, R - 1, V or H]
    return torch.cat([head[:, None], rest], dim=1)


def body_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(the decoder body returning `last_hidden_state`, the LM head) of a transformers CausalLM, PEFT-wrapped or
    not; None where the forward does more than head(body(x)) (logit softcapping or scaling) or either is missing."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT: LoRA layers sit inside
    config = getattr(base, "config", None)
    if config is None or not hasattr(base, "get_output_embeddings"):
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if any(getattr(text, name, None) not in (None, 1, 1.0) for name in _LOGIT_TRANSFORMS):
        return None
    body, head = getattr(base, "base_model", base), base.get_output_embeddings()
    if body is base or not isinstance(head, torch.nn.Module) or getattr(head, "weight", None) is None:
        return None
    return body, head


def _head_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One chunk: hidden [n, H], tokens [n] -> (logprobs [n], entropy [n] or None), via its [n, V] logits."""
    return token_logprobs_from_logits(head(hidden), tokens, temperature, with_entropy, entropy_grad)


def chunked_head_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float,
    chunk_tokens: int,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_logprobs_from_logits(head(hidden), tokens, ...)` without the [N, R, V] logits.

    hidden: [N, R, H] (the states the head reads for each response token); tokens: [N, R] long.
    Returns (logprobs [N, R] float32, entropy [N, R] float32 or None). The N·R tokens go through the head
    `chunk_tokens` at a time. With autograd on, each chunk runs under (non-reentrant) activation
    checkpointing: the forward keeps only the chunk's hidden states, and the backward recomputes one chunk's
    logits at a time (one more head matmul per chunk, the price of never holding them all). The values are
    the unchunked path's row by row; gradients differ only in the order the chunks' terms are summed.
    """
    flat_hidden, flat_tokens = hidden.reshape(-1, hidden.shape[-1]), tokens.reshape(-1)
    run = functools.partial(_head_logprobs, head, temperature=temperature, with_entropy=with_entropy,
                            entropy_grad=entropy_grad)  # fmt: skip
    grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    logprobs, entropies = [], []
    for start in range(0, len(flat_tokens), chunk_tokens):
        part = flat_hidden[start : start + chunk_tokens], flat_tokens[start : start + chunk_tokens]
        logprob, entropy = checkpoint(run, *part, use_reentrant=False) if grad else run(*part)
        logprobs.append(logprob)
        entropies.append(entropy)
    entropy = torch.cat(entropies).view(tokens.shape) if with_entropy else None
    return torch.cat(logprobs).view(tokens.shape), entropy


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
    chunk_tokens: int | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs of the last R tokens of each row under `model` (differentiable).

    input_ids, attention_mask: [N, P + R], i.e. `RolloutBatch.input_ids` / `.attention_mask`
    (prompt left-padded, response right-padded). response_mask: [N, R] (zeroes masked positions)
    or the int R (nothing zeroed). temperature: the sampling temperature (0 = greedy is scored at 1).
    Returns logprobs [N, R] float32, or (logprobs, entropy) each [N, R] when return_entropy; the entropy
    carries a gradient only with entropy_grad (an entropy bonus), else it is a metric computed without a graph.

    Memory: the LM head runs on the R + 1 last positions only (`logits_to_keep`), and the vocabulary
    axis is reduced with gather/logsumexp; micro-batch N upstream to bound activations. When the N·R
    tokens' logits would exceed `chunk_tokens` rows (None: as many as LOGITS_CHUNK_BYTES of float32 logits
    hold), the model's body gives the hidden states and `chunked_head_logprobs` runs the head over chunks,
    so no [N, R, V] tensor exists, forward or backward. Smaller batches take the one-pass forward, unchanged.
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
    tokens = input_ids[:, -response_len:]
    split = body_and_head(model)
    if split is not None and chunk_tokens is None:
        chunk_tokens = max(1, LOGITS_CHUNK_BYTES // (4 * split[1].weight.shape[0]))
    if split is not None and tokens.numel() > chunk_tokens:
        body, head = split
        hidden = None
        if share_prompts:
            hidden = _response_logits_shared_prompts(model, input_ids, attention_mask, response_len, body=body)
        if hidden is None:
            inputs = dict(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
            hidden = _tail(body, response_len + 1, True, position_ids=position_ids_from_mask(attention_mask), **inputs)
            hidden = hidden[:, :-1]  # as below: the last position predicts past the end
        logprobs, entropy = chunked_head_logprobs(
            head, hidden, tokens, temperature, chunk_tokens, with_entropy=return_entropy, entropy_grad=entropy_grad
        )
    else:
        logits = None
        if share_prompts:
            logits = _response_logits_shared_prompts(model, input_ids, attention_mask, response_len)
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
        logprobs, entropy = token_logprobs_from_logits(
            logits, tokens, temperature, with_entropy=return_entropy, entropy_grad=entropy_grad
        )
    if not isinstance(response_mask, int):
        keep = response_mask.bool()
        logprobs = logprobs.masked_fill(~keep, 0.0)
        entropy = entropy.masked_fill(~keep, 0.0) if entropy is not None else None
    return (logprobs, entropy) if return_entropy else logprobs
