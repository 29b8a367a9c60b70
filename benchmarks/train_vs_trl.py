"""Training throughput of `hadw` vs TRL's GRPOTrainer on the same tiny model, task and batch, one run.

Both sides: the same tiny Qwen2 model (from one folder), plain prompts "47+38=" of the built-in addition
task (levels 1–3), G = 8 completions per prompt, 16 prompts per rollout batch, max 6 new tokens,
temperature 1, exact-match reward, AdamW at the same learning rate, 2 optimiser steps per rollout batch,
no KL, one pass. Runs alternate (hadw, TRL, hadw, ...) so machine load hits both alike; the time of a
rollout batch (generation + reward + update) excludes set-up and is reported as a median.

    .venv/bin/python benchmarks/train_vs_trl.py [--repeats 3] [--batches 6] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from transformers import TrainerCallback
from transformers.utils import logging as hf_logging

from hadw.data import sample_problems
from hadw.rewards import exact_item
from hadw.rollout import build_tiny_model
from hadw.train.config import load_config
from hadw.train.trainer import Trainer

PROMPTS, G, NEW_TOKENS, LR, MINI_BATCH_PROMPTS = 16, 8, 6, 2e-4, 8


def run_hadw(model_dir: Path, out: Path, batches: int) -> tuple[float, dict[str, float]]:
    overrides = [
        f"model.path={model_dir}", "data.source=task:addition", "data.levels=[1,2,3]", "data.template=plain",
        "data.chat_template=never", "reward.functions=[exact]", "reward.correctness=exact",
        f"rollout.group_size={G}", f"rollout.max_new_tokens={NEW_TOKENS}", f"train.prompts_per_step={PROMPTS}",
        f"train.mini_batch_prompts={MINI_BATCH_PROMPTS}", f"optim.lr={LR}", "optim.warmup_steps=0",
        "optim.weight_decay=0.0", f"train.output_dir={out}", "logging.progress=false", "logging.sample_every=0",
        "hadw.enabled=true",
    ]
    trainer = Trainer(load_config(None, overrides))
    trainer.train_step(0)  # warm-up
    times, splits = [], []
    for step in range(1, batches + 1):
        start = time.perf_counter()
        metrics = trainer.train_step(step)
        times.append(time.perf_counter() - start)
        splits.append({k: metrics[k] for k in ("timing_s/gen", "timing_s/reward", "timing_s/update")})
    trainer.logger.close()
    split = {k: statistics.median(s[k] for s in splits) for k in splits[0]}
    return statistics.median(times), split


class StepTimer(TrainerCallback):
    def __init__(self):
        self.stamps: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.stamps.append(time.perf_counter())


def run_trl(model_dir: Path, out: Path, batches: int) -> float:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    problems = sample_problems("addition", PROMPTS * (batches + 1), levels=[1, 2, 3], seed=0)
    data = Dataset.from_dict({"prompt": [f"{p.question}=" for p in problems], "answer": [p.answer for p in problems]})

    def exact(completions, answer, **kwargs):
        return [exact_item(c, a) for c, a in zip(completions, answer, strict=True)]

    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=PROMPTS * G // 2, steps_per_generation=2,
        num_generations=G, max_completion_length=NEW_TOKENS, temperature=1.0, learning_rate=LR,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, beta=0.0, num_iterations=1,
        max_steps=2 * (batches + 1), report_to=[], use_cpu=True, logging_steps=1000, save_strategy="no",
        seed=0, disable_tqdm=True, shuffle_dataset=False,
    )
    timer = StepTimer()
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=[exact], args=args, train_dataset=data, callbacks=[timer])
    trainer.train()
    # Two optimiser steps per rollout batch; skip the first batch (warm-up).
    per_batch = [timer.stamps[i + 2] - timer.stamps[i] for i in range(1, len(timer.stamps) - 2, 2)]
    return statistics.median(per_batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, default=6, help="timed rollout batches per run")
    parser.add_argument("--threads", type=int, default=1)
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "model")
        rows = []
        for r in range(opts.repeats):
            ours, split = run_hadw(model_dir, Path(tmp) / f"hadw{r}", opts.batches)
            trl = run_trl(model_dir, Path(tmp) / f"trl{r}", opts.batches)
            rows.append((ours, trl, split))
            print(f"repeat {r}: s per rollout batch  hadw {ours:.3f}  TRL {trl:.3f}  speed-up {trl / ours:.2f}x")
    ours = statistics.median(r[0] for r in rows)
    trl = statistics.median(r[1] for r in rows)
    split = {k: statistics.median(r[2][k] for r in rows) for k in rows[0][2]}
    print(f"\nsetup: {PROMPTS} prompts x G={G}, {NEW_TOKENS} new tokens, 2 optimiser steps per batch, "
          f"{opts.threads} thread(s), {opts.repeats} repeats x {opts.batches} batches")
    print(f"hadw train (GRPO+HA-DW)   {ours:.3f} s per rollout batch  ({1 / ours:.2f} steps/s)")
    print(f"TRL GRPOTrainer (GRPO)    {trl:.3f} s per rollout batch  ({1 / trl:.2f} steps/s)")
    print(f"throughput ratio hadw/TRL {trl / ours:.2f}x  (target >= 1.5)")
    print("hadw step split (median s): " + ", ".join(f"{k.split('/')[1]} {v:.3f}" for k, v in split.items()))


if __name__ == "__main__":
    main()
