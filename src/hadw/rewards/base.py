"""The reward-function interface and the name -> reward registry.

A reward function is any callable `(completions: list[str], answers: list[str]) -> list[float]` with a
`name`. The built-ins are RewardFunctions: a per-item function plus whether it must run isolated (in the
verifier pool, with a per-item timeout) or may run in-process. `run_reward` evaluates either kind and
never raises for a bad item: the item scores 0 and is counted as an error or a timeout.

Every reward runs under the timeout: isolated ones in the pool (the worker is killed), in-process and
plain batch functions in a daemon thread that is abandoned when it overruns (Python cannot kill a
thread, but training goes on). A score that is NaN/inf, not a number, or a batch result of the wrong
length is an item error (scored 0 and counted), never a crash or a broadcast of one score to all items.
"""

from __future__ import annotations

import math
import pickle
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hadw.core.registry import Registry
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


def _as_score(value) -> float:
    """A finite float, else ValueError (an item error)."""
    score = float(value)
    if not math.isfinite(score):
        raise ValueError(f"score is {score} (scores must be finite)")
    return score


def _in_process(
    fn: Callable[[str, str], float],
    completions: Sequence[str],
    answers: Sequence[str],
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
) -> ItemScores:
    """fn per item in a worker thread; an item that takes longer than timeout_s scores 0 (timeout) and
    the thread is abandoned; the remaining items continue in a fresh thread."""
    n = len(completions)
    scores, messages, timeouts, errors = [0.0] * n, [], 0, 0
    i = 0
    while i < n:
        results: queue.SimpleQueue = queue.SimpleQueue()

        def work(start: int = i, results: queue.SimpleQueue = results) -> None:
            for j in range(start, n):
                try:
                    results.put((j, True, _as_score(fn(completions[j], answers[j]))))
                except Exception as e:
                    results.put((j, False, f"{type(e).__name__}: {e}"[:500]))

        threading.Thread(target=work, daemon=True, name="hadw-reward").start()
        while i < n:
            try:
                j, ok, value = results.get(timeout=timeout_s)
            except queue.Empty:
                timeouts += 1
                messages.append(f"no result within {timeout_s:g} s")
                i += 1
                break  # abandon the stuck thread; go on with the next item in a new one
            if ok:
                scores[j] = value
            else:
                errors += 1
                messages.append(value)
            i = j + 1
    return ItemScores(scores, timeouts, errors, messages[:MAX_MESSAGES])


def _call_with_timeout(call: Callable[[], object], timeout_s: float | None) -> object:
    """call() in a daemon thread; TimeoutError if it has not returned within timeout_s."""
    box: queue.SimpleQueue = queue.SimpleQueue()

    def work() -> None:
        try:
            box.put((True, call()))
        except Exception as e:
            box.put((False, e))

    threading.Thread(target=work, daemon=True, name="hadw-reward").start()
    try:
        ok, value = box.get(timeout=timeout_s)
    except queue.Empty:
        raise TimeoutError(f"no result within {timeout_s:g} s") from None
    if not ok:
        raise value  # type: ignore[misc]
    return value


def _batch(fn: RewardFn, completions: list[str], answers: list[str], timeout_s: float | None) -> ItemScores:
    """A plain batch callable: one call, given timeout_s per item. If it raises or times out, call it item by
    item to find the bad items. A result of the wrong length, or a non-finite score, is an item error."""
    n = len(completions)
    budget = None if timeout_s is None else timeout_s * max(n, 1)
    try:
        result = list(_call_with_timeout(lambda: fn(completions, answers), budget))
    except Exception:
        return _in_process(lambda c, a: _single(fn, c, a), completions, answers, timeout_s)
    if len(result) != n:
        message = f"reward {fn.name!r} returned {len(result)} scores for {n} items"
        return ItemScores([0.0] * n, 0, n, [message])
    scores, messages = [], []
    for value in result:
        try:
            scores.append(_as_score(value))
        except (TypeError, ValueError) as e:
            scores.append(0.0)
            messages.append(f"{type(e).__name__}: {e}"[:500])
    return ItemScores(scores, 0, len(messages), messages[:MAX_MESSAGES])


def _single(fn: RewardFn, completion: str, answer: str) -> float:
    result = list(fn([completion], [answer]))
    if len(result) != 1:
        raise ValueError(f"reward {fn.name!r} returned {len(result)} scores for 1 item")
    return result[0]


def run_reward(
    fn: RewardFn, completions: list[str], answers: list[str], timeout_s: float | None = DEFAULT_TIMEOUT_S
) -> ItemScores:
    """Evaluate one reward. Isolated RewardFunctions go to the pool with a per-item timeout; timeout_s=None
    runs them in-process without a timeout (debugging only: a pathological item can then hang)."""
    if len(completions) != len(answers):
        raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"reward timeout_s={timeout_s} must be > 0 (or None: no timeout, debugging only)")
    if not isinstance(fn, RewardFunction):
        return _batch(fn, completions, answers, timeout_s)
    if not fn.isolated or timeout_s is None or not completions:
        return _in_process(fn.item_fn, completions, answers, timeout_s)
    from hadw.rewards.pool import Outcome, get_pool

    try:
        pickle.dumps(fn.item_fn)
    except Exception as e:
        raise ValueError(
            f"reward {fn.name!r} runs in the verifier pool, so its item_fn must be picklable (a module-level "
            f"function): {e}"
        ) from None
    outcomes = get_pool().map(fn.item_fn, completions, answers, timeout_s)
    outcomes = [
        o if o.status != "ok" or math.isfinite(o.value) else Outcome("error", 0.0, f"score is {o.value}")
        for o in outcomes
    ]
    failed = [o.message for o in outcomes if o.status != "ok"]
    return ItemScores(
        scores=[o.value if o.status == "ok" else 0.0 for o in outcomes],
        num_timeouts=sum(o.status == "timeout" for o in outcomes),
        num_errors=sum(o.status == "error" for o in outcomes),
        messages=failed[:MAX_MESSAGES],
    )


REWARDS = Registry("reward")


def register_reward(fn: RewardFn, replace: bool = False) -> RewardFn:
    """Add a reward under fn.name (a taken name raises unless replace=True); returns fn."""
    return REWARDS.add(fn.name, fn, replace)


def get_reward(name: str) -> RewardFn:
    return REWARDS.get(name)


register_reward(RewardFunction("math", verifiers.math_item, isolated=True))
register_reward(RewardFunction("exact", verifiers.exact_item))
register_reward(RewardFunction("format", verifiers.format_item))
