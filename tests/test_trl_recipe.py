"""examples/trl/math_grpo_hadw.py: the paper's MATH recipe as a TRL config builds without a GPU (issue 10.2)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from conftest import REPO_ROOT

pytest.importorskip("trl")


@pytest.fixture(scope="module")
def recipe():
    spec = importlib.util.spec_from_file_location("math_grpo_hadw", REPO_ROOT / "examples/trl/math_grpo_hadw.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("processes", [8, 2])
def test_the_config_is_the_papers_batch_with_colocated_vllm(recipe, tmp_path, processes):
    args = recipe.parse_args(["--model", "m", "--processes", str(processes), "--output", str(tmp_path)])
    cfg = recipe.build_config(args, use_cpu=True)  # bf16 needs a GPU; the rest is what a GPU run gets
    assert cfg.use_vllm and cfg.vllm_mode == "colocate" and cfg.vllm_gpu_memory_utilization == 0.3
    assert cfg.bf16 and cfg.beta == 0.0 and cfg.num_generations == 8 and cfg.max_completion_length == 4096
    assert (cfg.learning_rate, cfg.weight_decay, cfg.warmup_steps, cfg.max_grad_norm) == (1e-6, 0.1, 10, 1.0)
    assert (cfg.loss_type, cfg.epsilon, cfg.hadw_enabled, cfg.hadw_lambda) == ("grpo", 0.2, True, 1.3)
    # Table 8: 256 prompts x 8 per rollout batch, 16 prompts x 8 per optimiser step, on `processes` GPUs
    per_rank = cfg.per_device_train_batch_size
    assert per_rank * processes * cfg.steps_per_generation == 256 * 8
    assert per_rank * processes * cfg.gradient_accumulation_steps == 16 * 8
    assert cfg.steps_per_generation // cfg.gradient_accumulation_steps == 16


def test_gspo_preset_and_bad_process_count(recipe):
    cfg = recipe.build_config(recipe.parse_args(["--model", "m", "--algo", "gspo"]), use_cpu=True)
    assert (cfg.importance_sampling_level, cfg.epsilon, cfg.epsilon_high) == ("sequence", 3e-4, 4e-4)
    with pytest.raises(SystemExit, match="must divide 8"):
        recipe.build_config(recipe.parse_args(["--model", "m", "--processes", "3"]), use_cpu=True)


def test_dataset_and_reward_use_hadw_data_and_verifier(recipe, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"problem": "What is $1/2$ as a decimal?", "answer": "0.5"}) + "\n")
    ds = recipe.build_dataset(recipe.parse_args(["--model", "m", "--data", str(data)]))
    assert ds[0]["answer"] == "0.5" and ds[0]["prompt"].startswith("What is $1/2$") and "\\boxed{}" in ds[0]["prompt"]
    assert recipe.math_correct(["so \\boxed{\\frac{1}{2}}", "0.5", "\\boxed{2}"], ["0.5"] * 3) == [1.0, 0.0, 0.0]
