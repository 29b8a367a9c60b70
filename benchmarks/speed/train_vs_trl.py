"""Training throughput of `hadw` vs TRL's GRPOTrainer on the same tiny model, task and batch, side by side.

Both sides: the same tiny Qwen2 model (from one folder), plain prompts "47+38=" of the built-in addition
task (levels 1–3), G = 8 completions per prompt, 16 prompts per rollout batch, max 6 new tokens,
temperature 1, exact-match reward, AdamW at the same learning rate, no KL, one pass, one precision.

TRL is set up for this CPU, not with its GPU defaults (trl_cpu.py): `gradient_checkpointing=False` (TRL's
default True recomputes activations to save GPU memory), and the faster of its precisions, measured
(`--precision auto`): bf16 autocast (`bf16=True`) where the CPU computes bf16 natively (AVX512-BF16 / AMX
flags) and a forward + backward of the raced model runs faster in it, else fp32. hadw runs in the same
precision (`model.compute_dtype=bfloat16`: the same autocast over fp32 master weights). The choice and why,
TRL's settings (accelerate's mixed_precision, the model's dtype) and the versions are printed. Two recipes,
each timed per rollout batch (generation + reward + update):

  natural     each library's usual recipe: 2 optimiser steps per rollout batch (mini-batches of 8 prompts).
              hadw takes π_old from the sampler's log-probs; TRL recomputes them with an extra forward pass.
              In bf16 both recompute π_old (hadw's rollout.recompute_logprobs=auto does under autocast).
  equal work  1 optimiser step per rollout batch on both sides, so both do one generation, one
              forward + backward and no old-log-prob pass (TRL skips it when generation and steps align;
              in bf16 hadw is told to, rollout.recompute_logprobs=never, and takes π_old from the sampler).

Where hadw's edge at equal work comes from (same passes, same maths): the G rows of a group share one
prompt forward, in generation (one prefill per distinct prompt) and in the update (the prompt's KV cache
is expanded to the group's rows with its gradient: `compute_logprobs(share_prompts=True)`); with prompts
longer than the answers, as here, that is most of the update's tokens. Then FusedDecoder's decode step.

Runs alternate (hadw, TRL, hadw, TRL, ... for each recipe) so machine load hits both alike. Each run's
time is the median over its timed rollout batches (the first batch is warm-up); the table gives min /
median / max over runs, wall and process CPU time, and the speed-up of each side-by-side pair.

    .venv/bin/python benchmarks/speed/train_vs_trl.py [--repeats 5] [--batches 5] [--threads 1] [--model-shape 135M]
        [--precision auto|fp32|bf16] [--report FILE]

--model-shape 135M runs both sides on SmolLM2-135M's shapes (random weights, a 49 152-row vocabulary:
bench_models.py), where the vocabulary head and its log-softmax are a large part of every forward. The
reports before --precision existed (train_vs_trl_tiny.md, train_vs_trl_135m.md) ran both sides in fp32.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from bench_models import MODELS
from bench_report import add_report_option, report
from transformers import TrainerCallback
from transformers.utils import logging as hf_logging
from trl_cpu import QUIET, Choice, add_precision_option, best_precision, cpu_best, describe, hadw_overrides, silence

from hadw.data import sample_problems
from hadw.rewards import exact_item
from hadw.rollout import build_tiny_model
from hadw.train.config import load_config
from hadw.train.trainer import Trainer

PROMPTS, G, NEW_TOKENS, LR = 16, 8, 6, 2e-4
# recipe -> optimiser steps per rollout batch
RECIPES = {"natural": 2, "equal work": 1}


def hadw_config(model_dir: Path, out: Path, opt_steps: int, precision: str) -> list[str]:
    """hadw's config overrides for one run of a recipe (opt_steps optimiser steps per rollout batch)."""
    overrides = [
        f"model.path={model_dir}",
        "data.source=task:addition",
        "data.levels=[1,2,3]",
        "data.template=plain",
        "data.chat_template=never",
        "reward.functions=[exact]",
        "reward.correctness=exact",
        f"rollout.group_size={G}",
        f"rollout.max_new_tokens={NEW_TOKENS}",
        f"train.prompts_per_step={PROMPTS}",
        f"train.mini_batch_prompts={PROMPTS // opt_steps}",
        f"optim.lr={LR}",
        "optim.warmup_steps=0",
        "optim.weight_decay=0.0",
        f"train.output_dir={out}",
        "logging.progress=false",
        "logging.sample_every=0",
        "hadw.enabled=true",
        *hadw_overrides(precision),
    ]
    if precision == "bf16" and opt_steps == 1:
        # Equal work: TRL skips the old-log-prob pass when each generation feeds one step; so does hadw here
        # (under autocast its default re-scores the samples, a forward TRL does not do in this recipe).
        overrides.append("rollout.recompute_logprobs=never")
    return overrides


def hadw_trainer(model_dir: Path, out: Path, opt_steps: int, precision: str = "fp32") -> Trainer:
    return Trainer(load_config(None, hadw_config(model_dir, out, opt_steps, precision)))


def run_hadw(model_dir: Path, out: Path, batches: int, opt_steps: int, precision: str) -> tuple[float, float]:
    """Median (wall, CPU) seconds per rollout batch over `batches` timed batches."""
    trainer = hadw_trainer(model_dir, out, opt_steps, precision)
    trainer.train_step(0)  # warm-up
    walls, cpus = [], []
    for step in range(1, batches + 1):
        wall, cpu = time.perf_counter(), time.process_time()
        trainer.train_step(step)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    trainer.logger.close()
    return statistics.median(walls), statistics.median(cpus)


class StepTimer(TrainerCallback):
    def __init__(self):
        self.stamps: list[tuple[float, float]] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.stamps.append((time.perf_counter(), time.process_time()))


def trl_trainer(
    model_dir: Path, out: Path, batches: int, opt_steps: int, precision: str, timer: StepTimer | None = None
):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    problems = sample_problems("addition", PROMPTS * (batches + 1), levels=[1, 2, 3], seed=0)
    data = Dataset.from_dict({"prompt": [f"{p.question}=" for p in problems], "answer": [p.answer for p in problems]})

    def exact(completions, answer, **kwargs):
        return [exact_item(c, a) for c, a in zip(completions, answer, strict=True)]

    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=PROMPTS * G // opt_steps,
        steps_per_generation=opt_steps,
        num_generations=G,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        beta=0.0,
        num_iterations=1,
        max_steps=opt_steps * (batches + 1),
        logging_steps=1000,
        shuffle_dataset=False,
        **cpu_best(precision),  # the measured precision, no activation recomputation (trl_cpu.py)
        **QUIET,
    )
    callbacks = [timer] if timer is not None else []
    return silence(
        GRPOTrainer(model=str(model_dir), reward_funcs=[exact], args=args, train_dataset=data, callbacks=callbacks)
    )


def run_trl(model_dir: Path, out: Path, batches: int, opt_steps: int, precision: str) -> tuple[float, float]:
    timer = StepTimer()
    trl_trainer(model_dir, out, batches, opt_steps, precision, timer).train()
    # A rollout batch = generation + opt_steps optimiser steps; the first batch (warm-up) is skipped.
    k, stamps = opt_steps, timer.stamps
    starts = range(k - 1, len(stamps) - k, k)
    spans = [(stamps[i + k][0] - stamps[i][0], stamps[i + k][1] - stamps[i][1]) for i in starts]
    return statistics.median(s[0] for s in spans), statistics.median(s[1] for s in spans)


def profile_hadw(model_dir: Path, out: Path, precision: str, top: int = 12) -> None:
    """Where one natural-recipe rollout batch of `hadw train` spends its CPU time: the trainer's own split
    (generation / reward / update) and the ops that take the most self CPU time, with their input shapes (the
    vocabulary head is the matmul with the vocabulary-sized weight)."""
    from torch.profiler import ProfilerActivity, profile

    trainer = hadw_trainer(model_dir, out, RECIPES["natural"], precision)
    trainer.train_step(0)  # warm-up
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        metrics = trainer.train_step(1)
    trainer.logger.close()
    split = {k: metrics[k] for k in ("timing_s/gen", "timing_s/reward", "timing_s/update")}
    print("hadw step split (s):", {k.split("/")[1]: round(v, 2) for k, v in split.items()})
    table = prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=top)
    print(table)


def fmt(values) -> str:
    v = sorted(values)
    return f"{v[0]:6.3f} / {statistics.median(v):6.3f} / {v[-1]:6.3f}"


def print_settings(model_dir: Path, threads: int, choice: Choice) -> None:
    import accelerate
    import transformers
    import trl

    with tempfile.TemporaryDirectory() as tmp:
        probe = trl_trainer(model_dir, Path(tmp), 1, 1, choice.precision)
        a = probe.args
        print(
            f"versions: torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}, "
            f"accelerate {accelerate.__version__}; {threads} thread(s), {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        print(
            f"TRL settings: {describe(probe)}, beta={a.beta}, num_iterations={a.num_iterations}, "
            f"loss_type={a.loss_type}"
        )
    print(choice.line())
    hadw_precision = " ".join(hadw_overrides(choice.precision)) or "model.compute_dtype=float32"
    print(
        f"setup: {PROMPTS} prompts x G={G}, {NEW_TOKENS} new tokens, {choice.precision}; hadw = GRPO + HA-DW "
        f"(train.* as above, {hadw_precision}), TRL = GRPO"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="alternating runs per side and recipe")
    parser.add_argument("--batches", type=int, default=5, help="timed rollout batches per run")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model-shape", choices=sorted(MODELS), default="tiny", help="bench_models.MODELS name")
    parser.add_argument("--profile", action="store_true", help="profile one hadw rollout batch only")
    add_precision_option(parser)
    add_report_option(parser)
    opts = parser.parse_args()
    with report(opts.report, parser, opts):
        measure(opts)


def measure(opts: argparse.Namespace) -> None:
    torch.set_num_threads(opts.threads)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "model", **MODELS[opts.model_shape])
        print(f"model: {opts.model_shape} ({MODELS[opts.model_shape]})")
        choice = best_precision(opts.precision, model_dir, opts.threads)
        if opts.profile:
            print(choice.line())
            profile_hadw(model_dir, Path(tmp) / "profile", choice.precision)
            return
        print_settings(model_dir, opts.threads, choice)
        results: dict[str, list[tuple[tuple[float, float], tuple[float, float]]]] = {r: [] for r in RECIPES}
        for r in range(opts.repeats):
            for recipe, steps in RECIPES.items():
                ours = run_hadw(model_dir, Path(tmp) / f"hadw{r}{steps}", opts.batches, steps, choice.precision)
                theirs = run_trl(model_dir, Path(tmp) / f"trl{r}{steps}", opts.batches, steps, choice.precision)
                results[recipe].append((ours, theirs))
                print(
                    f"run {r} {recipe:10s}: s per rollout batch (wall/CPU)  hadw {ours[0]:.3f}/{ours[1]:.3f}  "
                    f"TRL {theirs[0]:.3f}/{theirs[1]:.3f}  speed-up {theirs[0] / ours[0]:.2f}x",
                    flush=True,
                )

    print(f"\ns per rollout batch, min / median / max over {opts.repeats} alternating runs of {opts.batches} batches")
    for recipe, pairs in results.items():
        print(f"{recipe} ({RECIPES[recipe]} optimiser step(s) per rollout batch):")
        print(f"  hadw train  wall {fmt(p[0][0] for p in pairs)}   CPU {fmt(p[0][1] for p in pairs)}")
        print(f"  TRL GRPO    wall {fmt(p[1][0] for p in pairs)}   CPU {fmt(p[1][1] for p in pairs)}")
        print(
            f"  speed-up hadw/TRL  by wall {fmt(p[1][0] / p[0][0] for p in pairs)}   "
            f"by CPU {fmt(p[1][1] / p[0][1] for p in pairs)}"
        )


if __name__ == "__main__":
    main()
