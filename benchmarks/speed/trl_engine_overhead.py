"""What `hadw train engine=trl` costs over a bare TRL script doing the same work, and how it compares with the native
engine, side by side on one CPU.

Three sides, run in turn (bare, engine=trl, native, bare, ...) so machine load hits them alike, each a fresh process:
  - bare TRL: a plain `GRPOTrainer` script, the GRPOConfig hadw's table makes for the recipe (the same batch, lr, clip,
    steps), the same rendered prompts and start weights, and a plain exact-match reward function;
  - `hadw train ... engine=trl`: the same, through hadw's worker (its reward call with timeouts and error counting,
    hadw's estimator on TRL's total, the run-folder callback, metrics.jsonl);
  - `hadw train ...` (native).
Both TRL sides are timed by transformers' own `train_runtime` (wall time of the training loop, the final checkpoint
included), the native side by the sum of its steps' timing_s/step; and every side by the CPU time of its whole
command (start-up, imports and model load included; robust to other jobs on a shared machine). HA-DW off on all
three (the engine, not HA-DW, is measured:
benchmarks/trl_overhead.md measures HA-DW inside TRL). Reported: the ratio engine=trl / bare per round
(min / median / max; target ≤ 1.1) and native / bare.

    python benchmarks/speed/trl_engine_overhead.py [--rounds 3] [--steps 20] [--report FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the benchmarks' shared helpers (bench_report, cpu_info)

from bench_report import add_report_option, report  # noqa: E402
from trl_cpu import add_precision_option, best_precision, hadw_overrides  # noqa: E402

RECIPE = HERE.parent / "studies" / "tiny_testbed" / "recipe.yaml"
# offline, and one thread a side for every pool (torch's intra-op threads, OpenMP, MKL): no side uses the other core
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
       "MKL_NUM_THREADS": "1"}  # fmt: skip
RUNTIME = re.compile(r"'train_runtime': '?([0-9.]+)")


PRECISION: list[str] = []  # the raced precision's hadw override (trl_cpu.hadw_overrides): TRL's bf16 follows it


def _overrides(steps: int, out: Path) -> list[str]:
    return [f"train.steps={steps}", "data.eval_size=0", "checkpoint.every=0", "logging.sample_every=0",
            "logging.progress=off", *PRECISION, f"train.output_dir={out}"]  # fmt: skip


def bare(steps: int, out: Path) -> float:
    """The bare TRL side, in this process: returns train_runtime (seconds)."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from hadw.data import render_prompt
    from hadw.rollout import load_model
    from hadw.train.config import load_config
    from hadw.train.engines.trl_args import grpo_kwargs
    from hadw.train.engines.trl_worker import start_model
    from hadw.train.prompts import PromptSource

    torch.set_num_threads(1)
    cfg = load_config(RECIPE, _overrides(steps, out))
    source = PromptSource(cfg.data, cfg.train.seed)
    problems = [p for s in range(steps) for p in source.batch(s, cfg.train.prompts_per_step)]
    model, tokenizer = load_model(start_model(cfg), "float32", "cpu")
    prompts = [render_prompt(p, "plain", tokenizer, False) for p in problems]
    data = Dataset.from_dict({"prompt": prompts, "answer": [p.answer for p in problems]})

    def exact(completions, answer, **kwargs) -> list[float]:
        return [float(c.strip() == str(a)) for c, a in zip(completions, answer, strict=True)]

    kwargs = {k: v for k, v in grpo_kwargs(cfg, out).items() if not k.startswith("hadw_")}
    args = GRPOConfig(**(kwargs | {"use_cpu": True}))  # as the worker sets it on a machine without a GPU
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[exact], args=args, train_dataset=data)
    return float(trainer.train().metrics["train_runtime"])


def _cpu_of(run, *args) -> tuple[float, float]:
    """(what `run(*args)` returns, the CPU seconds of the processes it started and waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    value = run(*args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return value, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _hadw(steps: int, out: Path, engine: str) -> float:
    env = os.environ | ENV
    hadw = str(Path(sys.executable).parent / "hadw")
    command = [hadw, "train", str(RECIPE), f"engine={engine}", *_overrides(steps, out)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    if engine == "trl":
        return float(RUNTIME.findall(done.stdout + done.stderr)[-1])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return sum(r["timing_s/step"] for r in rows)


def _bare_in_a_process(steps: int, out: Path) -> float:
    env = os.environ | ENV
    command = [sys.executable, __file__, "--child", str(out), "--steps", str(steps), *(["--bf16"] if PRECISION else [])]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def _spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def measure(args: argparse.Namespace) -> None:
    import torch
    import transformers
    import trl

    from hadw.train.config import load_config
    from hadw.train.engines.trl_worker import start_model

    print(f"versions: torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}")
    choice = best_precision(args.precision, Path(start_model(load_config(RECIPE))))
    PRECISION[:] = hadw_overrides(choice.precision)
    print(f"precision: {choice.precision} ({choice.reason}); every side in it")
    print(f"recipe: {RECIPE.relative_to(HERE.parent.parent)} with {_overrides(args.steps, Path('OUT'))[:-1]}; "
          "HA-DW off; 1 torch thread a side; one process each (engine=trl: trl.num_processes=1)")  # fmt: skip
    times: dict[str, list[float]] = {"bare": [], "trl": [], "native": []}
    cpu: dict[str, list[float]] = {side: [] for side in times}
    with tempfile.TemporaryDirectory(prefix="hadw-trl-overhead-") as tmp:
        for r in range(args.rounds):
            for side in times:
                out = Path(tmp) / f"{side}-{r}"
                run = (_bare_in_a_process, args.steps, out) if side == "bare" else (_hadw, args.steps, out, side)
                seconds, cpu_s = _cpu_of(*run)
                times[side].append(seconds)
                cpu[side].append(cpu_s)
            t, c = ({side: v[-1] for side, v in d.items()} for d in (times, cpu))
            print(
                f"round {r}: train loop s  bare TRL {t['bare']:.2f}  engine=trl {t['trl']:.2f}  native "
                f"{t['native']:.2f} | whole command CPU s  {c['bare']:.1f}  {c['trl']:.1f}  {c['native']:.1f}"
            )
    print(f"\nmin / median / max over {args.rounds} rounds of {args.steps} rollout batches:")
    for side in times:
        print(f"  {side:<7} train loop s  {_spread(times[side])}   whole command CPU s  {_spread(cpu[side])}")
    for name, values in (("train loop (wall)", times), ("whole command (CPU)", cpu)):
        ratio = [a / b for a, b in zip(values["trl"], values["bare"], strict=True)]
        native = [a / b for a, b in zip(values["native"], values["bare"], strict=True)]
        print(f"  {name}: engine=trl / bare TRL x{_spread(ratio)} (target <= 1.1); native / bare x{_spread(native)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="rollout batches a run (4 optimiser steps each)")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)  # the child's precision
    add_precision_option(parser)
    add_report_option(parser)
    args = parser.parse_args()
    if args.child is not None:
        PRECISION[:] = hadw_overrides("bf16" if args.bf16 else "fp32")
        print(bare(args.steps, args.child))
        return
    with report(args.report, parser, args):
        measure(args)


if __name__ == "__main__":
    main()
