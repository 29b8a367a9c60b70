"""The reward-function interface and the name -> reward registry.

A reward function is any callable `(completions: list[str], answers: list[str]) -> list[float]` with a
`name`. The built-ins are RewardFunctions: a per-item function plus whether it must run isolated (in the
verifier pool, with a per-item timeout) or may run in-process. `run_reward` evaluates either kind and
never raises for a bad item: the item scores 0 and is counted as an error or a timeout.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hadw.rewards import verifiers

DEFAULT_TIMEOUT_S = 5.0
MAX_MESSAGES = 10


class RewardFn(Protocol):
    name: str

    def __call__(self, completions: list[str], answers: list[str]) -> list[float]: ...


@dataclass(frozen=True)
class ItemScores:
    """Scores of one reward over a batch, with the items that failed."""

    scores: list[float]
    num_timeouts: int = 0
    num_errors: int = 0
    messages: list[str] = field(default_factory=list)  # first few error / timeout messages


@dataclass(frozen=True)
class RewardFunction:
    """A reward defined per item. isolated=True: run in the verifier pool (needs a picklable item_fn)."""

    name: str
    item_fn: Callable[[str, str], float]
    isolated: bool = False

    def __call__(
        self, completions: list[str], answers: list[str], timeout_s: float | None = DEFAULT_TIMEOUT_S
    ) -> list[float]:
        return run_reward(self, completions, answers, timeout_s).scores


def _in_process(fn: Callable[[str, str], float], completions: Sequence[str], answers: Sequence[str]) -> ItemScores:
    scores, messages = [], []
    for completion, answer in zip(completions, answers, strict=True):
        try:
            scores.append(float(fn(completion, answer)))
        except Exception as e:
            scores.append(0.0)
            messages.append(f"{type(e).__name__}: {e}"[:500])
    return ItemScores(scores, 0, len(messages), messages[:MAX_MESSAGES])


def _batch(fn: RewardFn, completions: list[str], answers: list[str]) -> ItemScores:
    """A plain batch callable: one call; if it raises, call it item by item to find the bad items."""
    try:
        scores = [float(s) for s in fn(completions, answers)]
        if len(scores) != len(completions):
            raise ValueError(f"reward {fn.name!r} returned {len(scores)} scores for {len(completions)} items")
        return ItemScores(scores)
    except Exception:
        return _in_process(lambda c, a: fn([c], [a])[0], completions, answers)


def run_reward(
    fn: RewardFn, completions: list[str], answers: list[str], timeout_s: float | None = DEFAULT_TIMEOUT_S
) -> ItemScores:
    """Evaluate one reward. Isolated RewardFunctions go to the pool with a per-item timeout; timeout_s=None
    runs them in-process without a timeout (debugging only: a pathological item can then hang)."""
    if len(completions) != len(answers):
        raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
    if not isinstance(fn, RewardFunction):
        return _batch(fn, completions, answers)
    if not fn.isolated or timeout_s is None or not completions:
        return _in_process(fn.item_fn, completions, answers)
    from hadw.rewards.pool import get_pool

    try:
        pickle.dumps(fn.item_fn)
    except Exception as e:
        raise ValueError(
            f"reward {fn.name!r} runs in the verifier pool, so its item_fn must be picklable (a module-level "
            f"function): {e}"
        ) from None
    outcomes = get_pool().map(fn.item_fn, completions, answers, timeout_s)
    failed = [o.message for o in outcomes if o.status != "ok"]
    return ItemScores(
        scores=[o.value if o.status == "ok" else 0.0 for o in outcomes],
        num_timeouts=sum(o.status == "timeout" for o in outcomes),
        num_errors=sum(o.status == "error" for o in outcomes),
        messages=failed[:MAX_MESSAGES],
    )


REWARDS: dict[str, RewardFn] = {}


def register_reward(fn: RewardFn) -> RewardFn:
    """Add a reward under fn.name (replacing one of the same name); returns fn."""
    REWARDS[fn.name] = fn
    return fn


def get_reward(name: str) -> RewardFn:
    try:
        return REWARDS[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; allowed: {', '.join(REWARDS)}") from None


register_reward(RewardFunction("math", verifiers.math_item, isolated=True))
register_reward(RewardFunction("exact", verifiers.exact_item))
register_reward(RewardFunction("format", verifiers.format_item))
