"""GRPO / GSPO / DAPO + HA-DW with TRL on a built-in arithmetic task.

Runs offline on CPU with a tiny random model by default (a smoke test, it will not learn much):
    python examples/trl/grpo_hadw.py --steps 4
A real model on GPUs (any local HF folder), GSPO preset, 8 processes:
    accelerate launch --num_processes 8 examples/trl/grpo_hadw.py --model /models/Qwen3-4B-Base \
        --algo gspo --template paper --batch 32 --completion 1024 --steps 500 --output runs/gspo-hadw
"""

from __future__ import annotations

import argparse
import re
import tempfile

import torch
from datasets import Dataset

from hadw.data.answers import extract_answer
from hadw.data.tasks import sample_problems
from hadw.data.templates import fill_template
from hadw.integrations.trl import HADWGRPOConfig, HADWGRPOTrainer

# Paper Table 8 clip settings per base objective (method.md §3.3); no KL (beta=0) for all three.
PRESETS = {
    "grpo": dict(loss_type="grpo", epsilon=0.2),
    "gspo": dict(loss_type="grpo", importance_sampling_level="sequence", epsilon=3e-4, epsilon_high=4e-4),
    "dapo": dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28),
}


def accuracy(completions, answer, **kwargs) -> list[float]:
    """1.0 when the completion's answer (last \\boxed{}, else its leading number) equals the gold answer."""
    out = []
    for text, gold in zip(completions, answer, strict=True):
        got = extract_answer(text)
        if got is None:
            lead = re.match(r"\s*(-?\d+)", text)
            got = lead.group(1) if lead else None
        out.append(float(got is not None and got.strip() == gold.strip()))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="local model folder (default: build a tiny random one)")
    p.add_argument("--algo", choices=sorted(PRESETS), default="grpo")
    p.add_argument("--task", default="addition")
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
    problems = sample_problems(a.task, n=max(64, a.steps * a.batch), seed=0)
    train = Dataset.from_dict(
        {"prompt": [fill_template(q.question, a.template) for q in problems], "answer": [q.answer for q in problems]}
    )
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
        hadw_correctness_reward="accuracy",
        **PRESETS[a.algo],
    )
    HADWGRPOTrainer(model=model, reward_funcs=[accuracy], args=args, train_dataset=train).train()


if __name__ == "__main__":
    main()
