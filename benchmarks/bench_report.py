"""A benchmark's `--report FILE`: what the run prints, kept as a markdown file with the run's context.

One home for the report format, so the README can quote a committed file instead of a terminal: the file
holds the command line, the date, the commit, the versions of the libraries the run imported, the machine
(CPU with its family, model and the flags that pick kernels, torch's CPU capability and oneDNN, whether
bf16 is native, the 1-thread fp32 and bf16 matmul peaks: cpu_info.py; cores, load average before and after:
a shared machine slows wall times, not CPU times), every
setting with those that differ from the defaults named, and the output exactly as printed (its tables give
min / median / max). tests/test_readme_figures.py parses these files against docs/benchmarks.md and the README.

    parser = argparse.ArgumentParser(description=__doc__)
    add_report_option(parser)
    args = parser.parse_args()
    with report(args.report, parser, args):
        measure(args)          # prints as usual; the report is written only if it returns
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import cpu_info

ROOT = Path(__file__).resolve().parent.parent
# Libraries whose version a figure depends on, reported when the run imported them.
LIBRARIES = ("numpy", "torch", "transformers", "trl", "accelerate", "datasets", "peft")


def add_report_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="also write what this run prints, with the command, date, versions and machine, to FILE (markdown)",
    )


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy: the run stays visible while it is recorded."""

    def __init__(self, terminal: TextIO):
        self.terminal, self.copy = terminal, io.StringIO()

    def write(self, text: str) -> int:
        self.terminal.write(text)
        return self.copy.write(text)

    def flush(self) -> None:
        self.terminal.flush()


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def _commit() -> str:
    """HEAD, and whether the measured code differs from it (edits to the README or tests do not count)."""
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", "src", "benchmarks/*.py")
    return (_git("rev-parse", "--short", "HEAD") or "unknown") + (" + uncommitted code changes" if changed else "")


def _versions() -> str:
    names = [f"python {platform.python_version()}"]
    for name in LIBRARIES:
        if name in sys.modules:  # only what this run used: trl where it raced TRL
            names.append(f"{name} {getattr(sys.modules[name], '__version__', '?')}")
    return ", ".join(names)


def _settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    values = {k: v for k, v in vars(args).items() if k not in ("report", "child")}
    changed = [k for k, v in values.items() if v != parser.get_default(k)]
    listed = ", ".join(f"{k}={v}" for k, v in values.items())
    if not changed:
        return f"{listed} (the script's defaults)"
    return f"{listed}; not the defaults: " + ", ".join(f"{k} (default {parser.get_default(k)})" for k in changed)


def _load() -> tuple[float, ...]:
    return os.getloadavg()


def _machine(cpu: cpu_info.Cpu, before: tuple[float, ...], after: tuple[float, ...]) -> str:
    cores = os.cpu_count() or 1
    shown = lambda load: " / ".join(f"{x:.1f}" for x in load)
    text = f"{cpu.line()}, {cores} CPUs; load average (1 / 5 / 15 min) {shown(before)} before, {shown(after)} after"
    if max(before[0], after[0]) > cores - 0.5:  # the run itself is one busy core
        text += " (other jobs shared the cores: wall times swing; CPU times and side-by-side ratios hold)"
    return text


def _hardware() -> cpu_info.Machine:
    """Measured before the run, under the load the run starts in, in a child process (the run's own RSS, threads
    and RNG untouched); tests plant one."""
    return cpu_info.measure_machine_in_child()


@contextlib.contextmanager
def report(path: Path | None, parser: argparse.ArgumentParser, args: argparse.Namespace) -> Iterator[None]:
    """Record what the block prints and write it to `path` as markdown when the block returns (no file from a
    failed run, so a committed report is always a finished one). `path` None: just run the block."""
    if path is None:
        yield
        return
    script = Path(sys.argv[0]).resolve()  # its room too (benchmarks/speed/...), as run from the repository root
    where = script.relative_to(ROOT) if script.is_relative_to(ROOT) else Path("benchmarks") / script.name
    command = shlex.join(["python", str(where), *sys.argv[1:]])
    # The commit the run imported: read at the start, since the tree may change while a long run goes on.
    commit, hardware = _commit(), _hardware()
    started, load_before = datetime.datetime.now(datetime.UTC), _load()
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield
    minutes = (datetime.datetime.now(datetime.UTC) - started).total_seconds() / 60
    # The script's docstring, not the parser's description: some parsers keep only its first (wrapped) line.
    title = " ".join((sys.modules["__main__"].__doc__ or parser.description or "").split("\n\n")[0].split())
    text = "\n".join(
        [
            f"# {Path(sys.argv[0]).name}: {title}",
            "",
            f"Command: `{command}`  ",
            f"Date: {started:%Y-%m-%d %H:%M} UTC, {minutes:.1f} min; commit {commit}  ",
            f"Versions: {_versions()}  ",
            f"Machine: {_machine(hardware.cpu, load_before, _load())}  ",
            *(f"{line}  " for line in cpu_info.machine_lines(hardware)),
            f"Settings: {_settings(parser, args)}",
            "",
            "Output, as printed:",
            "",
            "```text",
            tee.copy.getvalue().rstrip("\n"),
            "```",
            "",
        ]
    )
    path.write_text(text, encoding="utf-8")
    print(f"report written to {path}")
