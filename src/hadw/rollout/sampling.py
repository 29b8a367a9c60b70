"""Sampling parameters and the per-step token sampler: temperature, top-k, top-p (nucleus), greedy.

Convention shared by every engine (and by `compute_logprobs`): the log-prob recorded for a sampled
token is log softmax(logits / temperature) over the FULL vocabulary, not renormalised over the
top-k/top-p set. That is the policy π_θ whose ratio π_θ/π_old the trainer computes; the truncation
only decides which tokens may be drawn. Temperature 0 means greedy, and its log-probs are taken
at temperature 1 (the model's own distribution), since softmax(logits / 0) is undefined.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SamplingParams:
    n: int = 8  # G samples per prompt
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0  # 1 = off
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 64
    stop_token_ids: list[int] | None = None  # in addition to the tokenizer's / model's EOS ids
    seed: int | None = None  # None = fresh OS entropy (not torch's global RNG)
    ignore_eos: bool = False  # never stop early (benchmarks: equal lengths); stop_token_ids ignored too

    def __post_init__(self) -> None:
        checks = {
            "n": (self.n >= 1, "must be >= 1"),
            "temperature": (self.temperature >= 0, "must be >= 0 (0 = greedy)"),
            "top_p": (0 < self.top_p <= 1, "must be in (0, 1] (1 = off)"),
            "top_k": (self.top_k >= 0, "must be >= 0 (0 = off)"),
            "max_new_tokens": (self.max_new_tokens >= 1, "must be >= 1"),
        }
        for name, (ok, rule) in checks.items():
            if not ok:
                raise ValueError(f"SamplingParams.{name}={getattr(self, name)!r} {rule}")


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Set every logit below the k-th largest of its row to -inf. logits: [B, V]; k <= 0 = off."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth_largest = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth_largest, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose probability mass reaches p (at least one).

    logits: [B, V]. A token is dropped when the mass of the tokens ranked above it is already >= p,
    so the top token always survives. p >= 1 = off.
    """
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    sorted_probs = sorted_logits.softmax(dim=-1)
    mass_above = sorted_probs.cumsum(dim=-1) - sorted_probs
    drop_sorted = mass_above >= p
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row by inverse-CDF sampling: the first token whose cumulative mass exceeds u·total.

    probs: [B, V] non-negative (rows need not sum to 1). Returns tokens [B] long. One uniform per row
    (torch.multinomial draws V exponentials per row: ~15x slower at V = 260). The CDF is summed in
    float64 so that a 150k-token vocabulary still resolves probabilities near 1e-12; a zero-probability
    token is never drawn (right=True skips the CDF's flat steps).
    """
    cdf = probs.double().cumsum(dim=-1)  # [B, V]
    u = torch.rand((probs.shape[0], 1), generator=generator, dtype=torch.float64, device=probs.device)
    tokens = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)  # [B, 1]
    return tokens.squeeze(-1).clamp_(max=probs.shape[-1] - 1)  # u·total rounding up to total: ~2^-53


def sample_next_token(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row and return (tokens [B] long, logprobs [B] float32).

    logits: [B, V] next-token logits (any float dtype; computed in float32). The generator is the only
    source of randomness, so torch's global RNG is never advanced.
    """
    logits = logits.float()
    if params.temperature == 0:
        tokens = logits.argmax(dim=-1)
        logprobs = logits.log_softmax(dim=-1)
    else:
        scaled = logits / params.temperature
        logprobs = scaled.log_softmax(dim=-1)
        allowed = top_p_filter(top_k_filter(scaled, params.top_k), params.top_p)
        # Without truncation the sampling distribution is the recorded one: reuse it (saves a softmax).
        probs = logprobs.exp() if allowed is scaled else allowed.softmax(dim=-1)
        tokens = draw(probs, generator)
    return tokens, logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
