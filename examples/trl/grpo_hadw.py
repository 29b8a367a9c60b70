"""GRPO / GSPO / DAPO + HA-DW with TRL, on any hadw source, scored by hadw's rewards.

Runs offline on CPU with a tiny random model by default (a smoke test, it will not learn much):
    python examples/trl/grpo_hadw.py --steps 4
A real model on GPUs (a local HF folder or a Hub id), GSPO preset, 8 processes, MATH training set:
    accelerate launch --num_processes 8 examples/trl/grpo_hadw.py --model Qwen/Qwen3-4B-Base \
        --data benchmark:math_train --algo gspo --template paper --batch 32 --completion 1024 --steps 500
Your own data and field names (the reward defaults to `exact` for tasks, `math` otherwise):
    python examples/trl/grpo_hadw.py --data my.jsonl --prompt-field query --answer-field solution --reward math_any
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from datasets import Dataset

from hadw.data import fill_template, load_problems, make_fields
from hadw.integrations.trl import HADWGRPOConfig, HADWGRPOTrainer
from hadw.rewards import REWARDS, trl_reward

# Paper Table 8 clip settings per base objective (docs/method.md §3.3); no KL (beta=0) for all three.
PRESETS = {
    "grpo": dict(loss_type="grpo", epsilon=0.2),
    "gspo": dict(loss_type="grpo", importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4),
    "dapo": dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="local model folder (default: build a tiny random one)")
    p.add_argument("--algo", choices=sorted(PRESETS), default="grpo")
    p.add_argument("--data", default="task:addition", help="task:NAME, benchmark:NAME, hf:ORG/NAME or a file")
    p.add_argument("--prompt-field", default=None, help="your data's question field (dotted path)")
    p.add_argument("--answer-field", default=None, help="your data's gold-answer field (dotted path)")
    p.add_argument("--reward", choices=sorted(REWARDS), default=None, help="default: exact for tasks, else math")
    p.add_argument("--template", default="plain", help="plain (tiny models) or paper (\\boxed{} answers)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch", type=int, default=16, help="completions per device per step")
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--completion", type=int, default=8, help="max_completion_length")
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--lam", type=float, default=1.3)
    p.add_argument("--anchor", default="window")
    p.add_argument("--no-hadw", action="store_true", help="plain GRPO/GSPO/DAPO (anchor still logged)")
    p.add_argument("--output", default=None)
    a = p.parse_args()

    model = a.model
    if model is None:
        from hadw.rollout.models import build_tiny_model

        model = str(build_tiny_model(tempfile.mkdtemp(prefix="hadw-tiny-")))
    is_task = a.data.startswith("task:")
    fields = make_fields("auto", a.prompt_field, a.answer_field)
    problems = load_problems(a.data, fields, limit=max(64, a.steps * a.batch) if is_task else None)
    train = Dataset.from_dict(
        {"prompt": [fill_template(q.question, a.template) for q in problems], "answer": [q.answer for q in problems]}
    )
    # hadw's verifier as a TRL reward function (it reads the `answer` column); isolated rewards keep
    # their per-item timeout in hadw's verifier pool.
    reward = trl_reward(a.reward or ("exact" if is_task else "math"))
    args = HADWGRPOConfig(
        output_dir=a.output or tempfile.mkdtemp(prefix="hadw-trl-"),
        max_steps=a.steps,
        per_device_train_batch_size=a.batch,
        num_generations=a.generations,
        max_completion_length=a.completion,
        learning_rate=a.lr,
        weight_decay=0.1,
        max_grad_norm=1.0,
        beta=0.0,
        logging_steps=1,
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        hadw_enabled=not a.no_hadw,
        hadw_lambda=a.lam,
        hadw_anchor=a.anchor,
        hadw_correctness_reward=reward.__name__,
        **PRESETS[a.algo],
    )
    HADWGRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=train).train()


if __name__ == "__main__":
    main()
