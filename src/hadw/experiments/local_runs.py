"""Running a sweep's runs on this machine: one after the other here (`--jobs 1`), or `jobs` at a time in spawned
worker processes; a stop signal (SIGINT / SIGTERM / SIGHUP) stops the sweep at a safe point either way: the running
runs save their step, no further run starts, and the sweep ends with the one line that says how to go on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any

from hadw.errors import SignalStop
from hadw.processes import STOP_SIGNALS

RunSpec = Any  # hadw.experiments.compare.RunSpec (arm, seed, run_dir, ...): this module only passes it on


class _StopBetweenRuns(BaseException):
    """A stop signal between two runs' training loops. A BaseException, as KeyboardInterrupt is: raised wherever the
    signal lands, inside a library too, and a library's `except Exception` must not turn it into that run's failure
    (omegaconf re-raises what it catches as a ConfigTypeError: a SIGTERM while a trainer saved its config ended the
    sweep with exit 1 and the run counted as failed)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stop_handlers(handler: Callable[[int, Any], None]):
    """`handler` for every stop signal while the block runs, the previous handlers after; off the main thread, where
    Python cannot set handlers, nothing."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextlib.contextmanager
def _signals_stop_the_sweep():
    """While runs execute in this process: SIGINT / SIGTERM / SIGHUP between two runs' training loops (loading a
    config, setting up a trainer) stop the sweep at once (_StopBetweenRuns), nothing being lost. A trainer's loop
    installs its own handlers (a safe stop: finish the step, save it) and restores these after."""

    def handler(signum, frame):
        raise _StopBetweenRuns(signum)

    with _stop_handlers(handler):
        yield


def _run_here(specs: Sequence[RunSpec], on_done: Callable[[dict], None] | None, worker) -> list[dict]:
    """The runs one after the other in this process; a signal stops the sweep (SignalStop after the stopped run's
    checkpoint), never counted as one run's failure with the next run started."""
    import signal

    results: list[dict] = []
    with _signals_stop_the_sweep():
        for spec in specs:
            try:
                results.append(worker(spec))
            except _StopBetweenRuns as stop:  # between two runs' training loops
                name = signal.Signals(stop.signum).name
                results.append({"arm": spec.arm, "seed": spec.seed, "status": "failed",
                                "error": f"{name}: stopped between runs", "signal": stop.signum})  # fmt: skip
            if results[-1].get("signal"):
                raise _sweep_stopped(results[-1], len(results), len(specs))
            if on_done:
                on_done(results[-1])
    return results


def _sweep_stopped(result: dict, done: int, total: int) -> SignalStop:
    """The one line of a sweep stopped by a signal: which run stopped, what it saved, how to go on."""
    import signal

    name = signal.Signals(result["signal"]).name
    said = result["error"].removeprefix("Interrupted: ").removeprefix(f"{name}: ").split("; resume with:")[0]
    return SignalStop(
        f"{name}: the sweep stopped at run {done} of {total} ({result['arm']} seed {result['seed']}: {said}); run "
        "the same hadw compare command again to go on (finished runs are reused, interrupted ones resume)",
        result["signal"],
    )


# A worker process's stop: the signal that stopped a run here, or arrived between runs. A worker that has one starts
# no further run: the pool hands a worker the runs queued behind the stopped one, and before this a stopped
# `hadw compare --jobs N` left workers training them with no parent (a re-run raced them for the run folders).
_worker_stop: list[int] = []


def _init_worker(parent_pid: int) -> None:
    import os
    import signal

    from hadw.processes import STOP_SIGNALS, die_with_parent, request_stop

    # Runs share the cores; more threads per process only thrash. Set before the worker imports torch.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"

    def between_runs(signum, frame):  # a trainer's own handlers replace this while it trains, and restore it
        if os.getppid() != parent_pid:  # orphaned (the command was killed): no run trains here, nothing to save
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        _worker_stop.append(signum)
        request_stop(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, between_runs)
    die_with_parent(parent_pid, signal.SIGTERM)  # a killed `hadw compare` stops its runs at a safe point


def _not_started(spec: RunSpec, signum: int) -> dict:
    import signal

    name = signal.Signals(signum).name
    return {"arm": spec.arm, "seed": spec.seed, "status": "not started", "signal": signum,
            "error": f"Interrupted: {name}: the sweep stopped before this run started"}  # fmt: skip


def run_specs(
    specs: Sequence[RunSpec],
    jobs: int,
    on_done: Callable[[dict], None] | None,
    worker: Callable[[RunSpec], dict],
) -> list[dict]:
    """Execute every spec with `worker`, `jobs` at a time in separate (spawned) processes; jobs = 1 runs here."""
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1; got {jobs}")
    if jobs == 1:
        return _run_here(specs, on_done, worker)
    results = []
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = mp.get_context("spawn")
    stopped: list[int] = []  # a stop signal this process received
    with (
        ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker, initargs=(os.getpid(),)) as pool,
        _signals_reach_the_workers(stopped),
    ):
        futures = {pool.submit(_start_unless_stopped, worker, spec): spec for spec in specs}
        for future in as_completed(futures):
            if future.cancelled():  # never handed to a worker: the sweep stopped first
                results.append(_not_started(futures[future], stopped[0]))
                continue
            results.append(future.result())
            if stopped:  # the runs still queued are cancelled; those already handed out start nothing
                for other in futures:
                    other.cancel()
            if on_done and not results[-1].get("signal"):
                on_done(results[-1])
    interrupted = [r for r in results if r.get("signal") and r["status"] != "not started"]
    if stopped or interrupted:
        first = (interrupted or [r for r in results if r.get("signal")])[0]
        raise _sweep_stopped(first, sum(r["status"] != "not started" for r in results), len(specs))
    return results


def _start_unless_stopped(worker: Callable[[RunSpec], dict], spec: RunSpec) -> dict:
    """In a pool worker: `worker(spec)`, unless this worker already stopped on a signal."""
    return _not_started(spec, _worker_stop[0]) if _worker_stop else worker(spec)


@contextlib.contextmanager
def _signals_reach_the_workers(stopped: list[int]):
    """While a pool runs: a stop signal to `hadw compare` is recorded in `stopped` and sent on to every worker as
    SIGTERM (each run finishes its step and saves it; a worker between runs starts none), so `kill PID` of the
    command stops the sweep as Ctrl-C of its whole process group does. Workers stop a run only on a second SIGINT,
    so a terminal's Ctrl-C, which reaches them too, followed by this SIGTERM, still saves the step."""
    import multiprocessing as mp
    import signal

    def handler(signum, frame):
        stopped.append(signum)
        for child in mp.active_children():
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGTERM)

    with _stop_handlers(handler):
        yield


def worker_stopped(signum: int) -> None:
    """A run in this process stopped on `signum`: in a pool worker, the runs queued behind it are not started."""
    _worker_stop.append(signum)
