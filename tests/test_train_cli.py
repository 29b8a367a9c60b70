"""The `hadw sft`, `hadw train` and `hadw plot` commands, end to end on a very small model."""

from __future__ import annotations

import shutil

from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.rollout import build_tiny_model, load_model
from hadw.train.metrics_log import read_jsonl

runner = CliRunner()


def test_sft_train_plot_and_config_error(tmp_path, monkeypatch):
    app = build_app()
    start = build_tiny_model(
        tmp_path / "init", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64
    )
    result = runner.invoke(
        app,
        [
            "sft",
            str(tmp_path / "warm"),
            "--model",
            str(start),
            "--max-steps",
            "3",
            "--batch-size",
            "8",
            "--levels",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "saved" in result.output and "3 steps" in result.output
    load_model(tmp_path / "warm")  # a normal checkpoint

    run = tmp_path / "run"
    args = [
        "train",
        f"model.path={tmp_path / 'warm'}",
        f"train.output_dir={run}",
        "train.steps=2",
        "train.prompts_per_step=2",
        "train.mini_batch_prompts=1",
        "rollout.group_size=2",
        "rollout.max_new_tokens=4",
        "data.chat_template=never",
        "data.eval_size=4",
        "logging.progress=false",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2]

    result = runner.invoke(app, ["plot", str(run), "--out", str(tmp_path / "curves.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "curves.png").stat().st_size > 10_000

    twin = tmp_path / "other" / "run"  # two runs with the same folder name (seeds of two arms): both are drawn
    shutil.copytree(run, twin)
    drawn: dict = {}
    monkeypatch.setattr("hadw.experiments.demo.plot_runs", lambda runs, out: drawn.update(runs) or out)
    result = runner.invoke(app, ["plot", str(run), str(twin), "--out", str(tmp_path / "two.png")])
    assert result.exit_code == 0, result.output
    assert drawn == {str(run): run, str(twin): twin}

    result = runner.invoke(app, ["train", "hadw.anchr=window"])
    assert result.exit_code == 2
    assert "did you mean 'hadw.anchor'" in result.output
