"""Does HA-DW help on the built-in task? GRPO vs GRPO+HA-DW (optionally DAPO ± HA-DW) over several seeds,
from one shared warm start, with intervals and seed-paired differences. Writes benchmarks/hadw_effect.md + .png.

Recipe: the demo's (hadw.train.demo: `warm_start` SFT, then `rl_overrides`: tiny Qwen2, addition levels
1–3, G = 8, 16 prompts/step, lr 2e-4), run through `hadw.eval.compare` (finished runs are reused, so a
rerun after an interruption only trains what is missing).

Usage: python benchmarks/hadw_effect.py [--seeds 0,1,2,3,4] [--steps 60] [--arms grpo,hadw] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from hadw.eval import compare as cmp
from hadw.eval.plots import plot_compare
from hadw.eval.report import compare_rows, markdown_table
from hadw.train.demo import DEMO_LEVELS, DEMO_TASK, DemoSettings, rl_overrides, warm_start

ARMS = {
    "grpo": ("hadw.enabled=false",),
    "hadw": ("hadw.enabled=true",),
    "dapo": ("algorithm.preset=dapo", "hadw.enabled=false"),
    "dapo_hadw": ("algorithm.preset=dapo", "hadw.enabled=true"),
}
SET_BY_COMPARE = ("train.seed=", "train.output_dir=", "hadw.enabled=", "train.num_threads=", "logging.progress=")
SET_HERE = ("logging.sample_every=",)


def base_overrides(model_dir: Path, steps: int, eval_size: int) -> list[str]:
    """The demo's RL recipe minus what differs per run (seed, output dir) or per arm (hadw.enabled)."""
    settings = DemoSettings(steps=steps, eval_size=eval_size)
    recipe = rl_overrides(settings, model_dir, Path("unused"), hadw=False)
    return [o for o in recipe if not o.startswith(SET_BY_COMPARE + SET_HERE)] + ["logging.sample_every=0"]


def warm_start_eval(model_dir: Path, seeds: list[int], eval_size: int) -> dict[str, float]:
    """Greedy accuracy of the warm start on each seed's evaluation problems, averaged over seeds, per bucket."""
    from hadw.data import make_task
    from hadw.eval.evaluate import evaluate
    from hadw.rollout import load_model
    from hadw.train.prompts import EVAL_SEED_OFFSET

    model, tokenizer = load_model(model_dir, device="cpu")
    rows: dict[str, list[float]] = {}
    for seed in seeds:
        problems = list(make_task(DEMO_TASK, DEMO_LEVELS, seed=seed + EVAL_SEED_OFFSET, size=eval_size))
        summary = evaluate(model, tokenizer, problems, "plain", "exact", max_new_tokens=6, use_chat_template=False)
        for bucket, row in summary.summary.items():
            rows.setdefault(bucket, []).append(row["avg@k"])
    return {bucket: float(np.mean(v)) for bucket, v in rows.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--arms", default="grpo,hadw", help=f"comma-separated, from {list(ARMS)}")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--eval-size", type=int, default=500)
    parser.add_argument("--sft-seconds", type=float, default=330.0)
    parser.add_argument("--sft-target", type=float, default=0.45)
    parser.add_argument("--out", type=Path, default=Path("runs/hadw_effect"))
    parser.add_argument("--report", type=Path, default=Path("benchmarks/hadw_effect.md"))
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = [cmp.Arm(name, ARMS[name]) for name in args.arms.split(",")]
    start = time.perf_counter()

    model_dir = warm_start(args.out, args.sft_seconds, args.sft_target, seed=0)
    warm = warm_start_eval(model_dir, seeds, args.eval_size)
    overrides = base_overrides(model_dir, args.steps, args.eval_size)
    specs = cmp.plan_runs(None, arms, seeds, args.out, overrides)
    cmp.write_manifest(args.out, arms, seeds, None, overrides)
    print(f"{len(specs)} runs ({len(arms)} arms × {len(seeds)} seeds, {args.steps} steps), {args.jobs} at a time")
    t_runs = time.perf_counter()
    results = cmp.run_all(
        specs, args.jobs, lambda r: print(f"  {r['arm']} seed {r['seed']}: {r['status']}", r["error"] or "", flush=True)
    )
    runs_s = time.perf_counter() - t_runs
    failed = [r for r in results if r["status"] == "failed"]

    runs = cmp.collect_runs(args.out, [a.name for a in arms], seeds)
    result = cmp.aggregate(runs, baseline=arms[0].name)
    png = plot_compare(args.report.with_suffix(".png"), runs, result, ("reward/accuracy", "hadw/anchor"), smooth=5)
    headers, rows = compare_rows(result)
    rows = [r for r in rows if r[0] != DEMO_TASK]  # one source: its row repeats "all"
    warm_rows = [[b, f"{warm[b]:.3f}"] for b in ["all", *sorted(k for k in warm if "/L" in k)]]
    arm_text = ", ".join(f"`{a.name}`: `{' '.join(a.overrides)}`" for a in arms)
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    text = f"""# Does HA-DW help? GRPO vs GRPO+HA-DW over {len(seeds)} seeds (built-in task, tiny model)

Command (from the repository root; {runs_s / 60:.1f} min for the runs, {(time.perf_counter() - start) / 60:.1f} min in
all on 2 shared CPU cores): `{command}`

Setup: one warm start (tiny Qwen2 ~0.8 M parameters, SFT on `{DEMO_TASK}` levels {DEMO_LEVELS}; `hadw.train.demo`),
then {args.steps} RL steps per run with the demo's recipe; every arm and seed starts from that same checkpoint.
Seeds change the training prompts, the sampling streams and the {args.eval_size} held-out evaluation problems;
both arms of a seed see the same ones, so differences are paired by seed. Final metric: greedy accuracy
(`avg@k` with k = 1) on the held-out problems, per difficulty level. Intervals: 95 % Student t over seeds.

Overrides of every run: `{" ".join(overrides)}`; arms: {arm_text}.

## Warm start (greedy accuracy, mean over the seeds' evaluation sets)

{markdown_table(["bucket", "accuracy"], warm_rows)}
## Final greedy accuracy after RL: mean [95 % CI] (n seeds), and the paired difference to `{arms[0].name}`

{markdown_table(headers, rows)}
Per-seed values (all buckets): see `{args.out}/compare.json` (regenerated by the command).
{f"Failed runs: {[(r['arm'], r['seed']) for r in failed]}" if failed else ""}

![learning curves and final accuracy]({png.name})

## Findings

"""
    # The findings are written by hand after reading the numbers; a rerun keeps them.
    old = args.report.read_text(encoding="utf-8") if args.report.is_file() else ""
    text += old.split("## Findings\n\n", 1)[1] if "## Findings\n\n" in old else "(to be written)\n"
    args.report.write_text(text, encoding="utf-8")
    (args.out / "compare.json").write_text(json.dumps(result.to_dict(), indent=1), encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
