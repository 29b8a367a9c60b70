"""The paper's MATH recipe (examples/math_grpo_hadw.yaml) on TRL: `hadw train ... engine=trl` on 8 or 2 GPUs builds
TRL's GRPOConfig without a GPU, with the paper's batch and vLLM colocated (it replaced the hand-written
examples/trl/math_grpo_hadw.py, whose assertions these are)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO_ROOT

pytest.importorskip("trl")

from hadw.train.config import load_config
from hadw.train.engines.trl_args import batch_layout, grpo_kwargs

PAPER = REPO_ROOT / "examples" / "math_grpo_hadw.yaml"
README_LINE = ["engine=trl", "trl.num_processes=8", "trl.accelerate_config=zero2", "trl.vllm=colocate"]


def _config(processes: int, *extra: str):
    return load_config(PAPER, [*README_LINE[:1], f"trl.num_processes={processes}", *README_LINE[2:], *extra])


@pytest.mark.parametrize("processes", [8, 2])
def test_the_config_is_the_papers_batch_with_colocated_vllm(processes, tmp_path):
    from hadw.integrations.trl import HADWGRPOConfig

    cfg = _config(processes)
    kwargs = grpo_kwargs(cfg, tmp_path)
    args = HADWGRPOConfig(**(kwargs | {"use_cpu": True, "bf16": False}))  # bf16 needs a GPU; the rest is a GPU run's
    assert args.use_vllm and args.vllm_mode == "colocate" and args.vllm_gpu_memory_utilization == 0.3
    assert kwargs["bf16"] and args.beta == 0.0 and args.num_generations == 8 and args.max_completion_length == 4096
    assert (args.learning_rate, args.weight_decay, args.warmup_steps, args.max_grad_norm) == (1e-6, 0.1, 10, 1.0)
    assert (args.loss_type, args.epsilon, args.hadw_enabled, args.hadw_lambda) == ("grpo", 0.2, True, 1.3)
    # Table 8: 256 prompts x 8 per rollout batch, 16 prompts x 8 per optimiser step, on `processes` GPUs
    per_rank = args.per_device_train_batch_size * processes
    assert per_rank * args.gradient_accumulation_steps == 16 * 8
    assert per_rank * args.steps_per_generation == 256 * 8
    assert batch_layout(cfg)["updates_per_step"] == 16 and args.max_steps == 87 * 16


def test_gspo_preset_and_a_process_count_that_does_not_divide():
    kwargs = grpo_kwargs(_config(8, "algorithm.preset=gspo"), Path("run"))
    assert (kwargs["importance_sampling_level"], kwargs["epsilon"], kwargs["epsilon_high"]) == ("sequence", 3e-4, 4e-4)
    from hadw.train.config import ConfigError

    with pytest.raises(ConfigError, match="must split evenly over trl.num_processes=3"):
        _config(3)


def test_the_readme_gives_this_command():
    assert f"hadw train examples/math_grpo_hadw.yaml {' '.join(README_LINE)}" in (REPO_ROOT / "README.md").read_text()
