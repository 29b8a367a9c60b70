"""A small pool of verifier processes with a per-item timeout.

math-verify guards itself with signal.alarm, which only works on the main thread. Here each item runs
in a worker process instead; if it takes longer than `timeout_s` the worker is killed and replaced, the
item scores 0 and is counted as a timeout. Workers are started lazily (spawn: a fresh interpreter, safe
after torch / CUDA / threads are up), reused across calls, and stopped at interpreter exit.

Scripts that use the pool must keep their top level under `if __name__ == "__main__":` (spawn re-imports
the main module in each worker).

`call` runs a whole function call in a worker instead (an import-path reward with TRL's signature: one call per
batch): in the worker's main thread, where the signal.alarm timeouts of math-verify work, in a process that is
killed when it overruns (a reward that loops forever leaves nothing running). A worker restores its working
directory after every call. Deadlines do not count the time the trainer was stopped (SIGSTOP / Ctrl-Z).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing as mp
import multiprocessing.util
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from hadw.errors import UserError
from hadw.processes import RunningClock, die_with_parent
from hadw.rewards.scores import RewardExit, check_score, item_failure

ItemFn = Callable[[str, str], float]
STARTUP_TIMEOUT_S = 120.0  # importing sympy + math-verify on a busy machine
MAX_START_RESTARTS = 3  # workers killed by a signal while starting, replaced within one call


class WorkerLoadError(UserError):
    """A function the pool was given could not be loaded in a worker (its module fails to import there)."""


def _name(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', fn)!s}"


@dataclass(frozen=True)
class Outcome:
    """status: "ok" (value is the score; `result` what a `call` returned), "error" (the function raised;
    message says what), "timeout", or "fatal" (a worker could not load the function; raised as WorkerLoadError,
    never returned)."""

    status: str
    value: float = 0.0
    message: str = ""
    kind: str = ""  # status "error": how it failed (hadw.rewards.scores.ERROR_KINDS)
    result: object = None  # a `call`'s return value, as a list


def _run(fn, kind: str, payload: tuple) -> Outcome:
    """One item (a checked score) or one call (its result as a list) of fn, in the worker's main thread; the
    working directory is restored after it (a reward that chdirs must not move the next one)."""

    def raise_exit(code: int) -> None:  # os._exit inside the reward: counted, the worker goes on
        raise RewardExit(code)

    cwd, real_exit = os.getcwd(), os._exit
    os._exit = raise_exit  # type: ignore[assignment]
    try:
        if kind == "item":
            return Outcome("ok", check_score(fn(*payload)))
        return Outcome("ok", result=list(fn(*payload)))
    except Exception as e:
        failure = item_failure(0, e)  # ScoreError: its kind; else "raised"
        return Outcome("error", 0.0, failure.message, failure.kind)
    except (SystemExit, RewardExit) as e:  # sys.exit / os._exit inside the reward
        return Outcome("error", 0.0, item_failure(0, e).message, item_failure(0, e).kind)
    finally:
        os._exit = real_exit  # type: ignore[assignment]
        with contextlib.suppress(OSError):
            os.chdir(cwd)


def _worker_main(conn: Connection, warm_up: bool, parent_pid: int | None = None) -> None:
    """Messages in: ("fn", fn) to load a function, ("item", (completion, answer)) or ("call", args), or None
    to stop. Messages out: "ready" after start-up / loading a function, an Outcome per item or call."""
    if parent_pid is not None:
        die_with_parent(parent_pid)
    # Ctrl-C, a closed terminal and `timeout` / a scheduler's kill of the job signal the whole process group: the
    # trainer stops at a safe point (it finishes the step and the final evaluation, whose rewards run here); a worker
    # that died with it would fail those items, or break the pipe the trainer sends the next item on (issue 39,
    # finding 12: the run then ended without its checkpoint). A worker still ends with its trainer (die_with_parent,
    # SIGKILL) and when the pool closes (close: SIGKILL after 1 s).
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    if warm_up:
        from hadw.rewards.verifiers import warm_up as _warm_up

        _warm_up()
    conn.send("ready")
    fn = None
    while True:
        try:
            message = conn.recv()
        except EOFError:  # parent went away
            return
        except Exception as e:  # the function could not be unpickled (e.g. its module fails to import)
            conn.send(Outcome("fatal", 0.0, f"{type(e).__name__}: {e}"))
            return
        if message is None:
            return
        kind, payload = message
        if kind == "fn":
            fn = payload
            conn.send("ready")
            continue
        outcome = _run(fn, kind, payload)
        try:
            conn.send(outcome)
        except Exception as e:  # a result that cannot be pickled (a generator of objects, a lock)
            message = f"the reward returned something that cannot be sent back ({type(e).__name__}: {e})"
            conn.send(Outcome("error", 0.0, message[:500], "not a number"))


class _Worker:
    """One process. `ready` is False while it starts or loads a function (no item deadline runs then)."""

    def __init__(self, ctx, warm_up: bool):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, warm_up, os.getpid()), daemon=True)
        self.process.start()
        child.close()
        self.since = time.monotonic()
        self.ready = False
        self.fn: ItemFn | None = None

    def load(self, fn: ItemFn) -> None:
        # Sent apart from the items: unpickling fn may import its module, which must not eat into an
        # item's timeout.
        self.conn.send(("fn", fn))
        self.fn, self.ready, self.since = fn, False, time.monotonic()

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


class VerifierPool:
    """`num_workers` processes; map(fn, completions, answers, timeout_s) -> one Outcome per item."""

    def __init__(self, num_workers: int = 2, start_method: str = "spawn", warm_up: bool = True):
        if not 1 <= num_workers <= MAX_WORKERS:  # no worker: map() would wait forever
            raise ValueError(f"num_workers={num_workers}: allowed 1 to {MAX_WORKERS}")
        self.ctx = mp.get_context(start_method)
        self.num_workers, self.warm_up = num_workers, warm_up
        self.workers: list[_Worker] = []
        self.pid = os.getpid()
        self.lock = threading.Lock()

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self.workers[self.workers.index(worker)] = _Worker(self.ctx, self.warm_up)

    def _hand_out(self, worker: _Worker, fn: Callable, kind: str, payload: tuple) -> bool:
        """Send `payload` to a ready, idle worker (True), or first `fn` when it holds another function (False: it
        answers "ready" once loaded). A worker found dead at the send (a kill since its last message: the pipe is
        broken) is replaced and the item waits for another (False); a BrokenPipeError must not end the trainer."""
        try:
            if worker.fn is not fn:
                worker.load(fn)
                return False
            worker.conn.send((kind, payload))
        except OSError:
            self._replace(worker)
            return False
        return True

    def _restart_starting(self, worker: _Worker, restarts: int) -> int:
        """A worker died while starting or loading a function. Killed by a signal (a kill of the process group
        before its handlers were set, the OOM killer): replaced, a few times per call; exited by itself (its
        function's module failed to import): RuntimeError."""
        worker.process.join(timeout=1.0)
        code = worker.process.exitcode
        if code is None or code >= 0 or restarts >= MAX_START_RESTARTS:
            raise RuntimeError(f"a verifier worker died while starting (exit code {code}); see its stderr")
        self._replace(worker)
        return restarts + 1

    def map(self, fn: ItemFn, completions: Sequence[str], answers: Sequence[str], timeout_s: float) -> list[Outcome]:
        """Run fn(completions[i], answers[i]) for all i across the workers, each within timeout_s seconds
        of being handed to a ready worker (start-up and loading fn do not count). fn must be picklable:
        a module-level function."""
        return self._guarded(fn, "item", list(zip(completions, answers, strict=True)), timeout_s)

    def call(self, fn: Callable, calls: Sequence[tuple], timeout_s: float) -> list[Outcome]:
        """fn(*args) for each args of `calls`, across the workers, each within timeout_s seconds; an Outcome's
        `result` is what the call returned, as a list (a reward's scores). fn must be picklable."""
        return self._guarded(fn, "call", list(calls), timeout_s)

    def _guarded(self, fn: Callable, kind: str, payloads: list[tuple], timeout_s: float) -> list[Outcome]:
        with self.lock:
            while len(self.workers) < self.num_workers:
                self.workers.append(_Worker(self.ctx, self.warm_up))
            try:
                return self._map(fn, kind, payloads, timeout_s)
            except BaseException:
                # Interrupted or broken mid-batch: workers may still hold items whose results would be
                # read by the next call. Start from fresh workers instead.
                self.close(wait=False)
                raise

    def _map(self, fn: Callable, kind: str, payloads: list[tuple], timeout_s: float) -> list[Outcome]:
        clock = RunningClock()  # deadlines do not count the time this process was stopped
        restarts = 0  # workers killed while starting (_restart_starting)
        results: list[Outcome | None] = [None] * len(payloads)
        todo = deque(range(len(payloads)))
        running: dict[_Worker, tuple[int, float]] = {}  # worker -> (item, deadline)
        while todo or running:
            for worker in [w for w in self.workers if w.ready and w not in running]:
                if todo and self._hand_out(worker, fn, kind, payloads[todo[0]]):
                    running[worker] = (todo.popleft(), clock() + timeout_s)
            waiting = [w for w in self.workers if w in running or not w.ready]
            now = clock()
            waits = [d - now for _, d in running.values()]  # running time (clock)
            waits += [w.since + STARTUP_TIMEOUT_S - time.monotonic() for w in waiting if not w.ready]  # wall time
            pause = min([*waits, clock.poll_s])  # read the clock often: that is how it sees a stop
            ready_conns = wait([w.conn for w in waiting], timeout=max(0.0, pause))
            for worker in [w for w in waiting if w.conn in ready_conns]:
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError):  # the worker died (segfault, OOM kill): replace it
                    if not worker.ready:
                        restarts = self._restart_starting(worker, restarts)
                        continue
                    worker.process.join(timeout=1.0)
                    code = worker.process.exitcode
                    message = Outcome("error", 0.0, f"verifier worker died (exit code {code})", "exit")
                    self._replace(worker)
                if message == "ready":
                    worker.ready = True
                    continue
                if message.status == "fatal":
                    raise WorkerLoadError(
                        f"the verifier pool could not load {_name(fn)} in its worker process ({message.message}); a "
                        "reward that runs there is imported again in a fresh process, so its module must import "
                        "there too (on sys.path, without state only the trainer's process has)"
                    )
                i, _ = running.pop(worker)
                results[i] = message
            now = clock()
            for worker in list(running):
                i, deadline = running[worker]
                if now >= deadline:
                    del running[worker]
                    results[i] = Outcome("timeout", 0.0, f"no result within {timeout_s:g} s")
                    self._replace(worker)
            for worker in self.workers:
                if not worker.ready and time.monotonic() >= worker.since + STARTUP_TIMEOUT_S:
                    raise RuntimeError(f"a verifier worker did not start within {STARTUP_TIMEOUT_S:g} s")
        return results  # type: ignore[return-value]

    def close(self, wait: bool = True) -> None:
        """Stop the workers: ask them to exit (wait=True, up to 1 s each), then kill what is left."""
        for worker in self.workers:
            if wait:
                with contextlib.suppress(OSError):
                    worker.conn.send(None)
                worker.process.join(timeout=1.0)
            worker.kill()
        self.workers = []


_POOL: VerifierPool | None = None
_POOL_OPTIONS: dict = {}
_POOL_LOCK = threading.Lock()


MAX_WORKERS = 256


def default_num_workers() -> int:
    """$HADW_VERIFY_WORKERS, else min(4, CPU count). A value that is not a whole number from 1 to MAX_WORKERS is a
    UserError naming it (0 or less left the pool with no worker, and every scoring waited forever)."""
    raw = os.environ.get("HADW_VERIFY_WORKERS", "").strip()
    if not raw:
        return min(4, os.cpu_count() or 1)
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_WORKERS:
        raise UserError(
            f"HADW_VERIFY_WORKERS={raw!r}: the verifier pool's worker processes; allowed: a whole number from 1 to "
            f"{MAX_WORKERS} (unset: min(4, CPU count))"
        )
    return n


def configure_pool(num_workers: int | None = None, start_method: str = "spawn") -> None:
    """Set the options of the shared pool (takes effect on its next (re)start)."""
    shutdown_pool()
    _POOL_OPTIONS.update(num_workers=num_workers or default_num_workers(), start_method=start_method)


def get_pool() -> VerifierPool:
    """The process-wide pool, created on first use (and again in a forked child)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():
            _POOL = VerifierPool(**({"num_workers": default_num_workers()} | _POOL_OPTIONS))
        return _POOL


def shutdown_pool() -> None:
    global _POOL
    if _POOL is not None and _POOL.pid == os.getpid():
        _POOL.close()
    _POOL = None


atexit.register(shutdown_pool)
# And before multiprocessing's own exit handling, in a process that multiprocessing started (a `hadw compare --jobs N`
# worker, a demo arm): there `_exit_function` runs before atexit, calls terminate() on daemonic children and joins
# them; verifier workers ignore SIGTERM (a process-group SIGTERM must not break a step's scoring), so without this the
# worker waited on them for ever and the sweep never ended. Finalizers of priority >= 0 run before that join.
multiprocessing.util.Finalize(None, shutdown_pool, exitpriority=10)
