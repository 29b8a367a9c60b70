"""The one progress bar of hadw (train, sft, eval, probe, compare, demo): rich, on stderr.

    with Bar(total=100, desc="grpo+hadw") as bar:
        for step in range(100):
            ...
            bar.update(1, reward=f"{r:.3f}")   # keyword arguments become the live info column

A disabled bar (`enabled=False`, or stderr not a terminal and HADW_PROGRESS unset) costs nothing and prints
nothing, so logs of batch jobs stay clean.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def _wanted(enabled: bool | None) -> bool:
    if enabled is not None:
        return enabled
    forced = os.environ.get("HADW_PROGRESS")
    return forced != "0" if forced is not None else sys.stderr.isatty()


class Bar:
    """A single rich progress bar with a free-text info column; `update` advances and sets the info."""

    def __init__(self, total: int | None, desc: str, initial: int = 0, enabled: bool | None = None):
        self._progress = None
        if not _wanted(enabled):
            return
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("<"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
            console=Console(stderr=True),
            transient=False,
        )
        self._task = self._progress.add_task(desc, total=total, completed=initial, info="")
        self._progress.start()

    def update(self, advance: int = 1, **info: object) -> None:
        if self._progress is None:
            return
        fields = {"info": "  ".join(f"{k}={v}" for k, v in info.items())} if info else {}
        self._progress.update(self._task, advance=advance, **fields)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
