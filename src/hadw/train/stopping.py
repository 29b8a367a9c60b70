"""Stopping at a safe point: SIGINT / SIGTERM / SIGHUP set a flag, the loop saves a checkpoint after the step and
exits with the signal's code and the line that resumes the run.

A part of hadw.train.trainer.Trainer (a mixin: its methods use the trainer's fields).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any

from hadw.errors import SignalStop
from hadw.processes import STOP_SIGNALS, detach_from_a_closed_terminal, take_pending_stop
from hadw.train.checkpoint import (
    latest_checkpoint,
)


class Interrupted(SignalStop):
    """SIGINT / SIGTERM / SIGHUP stopped the run at a safe point; exit 128 + the signal's number (130, 143, 129)."""


class SignalStops:
    """Signal handlers that stop the run at a safe point, and the line that resumes it."""

    def _install_signal_handlers(self) -> dict[int, Any]:
        """SIGINT / SIGTERM / SIGHUP (a closed terminal or ssh session) set a flag; the loop stops after the
        current step (a second SIGINT abandons it). Only the main thread can install handlers; elsewhere the
        defaults stay."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}

        def handler(signum, frame):
            if self._stop_signal is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self._stop_signal = signum
            if signum == signal.SIGHUP:
                detach_from_a_closed_terminal()
            # os.write, not print: the handler may run inside a write to sys.stderr (a progress line), where print
            # raises "reentrant call" and the stop would be lost with the step. After SIGHUP the terminal may be gone.
            line = f"\n{signal.Signals(signum).name}: finishing the current step, then saving\n"
            with contextlib.suppress(OSError):
                os.write(2, line.encode("utf-8", "replace"))

        for signum in STOP_SIGNALS:
            previous[signum] = signal.signal(signum, handler)
        pending = take_pending_stop()  # a stop asked for during start-up (e.g. an early preemption signal)
        if pending is not None:
            self._stop_signal = pending
        return previous

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, Any]) -> None:
        for signum, old in previous.items():
            signal.signal(signum, old)

    def _stop(self, done: int) -> None:
        self.checkpoint(done)
        raise self._interrupted(self._stop_signal or signal.SIGINT)

    def _interrupted(self, signum: int) -> Interrupted:
        last = latest_checkpoint(self.run_dir)
        import shlex

        if len(sys.argv) > 1 and "hadw" in sys.argv[0] and sys.argv[1] == "train":  # the user's own command line
            argv = shlex.join(sys.argv[1:])
            command = f"hadw {argv}" if "--resume" in argv else f"hadw {argv} --resume"
        else:  # a run started by `hadw demo`, `hadw compare` or Python: its saved config resumes it
            command = f"hadw train {shlex.quote(str(self.run_dir / 'config.yaml'))} --resume"
        where = f"last checkpoint {last}" if last else "no checkpoint yet (a resume restarts from step 0)"
        return Interrupted(f"{signal.Signals(signum).name}: stopped; {where}; resume with: {command}", signum)
