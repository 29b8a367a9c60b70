"""The reward-function interface and the name -> reward registry.

A reward function is any callable `(completions: list[str], answers: list[str]) -> list[float]` with a
`name`. The built-ins are RewardFunctions: a per-item function plus whether it must run isolated (in the
verifier pool, with a per-item timeout) or may run in-process. `run_reward` evaluates either kind and
never raises for a bad item: the item scores 0 and is counted as an error or a timeout.

Every reward runs under the timeout: isolated ones in the pool (the worker is killed), in-process and
plain batch functions in a daemon thread that is abandoned when it overruns (Python cannot kill a
thread, but training goes on). A score that is NaN/inf, None, not a number, or a batch result of the
wrong length is an item error (scored 0 and counted by kind: ERROR_KINDS), never a crash or a broadcast of
one score to all items; sys.exit and os._exit inside a reward thread are caught and counted the same way.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hadw.core.registry import Registry
from hadw.errors import UserError
from hadw.processes import RunningClock
from hadw.rewards import verifiers

# The score checks and failure kinds live in hadw.rewards.scores, below both this module and the pool that it
# runs rewards in; this module keeps exporting them under their old home (__all__), hadw.rewards.base.X works.
from hadw.rewards.scores import (
    ERROR_KINDS,
    EXITED,
    FLOAT32_MAX,
    NON_FINITE,
    NONE,
    NOT_A_NUMBER,
    OUT_OF_RANGE,
    RAISED,
    TIMEOUT,
    WRONG_LENGTH,
    ItemError,
    RewardExit,
    ScoreError,
    check_score,
)
from hadw.rewards.scores import item_failure as _failure

DEFAULT_TIMEOUT_S = 5.0
MAX_MESSAGES = 10


class RewardFn(Protocol):
    name: str

    def __call__(self, completions: list[str], answers: list[str]) -> list[float]: ...


@dataclass(frozen=True)
class ItemScores:
    """Scores of one reward over a batch, with the items that failed (scored 0)."""

    scores: list[float]
    num_timeouts: int = 0
    num_errors: int = 0  # failed items other than timeouts
    messages: list[str] = field(default_factory=list)  # first few error / timeout messages
    kinds: dict[str, int] = field(default_factory=dict)  # failed items by kind (ERROR_KINDS)
    first_error: ItemError | None = None  # the batch's first failed item

    @property
    def all_failed(self) -> bool:
        """True when every item failed (a broken reward, not a bad completion)."""
        return bool(self.scores) and sum(self.kinds.values()) == len(self.scores)

    @staticmethod
    def from_items(scores: list[float], failures: list[ItemError]) -> ItemScores:
        """scores (0 at failed items) and the failures, tallied by kind."""
        failures = sorted(failures, key=lambda f: f.row)
        kinds = {k: n for k in ERROR_KINDS if (n := sum(f.kind == k for f in failures))}
        timeouts = kinds.get(TIMEOUT, 0)
        messages = [f.message for f in failures[:MAX_MESSAGES]]
        first = failures[0] if failures else None
        return ItemScores(scores, timeouts, len(failures) - timeouts, messages, kinds, first)


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


_REAL_OS_EXIT = os._exit
_THREAD_PREFIX = "hadw-reward"


_GUARDED_PID: int | None = None  # the process whose reward threads are guarded (not a child forked from one)


def _guarded_os_exit(code: int) -> None:
    """os._exit, except in a reward thread of the guarded process, where it raises RewardExit: a reward cannot
    end the trainer. A child forked from a reward thread (multiprocessing) exits for real."""
    if os.getpid() == _GUARDED_PID and threading.current_thread().name.startswith(_THREAD_PREFIX):
        raise RewardExit(code)
    _REAL_OS_EXIT(code)


def _guard_os_exit() -> None:
    """Route os._exit through _guarded_os_exit (idempotent; other threads keep the real os._exit)."""
    global _GUARDED_PID
    _GUARDED_PID = os.getpid()
    if os._exit is not _guarded_os_exit:
        os._exit = _guarded_os_exit  # type: ignore[assignment]


def _get(box: queue.SimpleQueue, timeout_s: float | None) -> Any:
    """box.get() within timeout_s seconds of running time (queue.Empty after): the time this process was stopped
    (SIGSTOP / Ctrl-Z) is not charged (hadw.processes.RunningClock)."""
    if timeout_s is None:
        return box.get()
    clock = RunningClock()
    deadline = clock() + timeout_s
    while True:
        now = clock()
        try:
            return box.get(timeout=max(0.0, min(deadline - now, clock.poll_s)))
        except queue.Empty:
            if clock() >= deadline:
                raise


class _Cwd:
    """The working directory a reward thread started in, put back after each call while the caller still
    waits for the thread: a reward that changes directory (a sandbox for generated code) must not move the
    trainer or the next reward. The working directory is the whole process's: once the caller has given up on
    the thread (abandon(), a timeout), the thread never touches it again; the caller puts it back itself, and
    what the thread does later cannot move a run that has since moved on (issue 39, finding 11)."""

    def __init__(self) -> None:
        self.path = os.getcwd()
        self.lock = threading.Lock()
        self.abandoned = False

    def restore(self) -> None:
        """Back to self.path, unless abandoned (the caller may have chdir'ed since: it owns the directory)."""
        with self.lock:
            if not self.abandoned:
                with contextlib.suppress(OSError):
                    os.chdir(self.path)

    def run(self, call: Callable[[], object]) -> object:
        """call(), then restore()."""
        try:
            return call()
        finally:
            self.restore()

    def abandon(self) -> None:
        """The caller gives up on the thread: back to self.path now, and never again from the thread."""
        with self.lock:
            self.abandoned = True
            with contextlib.suppress(OSError):
                if os.getcwd() != self.path:
                    os.chdir(self.path)


def _per_item(
    item: Callable[[int], object], n: int, timeout_s: float | None, give_up_after: int | None = None
) -> ItemScores:
    """item(j) for j in range(n) in a worker thread; an item that takes longer than timeout_s scores 0
    (timeout) and the thread is abandoned (Python cannot kill a thread); the remaining items continue in a
    fresh thread. Every failure (an exception, sys.exit / os._exit, a bad score) scores 0 and is counted.
    give_up_after: that many timeouts in a row count the remaining items as timeouts without calling them
    (a reward that hangs on everything costs a few timeouts, not n)."""
    _guard_os_exit()
    scores, failures = [0.0] * n, []
    i, in_a_row = 0, 0
    while i < n:
        if give_up_after is not None and in_a_row >= give_up_after:
            message = f"not called: the reward timed out on {in_a_row} items in a row"
            failures += [ItemError(j, TIMEOUT, message) for j in range(i, n)]
            break
        results: queue.SimpleQueue = queue.SimpleQueue()
        cwd = _Cwd()

        def work(start: int = i, results: queue.SimpleQueue = results, cwd: _Cwd = cwd) -> None:
            for j in range(start, n):
                try:
                    results.put((j, None, check_score(cwd.run(lambda j=j: item(j)))))
                except BaseException as e:  # SystemExit / os._exit included: counted, never fatal
                    results.put((j, _failure(j, e), 0.0))

        threading.Thread(target=work, daemon=True, name=_THREAD_PREFIX).start()
        while i < n:
            try:
                j, failure, value = _get(results, timeout_s)
            except queue.Empty:
                cwd.abandon()
                failures.append(ItemError(i, TIMEOUT, f"no result within {timeout_s:g} s"))
                i, in_a_row = i + 1, in_a_row + 1
                break  # abandon the stuck thread; go on with the next item in a new one
            in_a_row = 0
            if failure is None:
                scores[j] = value
            else:
                failures.append(failure)
            i = j + 1
    return ItemScores.from_items(scores, failures)


def _in_process(
    fn: Callable[[str, str], float],
    completions: Sequence[str],
    answers: Sequence[str],
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
) -> ItemScores:
    """A per-item fn in a worker thread under timeout_s per item (_per_item)."""
    return _per_item(lambda j: fn(completions[j], answers[j]), len(completions), timeout_s)


def _call_with_timeout(call: Callable[[], object], timeout_s: float | None) -> object:
    """call() in a daemon thread; TimeoutError if it has not returned within timeout_s. Whatever it raises
    (SystemExit and os._exit included) is raised here."""
    _guard_os_exit()
    box: queue.SimpleQueue = queue.SimpleQueue()
    cwd = _Cwd()

    def work() -> None:
        try:
            box.put((True, cwd.run(call)))
        except BaseException as e:  # SystemExit / RewardExit too: handed to the caller, never lost
            box.put((False, e))

    threading.Thread(target=work, daemon=True, name=_THREAD_PREFIX).start()
    try:
        ok, value = _get(box, timeout_s)
    except queue.Empty:
        cwd.abandon()
        raise TimeoutError(f"no result within {timeout_s:g} s") from None
    if not ok:
        raise value  # type: ignore[misc]
    return value


def run_batch(name: str, call: Callable[[list[int]], Sequence[object]], n: int, timeout_s: float | None) -> ItemScores:
    """A batch reward: call(rows) returns one score per row. One call for all n rows, given timeout_s per
    item; if it raises, exits or times out, item by item (call([j])) to find the bad items. A result of the
    wrong length makes every item an error (never a broadcast of one score to all); a bad score is an item
    error of its kind."""
    budget = None if timeout_s is None else timeout_s * max(n, 1)
    try:
        result = list(_call_with_timeout(lambda: call(list(range(n))), budget))  # type: ignore[arg-type]
    except BaseException as err:
        if isinstance(err, KeyboardInterrupt):
            raise
        give_up = 2 if isinstance(err, TimeoutError) else None  # hung as a batch: likely hangs on every item
        return _per_item(lambda j: _single(name, call, j), n, timeout_s, give_up)
    return _batch_scores(name, result, n)


def _batch_scores(name: str, result: Sequence[object], n: int) -> ItemScores:
    """A batch call's result as scores: the wrong length fails every item, a bad score its own item."""
    if len(result) != n:
        message = f"reward {name!r} returned {len(result)} scores for {n} items"
        return ItemScores.from_items([0.0] * n, [ItemError(j, WRONG_LENGTH, message) for j in range(n)])
    scores, failures = [0.0] * n, []
    for j, value in enumerate(result):
        try:
            scores[j] = check_score(value)
        except ScoreError as e:
            failures.append(ItemError(j, e.kind, str(e)))
    return ItemScores.from_items(scores, failures)


def run_batch_isolated(
    name: str, call: Callable[..., Sequence[object]], args: Callable[[list[int]], tuple], n: int, timeout_s: float
) -> ItemScores:
    """run_batch in the verifier pool: call(*args(rows)) in a worker's main thread (signal.alarm works there),
    killed with its process when it overruns. One call for the n rows (timeout_s per item); if it fails, the
    rows one by one, as many at once as the pool has workers; after a batch that timed out, two timeouts in a
    row count the remaining rows as timeouts without calling them (a reward that hangs on everything)."""
    from hadw.rewards.pool import get_pool

    pool = get_pool()
    (whole,) = pool.call(call, [args(list(range(n)))], timeout_s * max(n, 1))
    if whole.status == "ok":
        return _batch_scores(name, whole.result, n)  # type: ignore[arg-type]
    give_up = 2 if whole.status == "timeout" else None
    scores, failures, in_a_row, start = [0.0] * n, [], 0, 0
    while start < n:
        if give_up is not None and in_a_row >= give_up:
            message = f"not called: the reward timed out on {in_a_row} items in a row"
            failures += [ItemError(j, TIMEOUT, message) for j in range(start, n)]
            break
        rows = list(range(start, min(n, start + pool.num_workers)))
        for j, outcome in zip(rows, pool.call(call, [args([j]) for j in rows], timeout_s), strict=True):
            in_a_row = in_a_row + 1 if outcome.status == "timeout" else 0
            try:
                scores[j] = check_score(_single_outcome(name, outcome))
            except ScoreError as e:
                failures.append(ItemError(j, e.kind, str(e)))
        start = rows[-1] + 1
    return ItemScores.from_items(scores, failures)


def _single_outcome(name: str, outcome) -> object:
    """The one score of a one-row call in the pool; ScoreError of the failure's kind otherwise."""
    if outcome.status == "timeout":
        raise ScoreError(TIMEOUT, outcome.message)
    if outcome.status != "ok":
        raise ScoreError(outcome.kind or RAISED, outcome.message)
    if len(outcome.result) != 1:
        raise ScoreError(WRONG_LENGTH, f"reward {name!r} returned {len(outcome.result)} scores for 1 item")
    return outcome.result[0]


def _single(name: str, call: Callable[[list[int]], Sequence[object]], j: int) -> object:
    result = list(call([j]))  # type: ignore[arg-type]
    if len(result) != 1:
        raise ScoreError(WRONG_LENGTH, f"reward {name!r} returned {len(result)} scores for 1 item")
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
        call = lambda rows: fn([completions[j] for j in rows], [answers[j] for j in rows])
        return run_batch(getattr(fn, "name", type(fn).__name__), call, len(completions), timeout_s)
    if not fn.isolated or timeout_s is None or not completions:
        return _in_process(fn.item_fn, completions, answers, timeout_s)
    from hadw.rewards.pool import get_pool

    try:
        pickle.dumps(fn.item_fn)
    except Exception as e:
        raise ValueError(
            f"reward {fn.name!r} runs in the verifier pool, so its item_fn must be picklable (a module-level "
            f"function): {e}"
        ) from None
    outcomes = get_pool().map(fn.item_fn, completions, answers, timeout_s)
    failures = [
        ItemError(j, TIMEOUT if o.status == "timeout" else o.kind or RAISED, o.message)
        for j, o in enumerate(outcomes)
        if o.status != "ok"
    ]
    return ItemScores.from_items([o.value if o.status == "ok" else 0.0 for o in outcomes], failures)


class RewardFailure(UserError):
    """A reward failed on every item for too many consecutive batches: it is broken, not the completions."""


class FailureWatch:
    """Makes a reward's errors visible: its first failed item (kind, message, row) is reported once via
    `report(name, line, error, row)`, failed items are counted by kind in `counts`, and `max_failed` consecutive
    batches in which every item failed raise RewardFailure naming the reward and the error (0 = never)."""

    def __init__(self, name: str, max_failed: int, report: Callable[[str, str, ItemError, dict], None]):
        self.name, self.max_failed, self.report = name, max_failed, report
        self.counts: dict[str, int] = {}
        self.streak, self.reported = 0, False

    def see(
        self,
        kinds: Mapping[str, int],
        first: ItemError | None,
        all_failed: bool,
        rows: Sequence[Mapping[str, Any]] = (),
        what: str = "steps",
    ) -> None:
        """One batch of the reward: its failed items by kind, the first one, whether every item failed, and
        the batch's rows (what the report shows of the first failed item)."""
        for kind, n in kinds.items():
            self.counts[kind] = self.counts.get(kind, 0) + n
        if first is not None and not self.reported:
            self.reported = True
            row = {k: str(v)[:500] for k, v in dict(rows[first.row]).items()} if first.row < len(rows) else {}
            shown = {k: v[:100] for k, v in row.items()}
            line = f"reward {self.name!r}: first error ({first.kind}) on row {first.row}: {first.message}"
            self.report(self.name, line + (f"; row: {shown}" if shown else ""), first, row)
        self.streak = self.streak + 1 if all_failed else 0
        if self.max_failed and self.streak >= self.max_failed and first is not None:
            raise RewardFailure(
                f"reward {self.name!r} failed on every item for {self.streak} consecutive {what} ({first.kind}: "
                f"{first.message}); fix the reward, or allow it with reward.max_failed_steps=0"
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


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ERROR_KINDS",
    "EXITED",
    "FLOAT32_MAX",
    "MAX_MESSAGES",
    "NONE",
    "NON_FINITE",
    "NOT_A_NUMBER",
    "OUT_OF_RANGE",
    "RAISED",
    "REWARDS",
    "TIMEOUT",
    "WRONG_LENGTH",
    "FailureWatch",
    "ItemError",
    "ItemScores",
    "RewardExit",
    "RewardFailure",
    "RewardFn",
    "RewardFunction",
    "ScoreError",
    "check_score",
    "get_reward",
    "register_reward",
    "run_batch",
    "run_batch_isolated",
    "run_reward",
]
