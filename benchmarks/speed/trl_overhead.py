"""Per-step overhead of HADWGRPOTrainer over plain GRPOTrainer, side by side on one tiny CPU run.

Both trainers run the same tiny Qwen2 model, data, rewards and seed; runs alternate (plain, HA-DW,
plain, ...) so machine load hits both alike. Both run with TRL set up for this CPU (trl_cpu.py, printed):
gradient_checkpointing=False, and the faster of fp32 and bf16 autocast, measured on this model
(`--precision auto`; on a model this small autocast's casts outweigh bf16's faster matmuls, so fp32): a
slower step would shrink the overhead ratio. Reported:
  - end-to-end: median over repeats of (per-step time with HA-DW) / (per-step time, plain), in process
    CPU time of `train()` (robust to other jobs on a shared box) and in wall time   [target ≤ 1.05]
  - direct: time inside the adapter's own work (_hadw_rescale: gather, Φ, anchor, logs) / step time

    .venv/bin/python benchmarks/speed/trl_overhead.py [--repeats 5] [--steps 4] [--batch 16] [--completion 16]
        [--precision auto|fp32|bf16] [--report FILE]
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
import trl
from bench_report import add_report_option, report
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
from trl_cpu import QUIET, add_precision_option, best_precision, cpu_best, describe, silence

from hadw.integrations.trl import HADWGRPOConfig, HADWGRPOTrainer
from hadw.rollout.models import build_tiny_model


def correct(prompts, completions, **kwargs) -> list[float]:
    return [float((ord(c[0]) + ord(p[1])) % 2) if c else 0.0 for p, c in zip(prompts, completions, strict=True)]


def brevity(completions, **kwargs) -> list[float]:
    return [-0.05 * len(c) for c in completions]


class TimedHADW(HADWGRPOTrainer):
    """Accumulates the wall time of the adapter's own work."""

    adapter_seconds = 0.0

    def _hadw_rescale(self, *args, **kwargs):
        start = time.perf_counter()
        out = super()._hadw_rescale(*args, **kwargs)
        self.adapter_seconds += time.perf_counter() - start
        return out


def run(trainer_cls, config_cls, model_dir: Path, out: Path, steps: int, batch: int, completion: int, precision: str):
    args = config_cls(
        output_dir=str(out),
        per_device_train_batch_size=batch,
        num_generations=4,
        max_completion_length=completion,
        max_steps=steps,
        logging_steps=1,
        **cpu_best(precision),  # not TRL's GPU defaults (trl_cpu.py)
        **QUIET,
    )
    prompts = Dataset.from_dict({"prompt": [f"q{chr(97 + i % 26)}{i}:" for i in range(4 * batch * steps)]})
    trainer = silence(
        trainer_cls(model=str(model_dir), reward_funcs=[correct, brevity], args=args, train_dataset=prompts)
    )
    cpu, wall = time.process_time(), time.perf_counter()
    trainer.train()
    cpu, wall = (time.process_time() - cpu) / steps, (time.perf_counter() - wall) / steps
    if not hasattr(run, "printed"):
        run.printed = True
        print(f"TRL {trl.__version__}, torch {torch.__version__}: {describe(trainer)}")
    return cpu, wall, getattr(trainer, "adapter_seconds", 0.0) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16, help="completions per step (groups of 4)")
    parser.add_argument("--completion", type=int, default=16, help="max_completion_length")
    parser.add_argument("--threads", type=int, default=1)
    add_precision_option(parser)
    add_report_option(parser)
    opts = parser.parse_args()
    with report(opts.report, parser, opts):
        measure(opts)


def measure(opts: argparse.Namespace) -> None:
    torch.set_num_threads(opts.threads)

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "model", hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1)
        choice = best_precision(opts.precision, model_dir, opts.threads)
        print(choice.line())
        shape = (opts.steps, opts.batch, opts.completion, choice.precision)
        run(GRPOTrainer, GRPOConfig, model_dir, Path(tmp) / "warm", *shape)  # warm-up: first-run costs
        rows = []  # (plain cpu, plain wall, hadw cpu, hadw wall, adapter)
        for r in range(opts.repeats):
            plain_cpu, plain_wall, _ = run(GRPOTrainer, GRPOConfig, model_dir, Path(tmp) / f"p{r}", *shape)
            hadw_cpu, hadw_wall, adapter = run(TimedHADW, HADWGRPOConfig, model_dir, Path(tmp) / f"h{r}", *shape)
            rows.append((plain_cpu, plain_wall, hadw_cpu, hadw_wall, adapter))
            print(
                f"repeat {r}: CPU ms/step plain {plain_cpu * 1e3:6.1f} HA-DW {hadw_cpu * 1e3:6.1f} "
                f"ratio {hadw_cpu / plain_cpu:.3f} | wall ratio {hadw_wall / plain_wall:.3f}"
            )

    med = lambda xs: statistics.median(xs)
    spread = lambda xs: f"{min(xs):7.2f} / {med(xs):7.2f} / {max(xs):7.2f}"
    cpu_ratios = [h / p for p, _, h, _, _ in rows]
    wall_ratios = [h / p for _, p, _, h, _ in rows]
    print(
        f"\nsetup: {opts.batch} completions/step (G=4), max_completion_length {opts.completion}, "
        f"{opts.steps} steps x {opts.repeats} alternating repeats, {opts.threads} thread(s); min / median / max"
    )
    for name, cpu_i, wall_i in (("plain GRPOTrainer", 0, 1), ("HADWGRPOTrainer", 2, 3)):
        cpu_ms, wall_ms = [r[cpu_i] * 1e3 for r in rows], [r[wall_i] * 1e3 for r in rows]
        print(f"{name:18s}  ms/step CPU {spread(cpu_ms)}   wall {spread(wall_ms)}")
    print(f"ratio (CPU time)    {min(cpu_ratios):.3f} / {med(cpu_ratios):.3f} / {max(cpu_ratios):.3f}  target <= 1.05")
    print(f"ratio (wall time)   {min(wall_ratios):.3f} / {med(wall_ratios):.3f} / {max(wall_ratios):.3f}")
    adapter = med([r[4] for r in rows])
    share = adapter / med([r[3] for r in rows])
    print(f"adapter's own work  {adapter * 1e3:.3f} ms/step (wall) = {share:.4f} of a step")


if __name__ == "__main__":
    main()
