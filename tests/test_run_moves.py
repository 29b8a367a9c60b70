"""Runs that move: a project (model, data, runs) copied to another path resumes, evaluates and probes with no edit,
because a run records its paths relative to itself."""

from __future__ import annotations

import json
import shutil

import yaml
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.rollout import build_tiny_model


def test_a_moved_project_resumes_and_evaluates_with_no_edit(tmp_path, monkeypatch):
    project = tmp_path / "project"
    model = build_tiny_model(project / "models" / "tiny", hidden_size=32, num_layers=1, intermediate_size=64)
    rows = [{"q": f"{a}+{a}", "a": 2 * a} for a in range(30)]
    (project / "data").mkdir()
    (project / "data" / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(project)
    args = [
        "train",
        "model.path=models/tiny",
        "data.source=data/q.jsonl",
        "data.fields.prompt=q",
        "data.fields.answer=a",
    ]
    args += ["train.output_dir=runs/r", "train.steps=1", "train.prompts_per_step=2", "train.mini_batch_prompts=2"]
    args += ["rollout.group_size=2"]
    args += ["rollout.max_new_tokens=2", "data.eval_size=4", "logging.progress=off", "checkpoint.every=1"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    saved = yaml.safe_load((project / "runs" / "r" / "config.yaml").read_text())
    assert saved["model"]["path"] == "../../models/tiny" and saved["data"]["source"] == "../../data/q.jsonl"
    assert saved["train"]["output_dir"] == "."  # the run is where its config.yaml is
    assert model.is_dir()

    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(project, moved, symlinks=True)
    shutil.rmtree(project)  # nothing left at the old paths
    monkeypatch.chdir(tmp_path)
    run = moved / "runs" / "r"
    result = CliRunner().invoke(build_app(), ["train", str(run / "config.yaml"), "--resume", "train.steps=2"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    result = CliRunner().invoke(build_app(), ["eval", str(run), "--no-progress"])
    assert result.exit_code == 0, result.output
