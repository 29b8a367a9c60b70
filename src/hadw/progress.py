"""The one progress display of hadw (train and its SFT warm start, sft, eval, probe, compare, sim, demo), on stderr.

    with Bar(total=100, desc="grpo+hadw", unit="step") as bar:
        for step in range(100):
            ...
            bar.update(1, reward=f"{r:.3f}")   # keyword arguments become the live info

Four modes (`logging.progress` of `hadw train`; the HADW_PROGRESS environment variable for every command):

    auto   a bar on a terminal, plain lines otherwise (a pipe, a Slurm log, CI, nohup): the default
    bar    a rich progress bar (on a non-terminal rich draws it once, at the end)
    lines  a plain line every PROGRESS_INTERVAL_S seconds, and a last one at the end:
               grpo+hadw: 12/200 steps (6%) | 1.9 s/step | elapsed 0:00:23 | ETA 0:06:01 | reward=0.312
           A job done within the first interval prints none (tqdm's `delay`): a quick command's output, and
           a quick one-line error, stay as they are.
    off    nothing

`True` means auto and `False` off (the boolean `logging.progress` of older configs). In auto mode,
HADW_PROGRESS=auto|bar|lines|off chooses instead (0 = off, 1 = bar: the older forced bar). Lines come from a
timer thread, so a long step or a long generate (a 2,048-token batch) still shows the job alive at a steady
interval; HADW_PROGRESS_INTERVAL (seconds) changes it, and 0 prints a line at every update instead (TRL's
`logging_steps=1`).

Several counters at once (`hadw demo`: one per arm): `Bars`, whose `add` returns a counter with the same
`update`; a bar each, or a line each per interval. This module imports rich only for the bar mode.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import weakref
from typing import Any, Literal

ProgressMode = Literal["auto", "bar", "lines", "off"]
PROGRESS_MODES: tuple[str, ...] = ("auto", "bar", "lines", "off")
# Seconds between two plain lines: often enough that a log shows a live job within its first 30 s, rarely
# enough that a day-long run writes a few thousand lines (TRL / accelerate log every `logging_steps`).
PROGRESS_INTERVAL_S = 10.0
_LEGACY = {"true": "auto", "false": "off", "1": "bar", "0": "off"}  # booleans and HADW_PROGRESS's old values


def normalize_mode(value: object) -> str | None:
    """`value` as one of PROGRESS_MODES (True -> auto, False -> off, "True" as OmegaConf writes a YAML boolean
    into a string field), or None when it is none of them."""
    if value is None:
        return "auto"
    text = str(value).strip().lower()
    if text in PROGRESS_MODES:
        return text
    if isinstance(value, bool) or text in ("true", "false"):
        return _LEGACY[text]
    return None


def resolve_mode(mode: object = "auto") -> str:
    """The mode to show: bar, lines or off. auto: HADW_PROGRESS when set, else bar on a terminal, lines
    elsewhere. Raises ValueError for a value that is not a mode."""
    resolved = normalize_mode(mode)
    if resolved is None:
        raise ValueError(f"progress mode {mode!r}; allowed: {', '.join(PROGRESS_MODES)} (or true / false)")
    if resolved == "auto":
        forced = os.environ.get("HADW_PROGRESS", "").strip().lower()
        resolved = _LEGACY.get(forced) or (forced if forced in PROGRESS_MODES else "auto")
    if resolved == "auto":
        resolved = "bar" if _stderr_is_terminal() else "lines"
    return resolved


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def interval_s() -> float:
    """PROGRESS_INTERVAL_S, or HADW_PROGRESS_INTERVAL when it is a number >= 0 (0: a line at every update)."""
    try:
        value = float(os.environ.get("HADW_PROGRESS_INTERVAL", ""))
    except ValueError:
        return PROGRESS_INTERVAL_S
    return value if value >= 0 else PROGRESS_INTERVAL_S


def clock(seconds: float) -> str:
    """H:MM:SS, as rich's and tqdm's columns write elapsed and remaining time."""
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def format_line(desc: str, done: int, total: int | None, unit: str, elapsed: float, advanced: int, info: str) -> str:
    """One plain progress line. `advanced`: units done since the start of this process (a resumed run's
    earlier steps do not count towards its rate)."""
    units = unit if unit == "it" else f"{unit}s"  # tqdm's "it" stays as it is; "step" counts steps
    count = f"{done}/{total} {units} ({100 * done / total:.0f}%)" if total else f"{done} {units}"
    rate = advanced / elapsed if advanced > 0 and elapsed > 0 else 0.0
    speed = "?" if not rate else f"{rate:.2f} {unit}/s" if rate >= 1 else f"{1 / rate:.1f} s/{unit}"
    eta = clock((total - done) / rate) if rate and total else "?"
    parts = [f"{desc}: {count}", speed, f"elapsed {clock(elapsed)}", f"ETA {eta}"]
    return " | ".join(parts + ([info] if info else []))


class Counter:
    """One task of a `Bars`: `update(advance, completed=None, **info)`."""

    def __init__(self, bars: Bars, desc: str, total: int | None, initial: int, unit: str):
        self.desc, self.total, self.unit = desc, total, unit
        self.done, self.initial, self.info = initial, initial, ""
        self.phase, self.phase_started = "", 0.0  # what the job is doing now (set_phase), and since when
        self._bars = bars
        self._task: Any = None  # the rich task id in bar mode

    def update(self, advance: int = 1, completed: int | None = None, **info: object) -> None:
        """Advance by `advance` (or set the count to `completed`); keyword arguments replace the info."""
        self.done = completed if completed is not None else self.done + advance
        if info:
            self.info = "  ".join(f"{k}={v}" for k, v in info.items())
        self._bars._updated(self)

    def set_phase(self, phase: str) -> None:
        """Name what the job is doing now ("generating", "updating", "evaluating", ...): a line then says
        `grpo [generating 0:01:20]: 3/100 steps ...`, so a long step or the final evaluation is never a frozen line."""
        self.phase, self.phase_started = phase, time.monotonic()
        self._bars._updated(self)

    def label(self, now: float) -> str:
        """The description, with the phase and how long it has run."""
        return f"{self.desc} [{self.phase} {clock(now - self.phase_started)}]" if self.phase else self.desc

    def line(self, now: float) -> str:
        elapsed = now - self._bars.started
        label = self.label(now)
        return format_line(label, self.done, self.total, self.unit, elapsed, self.done - self.initial, self.info)


class Bars:
    """Progress counters shown together on stderr in one mode (see the module docstring)."""

    def __init__(self, mode: object = "auto"):
        self.mode = resolve_mode(mode)
        self.started = time.monotonic()
        self.counters: list[Counter] = []
        self._rich: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticked = False  # a line has been printed: the end gets one too
        self._ticker: threading.Thread | None = None
        self._every = PROGRESS_INTERVAL_S
        if self.mode == "bar":
            self._rich = _rich_progress()
            self._rich.start()
        elif self.mode == "lines":
            self._every = interval_s()
            if self._every > 0:
                self._ticker = threading.Thread(target=self._tick, args=(self._every,), name="hadw-progress")
                self._ticker.daemon = True  # never keeps a finished (or crashed) job alive
                self._ticker.start()
                _LIVE.add(self)

    def add(self, desc: str, total: int | None, initial: int = 0, unit: str = "it") -> Counter:
        """A new counter (in lines mode, on the next tick's line)."""
        counter = Counter(self, desc, total, initial, unit)
        self.counters.append(counter)
        if self._rich is not None:
            counter._task = self._rich.add_task(desc, total=total, completed=initial, info="")
        return counter

    def _updated(self, counter: Counter) -> None:
        if self._rich is not None:
            description = f"{counter.desc} [{counter.phase}]" if counter.phase else counter.desc
            self._rich.update(counter._task, completed=counter.done, info=counter.info, description=description)
        elif self.mode == "lines" and self._every == 0:  # HADW_PROGRESS_INTERVAL=0: a line per update
            self._print([counter])

    def _tick(self, every: float) -> None:
        """The lines mode's timer thread: every counter's line, every `every` seconds, until closed."""
        while not self._stop.wait(every):
            self._ticked = True
            self._print(self.counters)

    def _print(self, counters: list[Counter]) -> None:
        now = time.monotonic()
        text = "".join(c.line(now) + "\n" for c in list(counters))
        with self._lock:  # one write per tick: lines of two threads never interleave
            try:
                sys.stderr.write(text)
                sys.stderr.flush()
            except (OSError, ValueError):  # a closed pipe or stream: progress is never worth a crash
                pass

    def close(self) -> None:
        """Stop the display; lines mode prints each counter's final line (when it printed any before)."""
        if self._ticker is not None:
            self._stop_ticker()
            if self._ticked:
                self._print(self.counters)
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
        self.mode = "off"

    def _stop_ticker(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        self._ticker = None
        _LIVE.discard(self)

    def __enter__(self) -> Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Displays whose timer thread runs: stopped at exit, before the interpreter finalises, so that a job that ends
# without closing its display (an exception) never has a daemon thread writing to stderr during shutdown.
_LIVE: weakref.WeakSet[Bars] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for bars in list(_LIVE):
        bars._stop_ticker()


class Bar:
    """One progress counter in its own display: `update(advance, **info)` advances and sets the info."""

    def __init__(self, total: int | None, desc: str, initial: int = 0, mode: object = "auto", unit: str = "it") -> None:
        self._bars = Bars(mode)
        self.mode = self._bars.mode
        self._counter = self._bars.add(desc, total, initial, unit) if self.mode != "off" else None

    def update(self, advance: int = 1, **info: object) -> None:
        if self._counter is not None:
            self._counter.update(advance, **info)

    def set_phase(self, phase: str) -> None:
        """What the job is doing now (Counter.set_phase); "" clears it."""
        if self._counter is not None:
            self._counter.set_phase(phase)

    def close(self) -> None:
        self._bars.close()
        self._counter = None

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _rich_progress():
    """The rich bar: description, bar, n/total, elapsed < remaining, the free-text info."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
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


# A table written to a file, a pipe or a Slurm log: rich would cut it at 80 columns ("pro…"); this is wide enough for
# every table hadw prints, and a terminal keeps its own width.
FILE_WIDTH = 300


def stdout_console():
    """The rich Console that hadw's tables print to: the terminal's width on a terminal, FILE_WIDTH columns elsewhere
    (no cell is cut or folded into "…" in a log)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=FILE_WIDTH)
