"""A CLI that starts at once: `hadw --help`, `hadw <command> --help` and a one-line user error import no torch,
transformers or scipy (each costs seconds of CPU; registering commands must not pay it).

Checked by the modules a child interpreter has imported, not by a timing (timings flake on a busy machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

HEAVY = ("torch", "transformers", "scipy")

# Runs each command line in turn in one child (cheap), and reports the first one after which a heavy
# module was in sys.modules: that command line imported it.
CHILD = """
import contextlib, io, json, sys
from hadw.cli import main
heavy, report = {heavy!r}, {{}}
for argv in {argvs!r}:
    sys.argv = ["hadw", *argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as exit:
            code = exit.code
    loaded = [m for m in heavy if m in sys.modules]
    report[" ".join(argv)] = {{"code": code, "heavy": loaded, "stderr": err.getvalue()}}
    if loaded:
        break
print(json.dumps(report))
"""


def _run_child(argvs: list[list[str]]) -> dict:
    env = os.environ | {"PYTHONPATH": str(REPO_ROOT / "src"), "COLUMNS": "200"}
    code = CHILD.format(heavy=HEAVY, argvs=argvs)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def _command_paths() -> list[list[str]]:
    """Every command and sub-command of the app, as argv prefixes (e.g. ["bias", "table"])."""
    import typer

    from hadw.cli import build_app

    def walk(command, path):
        yield path
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(build_app()), []))


def test_help_of_every_command_imports_no_torch_transformers_or_scipy():
    argvs = [[*path, "--help"] for path in _command_paths()] + [["--version"]]  # `hadw --version` starts at once too
    assert len(argvs) >= 16  # hadw, train, sft, eval, probe, compare, demo, plot, bias *, sim, data *, version
    report = _run_child(argvs)
    heavy = {argv: r["heavy"] for argv, r in report.items() if r["heavy"]}
    assert heavy == {}, f"these command lines imported heavy modules: {heavy}"
    assert all(r["code"] in (0, None) for r in report.values()), report
    assert len(report) == len(argvs)


@pytest.mark.parametrize(
    "argv",
    [
        ["nonsense"],  # an unknown command
        ["eval"],  # a missing argument
        ["train", "--nonsense"],  # an unknown option
        ["eval", "m", "--data", "task:addition", "-k", "abc"],  # a bad option type
        ["eval", "m", "--data", "task:addition", "--temperature", "-1"],  # a bad option value, checked by hadw
        ["probe", "m", "--data", "task:addition", "--group-size", "1"],
        ["sft", "out", "--max-steps", "-1"],
        ["compare", "--jobs", "0"],
        ["train", "hadw.lamda=1.0"],  # an unknown config key (docs/train.md's example)
        ["train", "missing.yaml"],  # no such config file
        ["train", "train.steps=[1"],  # not YAML
    ],
)
def test_a_one_line_user_error_imports_no_torch(argv):
    report = _run_child([argv])[" ".join(argv)]
    lines = [line for line in report["stderr"].splitlines() if line.strip()]
    assert report["code"] == 2 and len(lines) == 1, report
    assert report["heavy"] == [], f"hadw {' '.join(argv)} imported {report['heavy']} before its one-line error"
