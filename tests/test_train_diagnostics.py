"""What `hadw train` tells a user whose run cannot learn (issue 10.6) and how much memory it takes (10.7)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.rollout import build_tiny_model
from hadw.train.config import load_config
from hadw.train.metrics_log import read_jsonl
from hadw.train.trainer import Trainer


def _config(tmp_path, *extra):
    model = build_tiny_model(tmp_path / "tiny", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                             intermediate_size=64)  # fmt: skip
    return load_config(None, [
        f"model.path={model}", "data.template=plain", "data.chat_template=never", "data.eval_size=4",
        "rollout.group_size=2", "rollout.max_new_tokens=2", "train.prompts_per_step=2", "train.mini_batch_prompts=2",
        "train.steps=4", f"train.output_dir={tmp_path / 'run'}", "logging.progress=false", "logging.sample_every=0",
        *extra,
    ])  # fmt: skip


def test_all_degenerate_steps_warn_once_with_the_measured_cause_and_a_command_that_runs(tmp_path, capsys):
    # A random byte-level model never writes the sum of two numbers in 2 tokens: every group scores 0, 0
    trainer = Trainer(_config(tmp_path, "data.source=task:addition", "data.levels=[3]"))
    for step in range(4):
        metrics = trainer.train_step(step)
        assert metrics["batch/degenerate_frac"] == 1.0
        assert (trainer.no_signal_warning is None) == (step < 2)  # after 3 steps in a row, not before
    err = capsys.readouterr().err
    assert err.count("every group is degenerate") == 1  # once, not every step
    # measured, not guessed: 3-digit sums need 4 tokens, so every response was cut at 2
    assert "Measured on the last batch: 100% of responses were cut off at rollout.max_new_tokens=2" in err
    command = err.split("Look at the completions (the run's own data, template and reward): ")[1].split()
    assert command[:2] == ["hadw", "eval"] and command[2] == str(tmp_path / "run")
    # the suggested command runs as printed, and prompts like the run (task, plain template, no chat)
    samples = tmp_path / "samples.jsonl"
    command[command.index("--samples") + 1] = str(samples)
    result = CliRunner().invoke(build_app(), [*command[1:], "--no-progress"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(rows) == 20 and all(r["prompt"].endswith("=") and r["level"] == 3 for r in rows)


def test_the_warning_names_reward_failures_and_unreadable_answers(tmp_path):
    from hadw.train.trainer import measured_no_signal_causes

    cfg = _config(tmp_path)
    failing = {"reward/errors": 8.0, "critic/score/mean": 0.0, "response_length/clip_ratio": 0.0}
    assert measured_no_signal_causes(failing, ["x"] * 8, cfg)[0] == "the reward failed on 8 of 8 responses " \
        "(errors and timeouts score 0)"  # fmt: skip
    unreadable = {"critic/score/mean": 0.0, "response_length/clip_ratio": 0.0}
    unread = measured_no_signal_causes(unreadable, ["abc", "x y"], cfg)
    assert unread == ["no response had an answer reward 'exact' can read"]
    assert measured_no_signal_causes(unreadable, ["abc", "12"], cfg) == []  # a number: readable; causes unknown
    assert "too easy" in measured_no_signal_causes({"critic/score/mean": 1.0}, ["12"], cfg)[0]


def test_a_step_with_signal_resets_the_count(tmp_path):
    trainer = Trainer(_config(tmp_path))
    for frac in (1.0, 1.0, 0.5, 1.0, 1.0):
        trainer._warn_if_no_signal(0, {"batch/degenerate_frac": frac}, [])
    assert trainer.no_signal_warning is None


def test_step_metrics_carry_peak_memory(tmp_path):
    trainer = Trainer(_config(tmp_path, "train.steps=1"))
    trainer.train()
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "perf/cpu_peak_rss_gb" in r]
    assert rows and 0.05 < rows[0]["perf/cpu_peak_rss_gb"] < 64  # torch + a model, within this machine
