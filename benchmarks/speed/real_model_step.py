"""One real-model training step by phase, in float32 and in bf16 mixed precision, side by side.

The step of benchmarks/studies/real_model_study (SmolLM2-135M-Instruct, `sums` levels 1–2 as a chat question, the
`final_number` reward, 4 prompts × G = 8, 16 new tokens, 2 optimiser steps a step), timed by the trainer's own
phase metrics: generate (`timing_s/gen`), score (`timing_s/reward`), the π_old re-score (`timing_s/old_log_prob`),
the policy's forward, backward and optimiser (`timing_s/forward`, `/backward`, `/optimizer`).

Configurations (each a fresh Trainer from the same weights and seed, one torch thread, run in turn so that load
drifts hit all alike; the first step of each run is warm-up and not counted):

  fp32                  model.compute_dtype=float32 (the default)
  bf16                  model.compute_dtype=bfloat16: fp32 master weights, forward/backward under bf16 autocast, the
                        fused decoder's weights cast to bf16 once per generate call; π_old re-scored (the default
                        `rollout.recompute_logprobs=auto` in bf16)
  bf16, sampler π_old   the same, π_old taken from the sampler's log-probs (`rollout.recompute_logprobs=never`)

Each phase's roofline share is its FLOPs over (its seconds × the matmul peak of its precision, measured in the same
run: fp32 the faster of MKL's torch.mm and oneDNN's packed linear, bf16 torch.mm); the optimiser's is its bytes
(AdamW reads parameter, gradient and both moments and writes three of them, fp32) over the copy bandwidth.
The effect of the re-score on the ratio: `actor/ratio_min/max` and `actor/pg_clipfrac` of each configuration.

    python benchmarks/speed/real_model_step.py --model runs/smollm2-135m-instruct [--repeats 3] [--steps 4] \
        [--report FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from bench_report import add_report_option, report
from cpu_info import matmul_peaks, native_bf16, peak, read_cpu
from roofline import bandwidth, model_flops_per_token

import hadw
from hadw.train.config import load_config
from hadw.train.trainer import Trainer

STUDIES = Path(__file__).resolve().parents[1] / "studies"
RECIPE = STUDIES / "real_model_study" / "recipe.yaml"
CONFIGS = {
    "fp32": ["model.compute_dtype=float32"],
    "bf16": ["model.compute_dtype=bfloat16"],
    "bf16, sampler π_old": ["model.compute_dtype=bfloat16", "rollout.recompute_logprobs=never"],
}
# Report column -> metric, spelled out rather than read from hadw.metrics: the script also measures an older hadw
# (PYTHONPATH=OLD/src, the "before" of a change) whose trainer logs only timing_s/gen, /reward, /update and /step.
PHASES = {
    "generate": "timing_s/gen",
    "score": "timing_s/reward",
    "π_old re-score": "timing_s/old_log_prob",
    "forward": "timing_s/forward",
    "backward": "timing_s/backward",
    "optimiser": "timing_s/optimizer",
    "update": "timing_s/update",
    "step": "timing_s/step",
}
RATIO_KEYS = ("actor/ratio_min", "actor/ratio_max", "actor/pg_clipfrac")


class _ShapeRecorder:
    """Wraps Trainer.update to record each step's token counts (prompt columns per distinct prompt, responses)."""

    def __init__(self, trainer: Trainer):
        self.shapes: list[tuple[int, int, int]] = []  # (rows, prompt tokens of the distinct prompts, response tokens)
        inner = trainer.update

        def update(batch, advantages, step):
            groups = batch.prompt_mask[:: trainer.cfg.rollout.group_size]
            self.shapes.append((len(batch), int(groups.sum()), int(batch.response_mask.sum())))
            return inner(batch, advantages, step)

        trainer.update = update


def run(model: str, overrides: list[str], steps: int, out: Path) -> tuple[list[dict], list[tuple[int, int, int]]]:
    cfg = load_config(str(RECIPE), [
        f"model.path={model}", "train.num_threads=1", f"train.steps={steps}", "data.eval_size=0",
        "logging.progress=false", f"train.output_dir={out}", "train.seed=0", *overrides,
    ])  # fmt: skip
    trainer = Trainer(cfg)
    recorder = _ShapeRecorder(trainer)
    try:
        records = [trainer.train_step(step) for step in range(steps)]
    finally:
        trainer.logger.close()
        trainer._lock.release()
    return records[1:], recorder.shapes[1:]  # the first step is warm-up


def flops(model, shapes: list[tuple[int, int, int]]) -> dict[str, float]:
    """Mean FLOPs per step of each matmul phase (2 per weight per token, attention included)."""
    _, prompt_tokens, response_tokens = (statistics.mean(s[i] for s in shapes) for i in range(3))
    # generation: one prefill per distinct prompt, then one step per response token; the update's forward runs each
    # distinct prompt once (share_prompts) and every response token; backward is twice the forward's matmuls
    forward = (prompt_tokens + response_tokens) * model_flops_per_token(model, 24.0)
    return {"generate": forward, "π_old re-score": forward, "forward": forward, "backward": 2 * forward}


def chosen_configs(spec: str) -> list[str]:
    """--configs: 'auto' (the bf16 ones only where the CPU multiplies bf16 natively), 'all', or a comma list (a comma
    followed by a space is part of a name); fp32, the ratios' base, always runs."""
    if spec == "auto" and not native_bf16(read_cpu().flags):
        print("this CPU has no native bf16 (no AVX512-BF16 / AMX): fp32 only (bf16 would be emulated)")
        return ["fp32"]
    listed = list(CONFIGS) if spec in ("auto", "all") else re.split(r",(?! )", spec)
    names = ["fp32", *(name for name in listed if name != "fp32")]
    if unknown := [name for name in names if name not in CONFIGS]:
        raise SystemExit(f"--configs: unknown {', '.join(unknown)}; allowed: auto, all, {', '.join(CONFIGS)}")
    return names


def measure(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    print(f"hadw from {Path(hadw.__file__).parent}")
    peaks = {name: peak(matmul_peaks(1, 3, dtype)) for name, dtype in (("fp32", None), ("bf16", torch.bfloat16))}
    copy_gbs = bandwidth(3)[1]
    print(
        "matmul peak, 1 thread, median GFLOP/s by CPU time: "
        + "; ".join(f"{name} {p.gflops:.1f} ({p.library}, n={p.n})" for name, p in peaks.items())
        + f"; bf16 / fp32 ×{peaks['bf16'].gflops / peaks['fp32'].gflops:.2f}"
        + f"; copy {statistics.median(copy_gbs):.1f} GB/s"
    )
    peaks = {name: p.gflops for name, p in peaks.items()}

    configs = chosen_configs(args.configs)
    results: dict[str, list[dict]] = {name: [] for name in configs}
    shapes: list[tuple[int, int, int]] = []
    rounds: dict[str, list[float]] = {}  # configuration -> its median step time in each round
    for repeat in range(args.repeats):
        for name in configs:
            overrides = CONFIGS[name]
            start = time.perf_counter()
            folder = args.out / f"{repeat}-{list(CONFIGS).index(name)}"
            records, run_shapes = run(args.model, overrides, args.steps + 1, folder)
            results[name] += records
            rounds.setdefault(name, []).append(statistics.median(r[PHASES["step"]] for r in records))
            shapes += run_shapes
            print(f"  round {repeat + 1}, {name}: {len(records)} steps in {time.perf_counter() - start:.0f} s",
                  flush=True)  # fmt: skip

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(args.model)
    work = flops(model, shapes)
    n_params = model.num_parameters()
    adam_bytes = 7 * 4 * n_params
    print(f"\nper step (median over {args.repeats} runs × {args.steps} steps, seconds; roofline share in brackets):")
    header = ["configuration", *PHASES, "step ×"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    base = statistics.median(r[PHASES["step"]] for r in results["fp32"])
    for name, records in results.items():
        limit = peaks["bf16" if "bf16" in name else "fp32"]
        cells = [name]
        for column, key in PHASES.items():
            if key not in records[0]:  # an older hadw: no such phase metric
                cells.append("—")
                continue
            seconds = statistics.median(r[key] for r in records)
            share = ""
            if column in work and seconds > 0:
                share = f" ({100 * work[column] / seconds / 1e9 / limit:.0f} %)"
            elif column == "optimiser" and seconds > 0:
                share = f" ({100 * adam_bytes / seconds / 1e9 / statistics.median(copy_gbs):.0f} % of copy)"
            cells.append(f"{seconds:.2f}{share}")
        step = [r[PHASES["step"]] for r in records]
        cells.append(f"×{base / statistics.median(step):.2f}")
        print("| " + " | ".join(cells) + " |")
    print("\nstep time fp32 / configuration, per round (side by side; min / median / max over rounds):")
    for name, times in rounds.items():
        ratios = sorted(fp32 / t for fp32, t in zip(rounds["fp32"], times, strict=True))
        print(f"  {name:22s} ×{ratios[0]:.2f} / ×{statistics.median(ratios):.2f} / ×{ratios[-1]:.2f}")
    print("\nthe ratio π/π_old over the step's tokens (median over steps of each step's min / max / clip fraction):")
    for name, records in results.items():
        vals = [statistics.median(r[k] for r in records) for k in RATIO_KEYS]
        print(f"  {name:22s} ratio min {vals[0]:.4f}, max {vals[1]:.4f}, clip fraction {vals[2]:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="SmolLM2-135M-Instruct's folder (smollm2_from_gguf.py) or id")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration (alternating)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per run (after one warm-up step)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/hadw_real_model_step"), help="scratch run folders")
    parser.add_argument("--configs", default="auto", help="'auto' (bf16 ones only on a CPU with native bf16), "
                        f"'all', or a comma list of: {', '.join(CONFIGS)}")  # fmt: skip
    add_report_option(parser)
    args = parser.parse_args()
    sys.path.insert(0, str(STUDIES / "real_model_rl"))  # the recipe's reward, real_model_rl:final_number
    with report(args.report, parser, args):
        measure(args)


if __name__ == "__main__":
    main()
