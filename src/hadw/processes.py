"""Worker processes that end with their parent (a leaf: imports nothing from hadw).

Why: a spawned child keeps running when its parent is killed (SIGKILL, a scheduler's SIGTERM, a closed ssh
session). A reward worker stuck in C code (sympy on \\boxed{9^{9^{9^{9}}}}) would outlive a killed trainer;
the RL arms of a killed `hadw demo` or the runs of a killed `hadw compare --jobs N` would go on holding the
cores and race a re-run of the command for the same run folders. On Linux the kernel sends a child a
signal of its choice when its parent dies (prctl PR_SET_PDEATHSIG); elsewhere a watchdog thread polls.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# The signals that stop a command at a safe point: Ctrl-C, a scheduler's or `kill`'s SIGTERM, and SIGHUP (a closed
# terminal or ssh session; not on Windows).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def detach_from_a_closed_terminal() -> None:
    """After SIGHUP every write to the closed terminal fails (EIO), from any print, warning or progress bar, and
    one would end the command before it saved its work: what still goes to a terminal goes to /dev/null instead
    (as nohup would have done). A file or pipe (a log) is kept."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                os.dup2(devnull, fd)
    os.close(devnull)


# A stop signal that arrived before a trainer could take it (a scheduler's preemption signal during start-up):
# recorded here by whoever handles signals then (hadw.experiments.launchers.SlurmRun), taken by the trainer when it
# installs its own handlers, so that it stops at its first safe point instead of losing the signal.
_pending_stop: list[int] = []


def request_stop(signum: int) -> None:
    """Record a stop signal for the trainer that has not started yet (a signal handler may call this)."""
    _pending_stop.append(signum)


def take_pending_stop() -> int | None:
    """The first stop signal recorded before the trainer started (and forget them all), or None."""
    signum = _pending_stop[0] if _pending_stop else None
    _pending_stop.clear()
    return signum


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> None:
    """Have this process receive `signum` when its parent (`parent_pid`, passed in by the parent) dies.

    SIGKILL for a worker whose work can be dropped (a reward worker); SIGTERM for a trainer, which turns it
    into a safe stop (finish the step, checkpoint, exit), so the killed command resumes where it stopped.
    The kernel's signal (Linux) follows the thread that spawned the child: spawn from the main thread.
    If the parent died before the request, nothing would ever signal this process: it signals itself.
    """
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
        except (OSError, AttributeError):  # no prctl in this libc
            pass
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signum)
        return
    if not armed:  # a poll instead; it cannot interrupt C code, but the signal's handler runs when it returns

        def watchdog() -> None:
            while os.getppid() == parent_pid:
                time.sleep(1.0)
            os.kill(os.getpid(), signum)

        threading.Thread(target=watchdog, daemon=True, name="hadw-parent-watchdog").start()


class RunningClock:
    """time.monotonic() less the time this process spent stopped (SIGSTOP / Ctrl-Z, a suspended machine), for
    deadlines that must charge only the time the work could run: a reward item must not time out because its
    trainer was stopped for an hour.

    Nothing says when a process was stopped, so a caller reads the clock at least every `slack` / 4 seconds
    (a poll loop); a gap of more than `slack` between two readings is taken as stopped time and not counted."""

    def __init__(self, slack: float = 1.0):
        self.slack = slack
        self._last = time.monotonic()
        self._stopped = 0.0

    def __call__(self) -> float:
        now = time.monotonic()
        gap = now - self._last
        if gap > self.slack:
            self._stopped += gap
        self._last = now
        return now - self._stopped

    @property
    def poll_s(self) -> float:
        """The longest a caller may wait between two readings."""
        return self.slack / 4
