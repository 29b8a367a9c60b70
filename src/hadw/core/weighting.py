"""HA-DW weights (docs/method.md §3.2, paper eqs. 13–17).

Per prompt:    diff = p̂ − C,   M = |diff|
Per response:  D = −sgn(Â) · sgn(diff),   Φ = λ · exp(D · M)

On a prompt harder than the anchor (p̂ < C) a correct response (Â > 0) is boosted by e^{+M} and a wrong
one damped by e^{−M}; on an easier prompt the reverse. Φ multiplies the advantage of every token of its
response, so the loss is unchanged apart from Â → Â·Φ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hadw.core.anchors import Anchor, KeyedAnchor, PromptAnchor
from hadw.core.groups import GroupIndex, group_mean

DEFAULT_LAMBDA = 1.3  # paper Table 7's best; the authors' code hard-codes 1.5
# How Φ is scaled after eq. 17: "none" (the paper: Φ = λ·exp(D·M)) | "batch" (Φ divided by its mean over the
# batch's informative responses, Â ≠ 0: HA-DW as pure re-weighting, the step size of the base algorithm kept).
NORMALIZE = ("none", "batch")


def hadw_weights(
    advantages: torch.Tensor, p_hat: torch.Tensor, anchor: float | torch.Tensor, lam: float = DEFAULT_LAMBDA
) -> torch.Tensor:
    """Φ for each response.

    advantages: [N] the group-relative advantages Â (only their sign is used)
    p_hat:      [N] the response's group success rate, from the correctness reward
    anchor:     C for this batch: a float, or [N] one C per response (per_level / per_source)
    returns:    [N] Φ > 0
    """
    # D·M = −sgn(Â)·sgn(diff)·|diff| = −sgn(Â)·diff: one exp of one product, no branches.
    return torch.exp(torch.sign(advantages) * (anchor - p_hat)).mul_(lam)


def normalize_weights(weights: torch.Tensor, advantages: torch.Tensor, normalize: str = "none") -> torch.Tensor:
    """Φ rescaled as `normalize` says (see NORMALIZE).

    weights: [N] Φ; advantages: [N] Â (Φ only acts where Â ≠ 0, so only those responses set the mean).
    returns: [N]; "batch": mean 1 over the informative responses (λ cancels: it is a global factor of Φ)
    and exactly 1 on the others (where Φ multiplies Â = 0); unchanged when no response is informative.
    """
    if normalize == "none":
        return weights
    if normalize != "batch":
        raise ValueError(f"HA-DW normalize={normalize!r} is not allowed; allowed: {', '.join(NORMALIZE)}")
    active = advantages != 0
    count = int(torch.count_nonzero(active))
    if count == 0:
        return weights
    mean = weights[active].sum(dtype=torch.float64) / count
    return torch.where(active, weights / mean.to(weights.dtype), torch.ones_like(weights))


@dataclass(frozen=True)
class HADWResult:
    """advantages: [N] Â·Φ (what the loss trains on); weights: [N] Φ; metrics: scalars for logging."""

    advantages: torch.Tensor
    weights: torch.Tensor
    metrics: dict[str, float]


def weight_metrics(weights: torch.Tensor, advantages: torch.Tensor, lam: float, anchor: float) -> dict[str, float]:
    """Φ statistics over the responses Φ acts on (Â ≠ 0), and the share boosted / damped relative to λ.

    Cheap on purpose (it runs every step on every response): a response with Â = 0 has Φ = λ exactly, and
    every informative group holds both a response above λ and one below it, so the min and max over all
    responses equal those over the active ones, and the active mean follows from the total.
    """
    n = int(weights.numel())
    if n == 0:
        return {
            "hadw/anchor": float(anchor),
            "hadw/phi_mean": lam,
            "hadw/phi_min": lam,
            "hadw/phi_max": lam,
            "hadw/frac_boosted": 0.0,
            "hadw/frac_damped": 0.0,
        }
    num_active = int(torch.count_nonzero(advantages))
    phi_min, phi_max = torch.aminmax(weights)
    total = float(weights.sum(dtype=torch.float64))
    phi_mean = (total - lam * (n - num_active)) / num_active if num_active else lam
    return {
        "hadw/anchor": float(anchor),
        "hadw/phi_mean": phi_mean,
        "hadw/phi_min": float(phi_min),
        "hadw/phi_max": float(phi_max),
        "hadw/frac_boosted": int(torch.count_nonzero(weights > lam)) / n,
        "hadw/frac_damped": int(torch.count_nonzero(weights < lam)) / n,
    }


def apply_hadw(
    advantages: torch.Tensor,
    correctness: torch.Tensor,
    groups: torch.Tensor | GroupIndex,
    anchor: Anchor,
    lam: float = DEFAULT_LAMBDA,
    enabled: bool = True,
    keys: Sequence[Any] | None = None,
    normalize: str = "none",
) -> HADWResult:
    """Rescale one rollout batch's advantages; updates `anchor` exactly once.

    advantages:  [N] Â from the base algorithm (total reward)
    correctness: [N] 0/1 correctness signal (p̂ and the batch accuracy y_t come from it, never from a
                 shaped total reward); pass ALL responses of the rollout batch, before any filter
    groups:      [N] prompt of each response, or the batch's GroupIndex (e.g. GroupAdvantages.groups)
    keys:        N labels, one per response, for the anchors that need them (anchor.needs_keys):
                 difficulty level (per_level), data source (per_source) or prompt id (per_prompt)
    normalize:   "none" (the paper's Φ) | "batch" (Φ / its mean over the informative responses; see
                 normalize_weights): relative weights only, so λ and the batch's mean Φ no longer scale the step
    With enabled=False the anchor still tracks accuracy (so it can be logged) and Φ = 1 everywhere.
    """
    correctness = correctness.to(torch.float32)
    batch_accuracy = float(correctness.mean()) if correctness.numel() else 0.0
    p_hat = group_mean(correctness, groups)
    if anchor.needs_keys and (keys is None or len(keys) != correctness.numel()):
        got = "none" if keys is None else f"{len(keys)}"
        raise ValueError(f"the {anchor.kind} anchor needs one key per response ({correctness.numel()}); got {got}")
    if isinstance(anchor, KeyedAnchor):
        c_rows = anchor.observe_keyed(correctness, keys)
        c: float | torch.Tensor = c_rows.to(advantages.device, advantages.dtype)
        c_log = float(c_rows.mean()) if c_rows.numel() else 0.0  # the response-weighted mean anchor
    elif isinstance(anchor, PromptAnchor):
        c, p_tilde = anchor.observe_prompts(correctness, keys)
        p_hat, c_log = p_tilde.to(p_hat.device), c
    else:
        c = c_log = anchor.observe(batch_accuracy)
    if not enabled:
        ones = torch.ones_like(advantages)
        return HADWResult(advantages, ones, {"hadw/anchor": c_log, "hadw/batch_accuracy": batch_accuracy})
    weights = normalize_weights(hadw_weights(advantages, p_hat.to(advantages.dtype), c, lam), advantages, normalize)
    # a normalised Φ has mean 1 over the informative responses: it is "boosted" / "damped" relative to 1, not λ
    metrics = weight_metrics(weights, advantages, lam if normalize == "none" else 1.0, c_log)
    if normalize != "none" and bool((advantages != 0).any()):  # min / max over the responses Φ acts on
        phi_min, phi_max = torch.aminmax(weights[advantages != 0])
        metrics |= {"hadw/phi_min": float(phi_min), "hadw/phi_max": float(phi_max)}
    metrics["hadw/batch_accuracy"] = batch_accuracy
    return HADWResult(advantages * weights, weights, metrics)
