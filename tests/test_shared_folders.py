"""Issue 31, the rest: folders two processes share, folders hadw may not write, files it may not read, and the
names a run folder may have. Each case is counted in the bad-input matrix's summary line (conftest.py).

- one `hadw compare` per --out: the sweep folder's lock (.compare.lock), released on any exit;
- a read-only results folder: `hadw eval RUN` / `hadw plot RUN` read it; an output asked for inside it, or
  `hadw train` (new or --resume) into it, is refused in one line before any work;
- a checkpoint file that cannot be read (permission denied, an I/O error) on --resume: one line naming it;
- run-folder names: a space, non-ASCII, a leading dash and a 250-byte name work from train to plot; a newline
  (a control character) and a name over 255 bytes are refused in one line.

The tests run as root (CI too), for whom permission bits mean nothing. The real mechanisms used instead: a
read-only bind mount in a private mount namespace (`unshare -m`: EROFS, as on a read-only export), and root without
CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (`setpriv`), for whom a mode-000 file is unreadable. Where either is not
available the cases skip, saying why. An I/O error (EIO) cannot be made on demand: it is injected at os.open/io.open.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hadw.cli import build_app
from tests.conftest import TINY_COMPARE_RECIPE
from tests.test_bad_inputs import _invoke_bounded, classify

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV = os.environ | {"PYTHONPATH": str(REPO_ROOT / "src")}
SWEEP_LOCK = ".compare.lock"
# what tests/conftest.py's tiny compare recipe trains, from a saved tiny model (no warm start: seconds, not 20)
RECIPE = [o for o in TINY_COMPARE_RECIPE if not o.startswith("model.tiny.")]
RECIPE += ["data.eval_size=2", "logging.progress=false", "train.num_threads=1"]


def _record(record_outcome, request, result, expect: str, needles=()) -> None:
    """Classify one command's result (the matrix's classes), count it, and check it."""
    outcome = classify(result, expect)
    calls = getattr(request.node, "hadw_calls", 0) + 1
    request.node.hadw_calls = calls
    record_outcome(request.node.name + (f"#{calls}" if calls > 1 else ""), outcome)
    detail = None if result is None else (result.exit_code, result.stdout[-1500:], result.stderr[-1500:])
    assert outcome == expect, (outcome, detail)
    text = result.stderr if expect != "accepted" else result.stdout + result.stderr
    for needle in needles:
        assert needle in text, (needle, text)


def _train_args(tiny_path, run: Path | str, *extra: str) -> list[str]:
    return ["train", f"model.path={tiny_path}", *RECIPE, f"train.output_dir={run}", *extra]


@pytest.fixture(scope="module")
def run(tiny_path, tmp_path_factory) -> Path:
    """A finished one-step run with its checkpoint."""
    folder = tmp_path_factory.mktemp("shared") / "run"
    result = CliRunner().invoke(build_app(), _train_args(tiny_path, folder, "train.steps=1"))
    assert result.exit_code == 0, result.output
    return folder


# ------------------------------------------------------------------------------------ 1. one owner per --out
def test_a_second_compare_on_the_same_out_is_refused_and_the_lock_goes_with_the_first(
    tiny_path, tmp_path, monkeypatch, record_outcome, request
):
    """Two `hadw compare` on one --out: the second removed, truncated and rewrote what the first was writing (its
    run locks only guarded the runs' own folders). Now it is refused in one line naming the folder and the holder."""
    out = tmp_path / "cmp"
    sets = [x for o in [f"model.path={tiny_path}", *RECIPE, "train.steps=100000"] for x in ("--set", o)]
    args = ["compare", "--out", str(out), "-a", "a:", "--seeds", "0", *sets]
    # stderr to a file, not a pipe: a pipe nobody reads while the first trains fills up and blocks its writes (the
    # stop line included), and the SIGTERM below would then wait on the test itself
    log = tmp_path / "first.stderr"
    with open(log, "w") as stderr:
        first = subprocess.Popen([sys.executable, "-m", "hadw.cli", *args], env=ENV, stdout=subprocess.DEVNULL,
                                 stderr=stderr, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (out / "a" / "seed0" / ".lock").exists():  # its trainer holds the run: the sweep is under way
            assert time.monotonic() < deadline and first.poll() is None, log.read_text()
            time.sleep(0.05)
        monkeypatch.chdir(tmp_path)
        second = _invoke_bounded(args)
        _record(record_outcome, request, second, "one-line", [f"--out {out} is in use by pid {first.pid} on host"])
        assert "hadw compare" in second.stderr and SWEEP_LOCK in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=120)
    assert first.returncode in (128 + signal.SIGTERM, -signal.SIGTERM), log.read_text()
    with open(out / SWEEP_LOCK, "a") as lock:  # released with the first's exit (SIGTERM)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_the_sweep_lock_is_released_when_compare_ends_normally_or_in_error(tmp_path, monkeypatch):
    from hadw.experiments.compare import lock_sweep

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "cmp"
    bad = _invoke_bounded(["compare", "-o", str(out), "-a", "g:", "--seeds", "0", "--set", "train.steps=many"])
    assert bad.exit_code == 2 and (out / SWEEP_LOCK).is_file(), bad.stderr  # it held the lock, then failed
    lock_sweep(out).release()
    run_dir = out / "g" / "seed0"  # a finished run, collected: a normal end
    (run_dir / "final_model").mkdir(parents=True)
    (run_dir / "final_eval.json").write_text(json.dumps({"all": {"count": 2.0, "greedy": 0.5}}))
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "critic/score/mean": 0.5}\n')
    done = _invoke_bounded(["compare", "--collect-only", "-o", str(out)])
    assert done.exit_code == 0, done.stderr
    lock_sweep(out).release()


# ------------------------------------------------------------- 2 and 3. read-only folders, unreadable files
def _can(command: list[str]) -> bool:
    return shutil.which(command[0]) is not None and subprocess.run(command, capture_output=True).returncode == 0


def _wrapped(read_only: Path) -> list[str]:
    """A command prefix: `read_only` bind-mounted read-only in a private mount namespace, and root without the
    capabilities that let it read and write past permission bits. Skips when this machine cannot."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a private mount namespace (unshare -m) and dropped capabilities (setpriv)")
    mount = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && exec "$@"'
    prefix = ["unshare", "-m", "sh", "-c", mount, str(read_only)]
    no_dac = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]
    probe = read_only / ".probe"
    if not _can([*prefix, "sh", "-c", f"! touch '{probe}'"]) or not _can([*no_dac, "true"]):
        pytest.skip("no read-only bind mount (unshare -m, mount) or no setpriv here; these cases need both")
    return [*prefix, *no_dac]


# Runs each argv through the real `hadw` entry point in one process (one start-up for all cases); prints the results.
RUNNER = """
import json, sys
from click.testing import CliRunner
from hadw.cli import main

class Main:
    name = "hadw"

    def main(self, args=None, prog_name=None, **extra):
        sys.argv = ["hadw", *(args or [])]
        main()

results = []
for args in json.loads(sys.argv[1]):
    r = CliRunner().invoke(Main(), args)
    bug = r.exception is not None and not isinstance(r.exception, SystemExit)
    results.append([r.exit_code, r.stdout, r.stderr + (repr(r.exception) if bug else ""), bug])
print("RESULTS " + json.dumps(results))
"""


class _Result:
    """What classify() reads of a CliRunner result, from the runner's JSON."""

    def __init__(self, code: int, stdout: str, stderr: str, bug: bool):
        self.exit_code, self.stdout, self.stderr = code, stdout, stderr
        self.output = stdout + stderr
        self.exception = RuntimeError(stderr) if bug else None


def test_a_read_only_run_is_read_and_not_written_and_an_unreadable_checkpoint_is_one_line(
    run, tiny_path, tmp_path, record_outcome, request
):
    """Read-only: `hadw train` said "permission denied" of a read-only mount, eval / plot outputs asked for inside
    it failed after the work naming a temporary file (.out.json.tmp). Unreadable checkpoint files: trainer_state.pt
    was "not a plain tensor file", model.safetensors "not a readable safetensors file"."""
    archive = tmp_path / "archive"  # the read-only folder: a finished run in it
    shutil.copytree(run, archive / "run", symlinks=True)
    ro = archive / "run"
    denied = {}
    for name in ("trainer_state.pt", "model/model.safetensors"):
        copy = tmp_path / f"denied-{name.split('/')[-1]}"
        shutil.copytree(run, copy, symlinks=True)
        (copy / "checkpoint-000001" / name).chmod(0)
        denied[name] = copy
    resume = lambda d: ["train", str(d / "config.yaml"), f"train.output_dir={d}", "train.steps=2", "--resume"]
    cases = [
        (["eval", str(ro), "--no-progress", "--device", "cpu"], "accepted", []),
        (["plot", str(ro), "--out", str(tmp_path / "curves.png")], "accepted", [str(tmp_path / "curves.png")]),
        (["eval", str(ro), "--json", str(ro / "out.json")], "one-line", ["--json", "a read-only file system"]),
        (["plot", str(ro), "--out", str(ro / "curves.png")], "one-line", ["--out", "a read-only file system"]),
        (_train_args(tiny_path, ro, "train.steps=1"), "one-line", [f"train.output_dir={ro}", "a read-only file"]),
        (resume(ro), "one-line", [f"train.output_dir={ro}", "a read-only file system", "copy the run"]),
        (_train_args(tiny_path, ro / "sub"), "one-line", [f"train.output_dir={ro / 'sub'}", "Read-only"]),
        *[
            (resume(d), "one-line", [str(d / "checkpoint-000001" / name), "cannot be read (Permission denied)"])
            for name, d in denied.items()
        ],
    ]
    proc = subprocess.run(
        [*_wrapped(archive), sys.executable, "-c", RUNNER, json.dumps([c[0] for c in cases])],
        env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0 and "RESULTS " in proc.stdout, proc.stderr[-3000:]
    results = json.loads(proc.stdout.split("RESULTS ", 1)[1])
    for (_, expect, needles), result in zip(cases, results, strict=True):
        _record(record_outcome, request, _Result(*result), expect, needles)
    assert not (ro / "out.json").exists() and not (ro / "curves.png").exists()


@pytest.mark.parametrize(
    ("target", "expect", "needle"),
    [
        ("checkpoint-000001/state.json", "one-line", "state.json: cannot be read (Input/output error)"),
        ("checkpoint-000001/model/model.safetensors", "one-line", "model.safetensors: cannot be read"),
        ("latest", "accepted", "latest: cannot be read (Input/output error)"),  # falls back to the newest checkpoint
    ],
    ids=["state_json", "weights", "latest"],
)
def test_an_io_error_reading_a_checkpoint_is_one_line(
    run, tiny_path, tmp_path, monkeypatch, record_outcome, request, target, expect, needle
):
    """A disk that fails under a checkpoint file (EIO) ended --resume in a traceback."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy, symlinks=True)
    failing = str(copy / target)
    real_os_open, real_io_open = os.open, io.open

    def os_open(path, *args, **kwargs):
        if os.fspath(path) == failing:
            raise OSError(errno.EIO, os.strerror(errno.EIO), failing)
        return real_os_open(path, *args, **kwargs)

    def io_open(path, *args, **kwargs):
        if not isinstance(path, int) and os.fspath(path) == failing:
            raise OSError(errno.EIO, os.strerror(errno.EIO), failing)
        return real_io_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", io_open)
    monkeypatch.chdir(tmp_path)
    args = ["train", str(copy / "config.yaml"), f"train.output_dir={copy}", "train.steps=2", "--resume"]
    _record(record_outcome, request, _invoke_bounded(args), expect, [needle])


# ------------------------------------------------------------------------------------------ 4. folder names
NAMES = {
    "space": "my run",
    "non_ascii": "lauf-ü-執行",
    "leading_dash": "-run",
    "250_bytes": "r" * 250,
}


@pytest.mark.parametrize("name", list(NAMES.values()), ids=list(NAMES))
def test_a_run_folder_name_works_from_train_to_plot(tiny_path, tmp_path, monkeypatch, record_outcome, request, name):
    """Each name: train (a checkpoint), resume, eval and plot the run. A dashed name is given as `./-run` where it
    is an argument (else it reads as an option); train.output_dir=-run is an override's value, taken as is."""
    monkeypatch.chdir(tmp_path)
    folder = f"./{name}" if name.startswith("-") else name
    steps = [
        (_train_args(tiny_path, name, "train.steps=1"), []),
        (_train_args(tiny_path, name, "train.steps=2", "--resume"), []),
        (["eval", folder, "--no-progress", "--limit", "1"], []),
        (["plot", folder, "--out", "curves.png"], ["curves.png"]),
    ]
    for args, needles in steps:
        _record(record_outcome, request, _invoke_bounded(args), "accepted", needles)
    assert (tmp_path / name / "checkpoint-000002").is_dir() and (tmp_path / "curves.png").is_file()
    if len(name) == 250:  # <name>.old-1 would be 256 bytes: --overwrite cannot move the run aside
        result = _invoke_bounded(_train_args(tiny_path, name, "train.steps=1", "--overwrite"))
        _record(record_outcome, request, result, "one-line", ["--overwrite would move", "255 bytes per name", "249"])
        assert (tmp_path / name / "checkpoint-000002").is_dir()  # nothing moved


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        # (an override is refused as a whole: hadw.train.config_yaml, issue 35; a YAML file's value by config_checks)
        (["train", "train.output_dir=runs/a\nb"], ["train.output_dir=runs/a\\nb", "control character '\\n'"]),
        (["train", "train.output_dir=a\tb"], ["train.output_dir=a\\tb", "control character"]),
        (["train", f"train.output_dir=runs/{'r' * 256}"], ["256 bytes", "at most 255 bytes per name"]),
        (["compare", "-a", "g:", "--seeds", "0", "-o", "sweep\nx"], ["--out", "control character"]),
        (["compare", "-a", "g:", "--seeds", "0", "-o", "s" * 256], ["--out", "256 bytes", "at most 255"]),
    ],
    ids=["train_newline", "train_tab", "train_256_bytes", "compare_newline", "compare_256_bytes"],
)
def test_a_folder_name_that_breaks_lines_or_the_file_system_is_one_line(
    tmp_path, monkeypatch, record_outcome, request, args, needles
):
    monkeypatch.chdir(tmp_path)
    _record(record_outcome, request, _invoke_bounded(args), "one-line", needles)
    assert not any(tmp_path.iterdir())  # nothing made


def test_a_sweep_folder_with_a_space_non_ascii_a_dash_and_250_bytes_works(
    tiny_path, tmp_path, monkeypatch, record_outcome, request
):
    monkeypatch.chdir(tmp_path)
    prefix = "-sweep ü "
    name = prefix + "x" * (250 - len(prefix.encode()))
    sets = [x for o in [f"model.path={tiny_path}", *RECIPE, "train.steps=1"] for x in ("--set", o)]
    result = _invoke_bounded(["compare", "-o", f"./{name}", "-a", "g:", "--seeds", "0", *sets])
    _record(record_outcome, request, result, "accepted", ["compare.md"])
    assert (tmp_path / name / "compare.json").is_file() and (tmp_path / name / "g" / "seed0" / "final_model").is_dir()
