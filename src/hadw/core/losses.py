"""Policy-gradient losses for GRPO, GSPO and DAPO (docs/method.md §3.3), KL penalties and loss aggregation.

Shapes: B responses, T response tokens (right-padded).
    logprobs, old_logprobs, ref_logprobs, entropy, response_mask: [B, T]
    advantages: [B] (one per response, already multiplied by Φ) or [B, T]
The policy-loss functions return a per-token loss matrix [B, T]; `aggregate` reduces it to a scalar.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from hadw import metrics as M
from hadw.core.registry import Registry

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
AGGREGATIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.bool()
    return values.masked_fill(~mask, 0.0).sum() / mask.sum().clamp(min=1)


def aggregate(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, norm_length: int | None = None) -> torch.Tensor:
    """Reduce a [B, T] token loss to a scalar.

    token-mean:               Σ_{i,t} ℓ / Σ_{i,t} 1 (DAPO: every token weighs the same)
    seq-mean-token-mean:      mean_i (Σ_t ℓ / |o_i|) (GRPO, GSPO: every response weighs the same)
    seq-mean-token-sum-norm:  mean_i (Σ_t ℓ / L), L a constant (Dr. GRPO; default L = T)
    """
    mask = mask.bool()
    loss_mat = loss_mat.masked_fill(~mask, 0.0)  # padding may hold anything, even inf
    if mode == "token-mean":
        return loss_mat.sum() / mask.sum().clamp(min=1)
    seq_sum = loss_mat.sum(dim=-1)
    if mode == "seq-mean-token-mean":
        return (seq_sum / mask.sum(dim=-1).clamp(min=1)).mean()
    if mode == "seq-mean-token-sum-norm":
        return (seq_sum / float(norm_length or loss_mat.shape[-1])).mean()
    raise ValueError(f"unknown loss aggregation {mode!r}; allowed: {', '.join(AGGREGATIONS)}")


def _token_advantages(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return advantages.unsqueeze(-1).expand_as(like) if advantages.dim() == 1 else advantages


def _clipped_surrogate(ratio, adv, clip_low, clip_high):
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    return torch.maximum(unclipped, clipped)


def token_clip_loss(logprobs, old_logprobs, advantages, clip_low: float, clip_high: float, mask=None):
    """GRPO / DAPO: per-token ratio π/π_old, clipped to [1 − ε_low, 1 + ε_high]. Returns (loss [B,T], ratio [B,T]).

    mask is unused (each token stands alone); it is accepted so every policy loss has one signature."""
    ratio = torch.exp(logprobs - old_logprobs)
    adv = _token_advantages(advantages, ratio)
    return _clipped_surrogate(ratio, adv, clip_low, clip_high), ratio


def sequence_clip_loss(logprobs, old_logprobs, advantages, clip_low: float, clip_high: float, mask=None):
    """GSPO: s_i = exp(mean_t log(π/π_old)), the length-normalised sequence ratio, clipped per sequence.

    The token-level form s_{i,t} = sg[s_i] · π_t / sg[π_t] has the value s_i on every token and the
    gradient of s_i, so the usual aggregation applies unchanged.
    """
    mask = torch.ones_like(logprobs) if mask is None else mask.to(logprobs.dtype)
    log_ratio = (logprobs - old_logprobs) * mask
    seq_log_ratio = log_ratio.sum(-1) / mask.sum(-1).clamp(min=1)
    token_log_ratio = seq_log_ratio.detach().unsqueeze(-1) + logprobs - logprobs.detach()
    ratio = torch.exp(token_log_ratio)
    adv = _token_advantages(advantages, ratio)
    return _clipped_surrogate(ratio, adv, clip_low, clip_high), ratio


# name -> f(logprobs, old_logprobs, advantages, clip_low, clip_high, mask) -> (loss [B, T], ratio [B, T])
POLICY_LOSSES = Registry("policy loss", {"token_clip": token_clip_loss, "sequence_clip": sequence_clip_loss})


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(π ‖ π_ref) from samples of π: k1 = log r, k2 = ½(log r)², k3 = r⁻¹ − 1 + log r."""
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        # Clamp before exp: a token the reference finds near-impossible must not overflow the loss.
        neg = (-log_ratio).clamp(-20.0, 20.0)
        return torch.exp(neg) - neg - 1
    raise ValueError(f"unknown KL estimator {estimator!r}; allowed: k1, k2, k3")


@dataclass(frozen=True)
class LossSpec:
    """The objective of one algorithm. Presets in LOSS_PRESETS carry the paper's Table 8 clip values."""

    policy_loss: str = "token_clip"
    clip_low: float = 0.2
    clip_high: float = 0.2
    aggregation: str = "seq-mean-token-mean"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    norm_length: int | None = None  # L for seq-mean-token-sum-norm


LOSS_PRESETS: dict[str, LossSpec] = {
    "grpo": LossSpec("token_clip", 0.2, 0.2, "seq-mean-token-mean"),
    "gspo": LossSpec("sequence_clip", 3e-4, 4e-4, "seq-mean-token-mean"),
    "dapo": LossSpec("token_clip", 0.2, 0.28, "token-mean"),
}


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    spec: LossSpec,
    ref_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The full objective for one mini-batch: policy loss + β·KL − entropy bonus, and its metrics.

    Metrics are detached 0-dim tensors on the loss's device, not floats: reading a value is a host
    sync (a GPU stall), so the caller converts them all at once, once per optimiser step.
    """
    if spec.policy_loss not in POLICY_LOSSES:
        raise ValueError(f"unknown policy loss {spec.policy_loss!r}; allowed: {', '.join(POLICY_LOSSES)}")
    loss_mat, ratio = POLICY_LOSSES[spec.policy_loss](
        logprobs, old_logprobs, advantages, spec.clip_low, spec.clip_high, mask=response_mask
    )
    loss = aggregate(loss_mat, response_mask, spec.aggregation, spec.norm_length)
    metrics = _ratio_metrics(ratio.detach(), _token_advantages(advantages, ratio), response_mask, spec)
    metrics[M.PG_LOSS] = loss.detach()
    metrics[M.PPO_KL] = masked_mean((old_logprobs - logprobs).detach(), response_mask)
    if spec.kl_coef and ref_logprobs is not None:
        kl = aggregate(kl_penalty(logprobs, ref_logprobs, spec.kl_estimator), response_mask, spec.aggregation)
        loss = loss + spec.kl_coef * kl
        metrics[M.KL_LOSS] = kl.detach()
    if entropy is not None:
        mean_entropy = aggregate(entropy, response_mask, spec.aggregation)
        metrics[M.ENTROPY] = mean_entropy.detach()
        if spec.entropy_coef:
            loss = loss - spec.entropy_coef * mean_entropy
    return loss, metrics


def _ratio_metrics(ratio, adv, mask, spec: LossSpec) -> dict[str, torch.Tensor]:
    """Clip fractions and ratio mean/min/max over the unmasked tokens, as 0-dim tensors (no host sync)."""
    mask = mask.bool()
    clipped_low = (ratio < 1 - spec.clip_low) & (adv < 0) & mask
    clipped_high = (ratio > 1 + spec.clip_high) & (adv > 0) & mask
    n = mask.sum().clamp(min=1)
    # Masked min/max without boolean indexing (which syncs to learn the result's size); an all-masked
    # batch reports 1 for all three, as "no change".
    any_real = mask.any()
    ratio_mean = torch.where(any_real, masked_mean(ratio, mask), 1.0)
    ratio_min = torch.where(any_real, ratio.masked_fill(~mask, float("inf")).amin(), 1.0)
    ratio_max = torch.where(any_real, ratio.masked_fill(~mask, float("-inf")).amax(), 1.0)
    return {
        M.PG_CLIPFRAC_LOWER: clipped_low.sum() / n,
        M.PG_CLIPFRAC: clipped_high.sum() / n,
        M.RATIO_MEAN: ratio_mean,
        M.RATIO_MIN: ratio_min,
        M.RATIO_MAX: ratio_max,
    }
