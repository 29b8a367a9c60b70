"""Progress without a terminal: each long command, run with stderr a pipe (as in a Slurm log, CI, nohup, or
`hadw ... 2>&1 | cat`), prints plain progress lines (hadw.progress, lines mode) from its start.

Before issue 33 the trainer drew a rich bar that a pipe saw only at the end, and eval / probe / sft / compare
printed nothing at all until they finished.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, TINY_COMPARE_RECIPE

pytestmark = pytest.mark.slow

# A tiny run: the conftest recipe (1-layer 32-wide model, 2 prompts × 2 responses, 3 new tokens), 2 steps.
TINY_TRAIN = [*TINY_COMPARE_RECIPE, "train.steps=2"]


def _hadw_through_a_pipe(*args: str, cwd: Path) -> str:
    """Run `hadw ARGS` with stdout and stderr pipes (not terminals) and the default progress mode; its stderr."""
    env = {k: v for k, v in os.environ.items() if k != "HADW_PROGRESS"}  # the default mode: auto
    # A line at every update instead of every 10 s: these tiny jobs end within a second or two (the timer itself:
    # tests/test_progress.py).
    env |= {"PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1", "HADW_PROGRESS_INTERVAL": "0"}
    result = subprocess.run(
        [sys.executable, "-m", "hadw.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def _progress_lines(stderr: str, desc: str, unit: str) -> list[str]:
    """The plain progress lines of `desc`: 'desc: n/total units (p%) | rate | elapsed H:MM:SS | ETA ...'."""
    pattern = re.compile(rf"^{re.escape(desc)}: \d+/\d+ {unit}s \(\d+%\) \| .+ \| elapsed \d+:\d\d:\d\d \| ETA ")
    return [line for line in stderr.splitlines() if pattern.match(line)]


def test_train_and_its_sft_warm_start_print_progress_lines(tmp_path):
    tiny = ["model.path="]  # the tiny model built by the trainer, then its SFT warm start
    warm = ["model.tiny.warm_start_accuracy=1.0", "model.tiny.warm_start_max_steps=2"]  # 2 SFT steps, then RL
    stderr = _hadw_through_a_pipe("train", *TINY_TRAIN, *tiny, *warm, f"train.output_dir={tmp_path / 'run'}",
                                  cwd=tmp_path)  # fmt: skip
    sft = _progress_lines(stderr, "sft", "step")
    assert sft and sft[-1].startswith("sft: 2/2 steps (100%)"), stderr
    grpo = _progress_lines(stderr, "grpo", "step")
    assert grpo and grpo[-1].startswith("grpo: 2/2 steps (100%)"), stderr
    assert "reward=" in grpo[-1] and "acc=" in grpo[-1]


def test_sft_prints_progress_lines(tmp_path):
    stderr = _hadw_through_a_pipe("sft", str(tmp_path / "warm"), "--task", "addition", "--levels", "1",
                                  "--max-steps", "2", "--batch-size", "4", cwd=tmp_path)  # fmt: skip
    lines = _progress_lines(stderr, "sft", "step")
    assert lines and lines[-1].startswith("sft: 2/2 steps (100%)"), stderr


def test_eval_prints_progress_lines(tmp_path, tiny_path):
    stderr = _hadw_through_a_pipe("eval", str(tiny_path), "--data", "task:addition", "--limit", "4",
                                  "--max-new-tokens", "2", cwd=tmp_path)  # fmt: skip
    lines = _progress_lines(stderr, "eval", "problem")
    assert lines and lines[-1].startswith("eval: 4/4 problems (100%)"), stderr


def test_probe_prints_progress_lines(tmp_path, tiny_path):
    stderr = _hadw_through_a_pipe("probe", str(tiny_path), "--data", "task:addition", "--limit", "2", "-G", "2",
                                  "-N", "2", "--max-new-tokens", "2", "--png", str(tmp_path / "p.png"),
                                  cwd=tmp_path)  # fmt: skip
    lines = _progress_lines(stderr, "probe (4 samples/prompt)", "prompt")
    assert lines and lines[-1].startswith("probe (4 samples/prompt): 2/2 prompts (100%)"), stderr


def test_compare_prints_progress_lines(tmp_path, tiny_path):
    recipe = [*TINY_COMPARE_RECIPE, "train.steps=1", f"model.path={tiny_path}"]
    stderr = _hadw_through_a_pipe("compare", "--out", str(tmp_path / "cmp"), "--arm", "grpo:", "--seeds", "0",
                                  *[x for o in recipe for x in ("--set", o)], cwd=tmp_path)  # fmt: skip
    lines = _progress_lines(stderr, "runs (1 at a time)", "run")
    assert lines and lines[-1].startswith("runs (1 at a time): 1/1 runs (100%)"), stderr
