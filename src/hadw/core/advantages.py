"""Group-relative advantage estimators, selected by name.

Every estimator maps a flat reward tensor and a group index to per-response advantages:

    rewards:   [N] float, one scalar reward per response
    group_ids: [N] int, the prompt each response answers (any ids; groups need not be contiguous)

and returns a `GroupAdvantages` with per-response views of the group statistics, so HA-DW and the
diagnostics read the same numbers the loss is trained on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from hadw.core.groups import GroupIndex
from hadw.core.registry import Registry

StdKind = Literal["population", "sample"]


@dataclass(frozen=True)
class GroupAdvantages:
    """advantages, group_mean, group_std: [N] float; degenerate: [N] bool (all rewards of the group equal).

    `groups` is the dense group numbering, reusable by HA-DW so the batch is grouped only once.
    """

    advantages: torch.Tensor
    group_mean: torch.Tensor
    group_std: torch.Tensor
    degenerate: torch.Tensor
    groups: GroupIndex


AdvantageFn = Callable[..., GroupAdvantages]
ADVANTAGE_ESTIMATORS = Registry("advantage estimator")


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator: add an estimator under `name` (a taken name raises: see hadw.core.registry)."""
    return ADVANTAGE_ESTIMATORS.register(name)


def compute_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, estimator: str = "grpo", **options
) -> GroupAdvantages:
    """Dispatch to the estimator registered under `estimator` (see ADVANTAGE_ESTIMATORS)."""
    if estimator not in ADVANTAGE_ESTIMATORS:
        allowed = ", ".join(sorted(ADVANTAGE_ESTIMATORS))
        raise ValueError(f"unknown advantage estimator {estimator!r}; allowed: {allowed}")
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(
            f"rewards and group_ids must both be 1-D of equal length, got {tuple(rewards.shape)} "
            f"and {tuple(group_ids.shape)}"
        )
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.float32)
    return ADVANTAGE_ESTIMATORS[estimator](rewards, group_ids, **options)


def scale_advantages(advantages: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Every advantage times `scale`: the step-size control for HA-DW's λ (a GRPO arm whose advantages are
    scaled as much as Φ scales them on average separates "a larger step" from re-weighting).

    advantages: [N]; returns [N] (the same tensor when scale == 1, so the default path is bit-for-bit)."""
    return advantages if scale == 1.0 else advantages * scale


def _ddof(std: StdKind) -> int:
    if std not in ("population", "sample"):
        raise ValueError(f"std must be 'population' or 'sample', got {std!r}")
    return 0 if std == "population" else 1


def _group_stats(rewards: torch.Tensor, group_ids: torch.Tensor, ddof: int):
    index = GroupIndex.from_ids(group_ids)
    mean = index.mean(rewards)[index.inverse]
    std = index.std(rewards, ddof=ddof)[index.inverse]
    degenerate = index.is_constant(rewards)[index.inverse]
    return index, mean, std, degenerate


def _normalise(centred: torch.Tensor, std: torch.Tensor, std_floor: float, eps: float) -> torch.Tensor:
    # The floor keeps a near-zero std (rewards equal up to rounding) from blowing advantages up;
    # eps is the additive constant verl (1e-6) and TRL (1e-4) use, for exact parity with them.
    return centred / (std.clamp(min=std_floor) + eps)


@register_advantage("grpo")
def grpo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    std: StdKind = "population",
    std_floor: float = 1e-6,
    eps: float = 0.0,
) -> GroupAdvantages:
    """(r − group mean) / group std. Population std reproduces the paper's Figure 1(b)."""
    index, mean, gstd, degenerate = _group_stats(rewards, group_ids, _ddof(std))
    adv = _normalise(rewards - mean, gstd, std_floor, eps)
    adv = torch.where(degenerate, torch.zeros_like(adv), adv)
    return GroupAdvantages(adv, mean, gstd, degenerate, index)


@register_advantage("drgrpo")
def drgrpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, std: StdKind = "population") -> GroupAdvantages:
    """Dr. GRPO: r − group mean, no division by the std (removes the difficulty re-weighting of std)."""
    index, mean, gstd, degenerate = _group_stats(rewards, group_ids, _ddof(std))
    adv = torch.where(degenerate, torch.zeros_like(rewards), rewards - mean)
    return GroupAdvantages(adv, mean, gstd, degenerate, index)


@register_advantage("rloo")
def rloo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, std: StdKind = "population") -> GroupAdvantages:
    """REINFORCE leave-one-out: r_i − mean of the other responses of the group (0 for singletons)."""
    index, mean, gstd, degenerate = _group_stats(rewards, group_ids, _ddof(std))
    n = index.counts[index.inverse].to(rewards.dtype)
    others_mean = (index.sum(rewards)[index.inverse] - rewards) / (n - 1).clamp(min=1)
    adv = torch.where(n > 1, rewards - others_mean, torch.zeros_like(rewards))
    adv = torch.where(degenerate, torch.zeros_like(adv), adv)
    return GroupAdvantages(adv, mean, gstd, degenerate, index)


@register_advantage("grpo_batch_std")
def grpo_batch_std_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    std: StdKind = "population",
    std_floor: float = 1e-6,
    eps: float = 0.0,
) -> GroupAdvantages:
    """(r − group mean) / std of the whole batch (REINFORCE++-baseline style, robust for small G)."""
    ddof = _ddof(std)
    index, mean, gstd, degenerate = _group_stats(rewards, group_ids, ddof)
    batch_std = rewards.std(correction=ddof) if rewards.numel() > ddof else rewards.new_zeros(())
    adv = _normalise(rewards - mean, batch_std.expand_as(rewards), std_floor, eps)
    adv = torch.where(degenerate, torch.zeros_like(adv), adv)
    return GroupAdvantages(adv, mean, gstd, degenerate, index)
