"""The paper's MATH recipe (docs/method.md §3.3, Table 8) with TRL: GRPO + HA-DW, vLLM rollouts colocated with training.

This is the path for vLLM-speed generation on one or many GPUs: TRL runs vLLM inside each training process
(`use_vllm=True, vllm_mode="colocate"`) and syncs the weights into it after every optimiser step; hadw only
rescales the advantages (HADWGRPOTrainer). 8 GPUs, Qwen3-4B-Base, MATH train split:

    accelerate launch --config_file examples/trl/accelerate_zero3.yaml examples/trl/math_grpo_hadw.py \\
        --model /models/Qwen3-4B-Base --data benchmark:math_train --data-dir /data/hadw --output runs/trl-math

Batch arithmetic (paper: 256 prompts x G=8 per rollout batch, 16 prompts per optimiser step):
    completions per optimiser step = per_device_train_batch_size x processes x gradient_accumulation_steps
                                   = 8 x 8 x 2 = 128 = 16 prompts x 8
    completions per rollout batch  = per_device_train_batch_size x processes x steps_per_generation
                                   = 8 x 8 x 32 = 2048 = 256 prompts x 8  -> 32 / 2 = 16 optimiser steps each
With fewer GPUs pass --processes N: steps_per_generation and gradient_accumulation_steps scale so that both
products stay the same. GSPO / DAPO: --algo gspo | dapo (Table 8 clip values).
"""

from __future__ import annotations

import argparse
from pathlib import Path

# Table 8 per base objective; no KL (beta = 0) for all three.
PRESETS = {
    "grpo": dict(loss_type="grpo", epsilon=0.2),
    "gspo": dict(loss_type="grpo", importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4),
    "dapo": dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28),
}
PAPER_PROCESSES = 8  # the paper's GPUs; the batch sizes below are per device for that many
PER_DEVICE_BATCH = 8  # completions per device per micro-step


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a local HF model folder, e.g. Qwen3-4B-Base")
    p.add_argument("--data", default="benchmark:math_train", help="benchmark:<name> or a JSONL/parquet file")
    p.add_argument("--data-dir", default=None, help="folder of the benchmark files (default $HADW_SHARED_DATA)")
    p.add_argument("--algo", choices=sorted(PRESETS), default="grpo")
    p.add_argument("--processes", type=int, default=PAPER_PROCESSES, help="GPUs (accelerate num_processes)")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--lam", type=float, default=1.3, help="HA-DW λ_scale (paper Table 7)")
    p.add_argument("--anchor", default="window")
    p.add_argument("--no-hadw", action="store_true", help="plain GRPO / GSPO / DAPO")
    p.add_argument("--vllm-memory", type=float, default=0.3, help="share of each GPU vLLM may take (colocate)")
    p.add_argument("--output", default="runs/trl-math-grpo-hadw")
    return p.parse_args(argv)


def build_config(a: argparse.Namespace, **overrides):
    """The HADWGRPOConfig of the recipe; overrides replace any field (the tests pass use_cpu=True)."""
    from hadw.integrations.trl import HADWGRPOConfig

    if PAPER_PROCESSES % a.processes:
        raise SystemExit(f"--processes {a.processes}: must divide {PAPER_PROCESSES} to keep the paper's batch")
    scale = PAPER_PROCESSES // a.processes  # fewer GPUs: more micro-steps, same batch
    fields = dict(
        output_dir=a.output,
        num_train_epochs=a.epochs,
        per_device_train_batch_size=PER_DEVICE_BATCH,
        gradient_accumulation_steps=2 * scale,  # 128 completions = 16 prompts per optimiser step
        steps_per_generation=32 * scale,  # 2048 completions = 256 prompts per rollout batch
        num_generations=8,
        max_completion_length=4096,
        temperature=1.0,
        learning_rate=1e-6,
        weight_decay=0.1,
        warmup_steps=10,
        lr_scheduler_type="constant_with_warmup",
        max_grad_norm=1.0,
        beta=0.0,
        scale_rewards="group",
        bf16=True,  # autocast with float32 master weights (what hadw's model.compute_dtype=bfloat16 does)
        gradient_checkpointing=True,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=a.vllm_memory,
        logging_steps=1,
        save_steps=50,
        report_to=["tensorboard"],
        hadw_enabled=not a.no_hadw,
        hadw_lambda=a.lam,
        hadw_anchor=a.anchor,
        hadw_correctness_reward="math_correct",
        **PRESETS[a.algo],
    )
    return HADWGRPOConfig(**(fields | overrides))


def build_dataset(a: argparse.Namespace):
    """Prompts in the paper's template ("... \\boxed{}") with the gold answer in the `answer` column."""
    from datasets import Dataset

    from hadw.data import load_benchmark, load_dataset_file
    from hadw.data.templates import fill_template

    if a.data.startswith("benchmark:"):
        from hadw.train.prompts import default_data_dir

        problems = load_benchmark(a.data.split(":", 1)[1], Path(a.data_dir) if a.data_dir else default_data_dir())
    else:
        problems = load_dataset_file(a.data)
    return Dataset.from_dict(
        {"prompt": [fill_template(q.question, "paper") for q in problems], "answer": [q.answer for q in problems]}
    )


def math_correct(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """TRL reward: hadw's `math` verifier (math-verify on the last \\boxed{} answer), 1.0 when correct.

    Runs in hadw's verifier pool, so a pathological answer costs its timeout and scores 0 instead of hanging.
    """
    from hadw.rewards import score

    return score(list(completions), list(answer), correctness="math").correctness.tolist()


def main(argv: list[str] | None = None) -> None:
    from hadw.integrations.trl import HADWGRPOTrainer

    a = parse_args(argv)
    args = build_config(a)
    HADWGRPOTrainer(model=a.model, reward_funcs=[math_correct], args=args, train_dataset=build_dataset(a)).train()


if __name__ == "__main__":
    main()
