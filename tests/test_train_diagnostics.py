"""What `hadw train` tells a user whose run cannot learn (issue 10.6) and how much memory it takes (10.7)."""

from __future__ import annotations

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


def test_all_degenerate_steps_warn_once_with_causes_and_the_eval_command(tmp_path, capsys):
    # A random byte-level model never writes the sum of two numbers in 2 tokens: every group scores 0, 0
    trainer = Trainer(_config(tmp_path))
    for step in range(4):
        metrics = trainer.train_step(step)
        assert metrics["batch/degenerate_frac"] == 1.0
        assert (trainer.no_signal_warning is None) == (step < 2)  # after 3 steps in a row, not before
    err = capsys.readouterr().err
    assert err.count("every group is degenerate") == 1  # once, not every step
    assert "SFT first" in err and "rollout.max_new_tokens=2" in err
    assert f"hadw eval {trainer.cfg.model.path} --data task:sums --max-new-tokens 2 --samples" in err


def test_a_step_with_signal_resets_the_count(tmp_path):
    trainer = Trainer(_config(tmp_path))
    for frac in (1.0, 1.0, 0.5, 1.0, 1.0):
        trainer._warn_if_no_signal(0, frac)
    assert trainer.no_signal_warning is None


def test_step_metrics_carry_peak_memory(tmp_path):
    trainer = Trainer(_config(tmp_path, "train.steps=1"))
    trainer.train()
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "perf/cpu_peak_rss_gb" in r]
    assert rows and 0.05 < rows[0]["perf/cpu_peak_rss_gb"] < 64  # torch + a model, within this machine
