"""Combine several rewards into one total, and single out the correctness signal HA-DW reads.

total[i]       = sum_k weight_k * reward_k(completion_i, answer_i)     (the base algorithm's advantage input)
correctness[i] = the designated correctness reward (0/1)                (HA-DW's p-hat and batch accuracy)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hadw.rewards.base import DEFAULT_TIMEOUT_S, MAX_MESSAGES, RewardFn, run_reward

if TYPE_CHECKING:  # torch is imported inside score(): pool workers import this package and start faster
    import torch


@dataclass(frozen=True)
class RewardSpec:
    """One term of the total reward: a registered reward name (or an explicit fn) and its weight."""

    name: str
    weight: float = 1.0
    fn: RewardFn | None = None  # None: look `name` up in the registry


@dataclass(frozen=True)
class RewardResult:
    """total, correctness and each per_reward value: float32 tensors of shape [N]."""

    total: torch.Tensor
    correctness: torch.Tensor
    per_reward: dict[str, torch.Tensor]
    num_timeouts: int
    num_errors: int
    messages: list[str] = field(default_factory=list)  # first few error / timeout messages


def score(
    completions: list[str],
    answers: list[str],
    specs: list[RewardSpec] | None = None,
    correctness: str = "math",
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    prompts: list[str] | None = None,
    columns: dict[str, list] | None = None,
) -> RewardResult:
    """Score N completions against their gold answers.

    specs: the weighted terms of `total` (default: [RewardSpec(correctness, 1.0)]). correctness: the name
    of the 0/1 reward HA-DW uses; it is evaluated even when it is not one of the specs, and a spec of the
    same name is evaluated once. A failing item scores 0 in that reward and is counted, never raised.
    prompts, columns: what rewards with TRL's signature receive besides the completions (loader.py).
    """
    import torch

    from hadw.rewards.loader import TRLReward, resolve_reward

    specs = specs if specs is not None else [RewardSpec(correctness)]
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate reward names in specs: {names}")
    fns = {spec.name: spec.fn or resolve_reward(spec.name) for spec in specs}
    if correctness not in fns:
        fns[correctness] = resolve_reward(correctness)

    per_reward, timeouts, errors, messages = {}, 0, 0, []
    for name, fn in fns.items():
        if isinstance(fn, TRLReward):
            result = fn.run(completions, answers, prompts, columns)
        else:
            result = run_reward(fn, completions, answers, timeout_s)
        per_reward[name] = torch.tensor(result.scores, dtype=torch.float32).reshape(len(completions))
        timeouts, errors = timeouts + result.num_timeouts, errors + result.num_errors
        messages += [f"{name}: {m}" for m in result.messages]

    correct = per_reward[correctness]
    if not bool(((correct == 0) | (correct == 1)).all()):
        raise ValueError(f"correctness reward {correctness!r} must be 0/1, got {correct.unique().tolist()}")
    total = torch.zeros(len(completions), dtype=torch.float32)
    for spec in specs:
        total += spec.weight * per_reward[spec.name]
    return RewardResult(total, correct, per_reward, timeouts, errors, messages[:MAX_MESSAGES])
