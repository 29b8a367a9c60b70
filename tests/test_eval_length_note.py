"""`hadw eval` / `hadw probe` of a bare model on a dataset without --max-new-tokens: the length limit in use (2,048
new tokens, minutes per batch on a CPU) is said as hadw's first line, with how to change it, before any token is
generated (issue 33: a 60-row eval printed only "Loading weights" for 10 minutes). A bad --data stays one line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.errors import UserError


class Stop(UserError):
    """Raised in place of loading the model: everything before it has run."""


@pytest.fixture
def rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"problem": f"{i}+1?", "answer": str(i + 1)}) + "\n" for i in range(3)))
    return path


def _stopped_before_generating(monkeypatch, args):
    """stderr's lines of `hadw ARGS`, stopped where the generation engine is made (no model is loaded either)."""

    def stop(*_args, **_kwargs):
        raise Stop("stopped before generating")

    monkeypatch.setenv("HADW_PROGRESS", "off")  # only the note and the stop
    monkeypatch.setattr("hadw.eval.cli._load_model", lambda model, *a, **k: (None, None, model))
    monkeypatch.setattr("hadw.eval.cli._engine", stop)
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 2 and "stopped before generating" in result.stderr, result.output
    return [line for line in result.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("command", ["eval", "probe"])
def test_a_dataset_without_max_new_tokens_says_the_limit_first(monkeypatch, rows, tmp_path, command):
    lines = _stopped_before_generating(monkeypatch, [command, str(tmp_path / "model"), "--data", str(rows)])
    assert len(lines) == 2, lines
    assert "up to 2048 new tokens per answer" in lines[0] and "--max-new-tokens N" in lines[0]
    assert str(rows) in lines[0]


@pytest.mark.parametrize(
    "extra",
    [
        ["--max-new-tokens", "64"],  # the user chose the limit
        ["--data", "task:addition"],  # a built-in task: 16 tokens, nothing to say (with --data rows, see below)
    ],
)
def test_no_note_when_the_user_chose_the_limit_or_for_a_task(monkeypatch, rows, tmp_path, extra):
    data = [] if extra[0] == "--data" else ["--data", str(rows)]
    lines = _stopped_before_generating(monkeypatch, ["eval", str(tmp_path / "model"), *data, *extra])
    assert len(lines) == 1 and "new tokens" not in lines[0], lines


def test_a_missing_dataset_is_still_one_line(tmp_path):
    result = CliRunner().invoke(build_app(), ["eval", str(tmp_path / "model"), "--data", str(tmp_path / "no.jsonl")])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "no.jsonl" in lines[0], lines
