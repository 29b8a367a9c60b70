"""Does HA-DW help on the built-in task? GRPO vs GRPO+HA-DW (window, per_level, fixed 0.5; or DAPO ± HA-DW) over seeds,
from one shared warm start, with intervals and seed-paired differences. Writes <out>/hadw_effect.md + .png.

Recipe: the demo's current one (hadw.experiments.demo.DemoSettings: its shipped warm start, or `--warm-start rebuild`
for SFT here, then `rl_overrides`: tiny Qwen2, `sums` levels 2–4, G = 8, 16 prompts/step, 200 steps), run through
`hadw.experiments.compare` (finished runs are reused, so a rerun after an interruption only trains what is missing; a
run dir made with another recipe is refused and left out).

Usage: python benchmarks/studies/hadw_effect/hadw_effect.py [--seeds 0-9] [--steps 200]
           [--arms grpo,hadw,hadw_per_level] [--jobs 2] [--set rollout.group_size=4 ...]
(arms: ARMS below; benchmarks/studies/sim_vs_trainer/sim_vs_trainer.md runs grpo, grpo_scale, hadw, hadw_norm and their
sgd_ twins)
Runs are ordered seed by seed (every arm of seed 0, then of seed 1, ...), so a study cut short stays paired.
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from hadw import metrics as M
from hadw.eval.report import compare_rows, jsonable, markdown_table
from hadw.experiments import compare as cmp
from hadw.experiments.demo import DEMO_LEVELS, DEMO_TASK, DemoSettings, rl_overrides, warm_start
from hadw.experiments.plots import plot_compare
from hadw.train import warm_starts

SGD = ("optim.name=sgd", "optim.lr=0.01", "optim.grad_clip=0")  # lr: a one-seed GRPO pilot (sim_vs_trainer.md)
ARMS = {
    "grpo": ("hadw.enabled=false",),
    "hadw": ("hadw.enabled=true",),
    # the theory's pivot: the bias of p̂ given S changes sign at p = 1/2 for every G (method.md §3.4)
    "hadw_fixed": ("hadw.enabled=true", "hadw.anchor=fixed", "hadw.fixed_value=0.5"),
    # each level weighed against its own history: an easy level is not damped just for being easier than the
    # batch (per_prompt would be the same as `hadw` here: a task stream never repeats a prompt uid)
    "hadw_per_level": ("hadw.enabled=true", "hadw.anchor=per_level"),
    "dapo": ("algorithm.preset=dapo", "hadw.enabled=false"),
    "dapo_hadw": ("algorithm.preset=dapo", "hadw.enabled=true"),
    # benchmarks/studies/sim_vs_trainer/sim_vs_trainer.md: GRPO with every advantage × 1.3 (HA-DW's λ as a step size
    # alone) and HA-DW with Φ normalised to mean 1 (re-weighting alone); each also under plain SGD, at a stable SGD lr
    # with the clip off (with clip 1.0 the tiny model's gradient norm of 2-3 is always clipped, and a clipped step is
    # scale-free)
    "grpo_scale": ("hadw.enabled=false", "algorithm.advantage_scale=1.3"),
    "hadw_norm": ("hadw.enabled=true", "hadw.normalize=batch"),
    # docs/sim.md's map: its most promising AdamW cell is mostly easy prompts with λ = 2 (run from a warm start with
    # --sft-target 0.8)
    "hadw_lam2": ("hadw.enabled=true", "hadw.lam=2.0"),
    **{
        f"sgd_{name}": (*overrides, *SGD)
        for name, overrides in {
            "grpo": ("hadw.enabled=false",),
            "grpo_scale": ("hadw.enabled=false", "algorithm.advantage_scale=1.3"),
            "hadw": ("hadw.enabled=true",),
            "hadw_norm": ("hadw.enabled=true", "hadw.normalize=batch"),
        }.items()
    },
}
SET_BY_COMPARE = ("train.seed=", "train.output_dir=", "hadw.enabled=", "train.num_threads=", "logging.progress=")
SET_HERE = ("logging.sample_every=",)


def base_overrides(model_dir: Path, steps: int, eval_size: int) -> list[str]:
    """The demo's RL recipe minus what differs per run (seed, output dir) or per arm (hadw.enabled)."""
    settings = DemoSettings(steps=steps, eval_size=eval_size)
    recipe = rl_overrides(settings, model_dir, Path("unused"), hadw=False)
    return [o for o in recipe if not o.startswith(SET_BY_COMPARE + SET_HERE)] + ["logging.sample_every=0"]


def with_sets(overrides: list[str], sets: list[str]) -> list[str]:
    """The recipe with each `--set KEY=VALUE` in place of the recipe's own KEY (appended when the recipe has none):
    one study on a variant of the recipe (e.g. another G) without a second recipe to keep in step. The keys that
    differ per run or per arm are refused: an override of those would silently unpair the study."""
    out = list(overrides)
    for item in sets:
        key, sep, _ = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set wants KEY=VALUE, got {item!r}")
        if (key + "=").startswith(SET_BY_COMPARE + SET_HERE):
            raise ValueError(f"--set {key}: set per run or per arm, not by the study")
        at = [i for i, o in enumerate(out) if o.partition("=")[0] == key]
        if at:
            out[at[0]] = item
        else:
            out.append(item)
    return out


def level_text(task: str, levels: list[int]) -> str:
    """One example question per level, e.g. "sums L2 = `47+8`", from the task's own generator."""
    from hadw.data import sample_problems

    return ", ".join(f"{task} L{lv} = `{sample_problems(task, 1, [lv], seed=1)[0].question}`" for lv in levels)


def count_parameters(model_dir: Path) -> int:
    from hadw.rollout import load_model

    model, _ = load_model(model_dir, device="cpu")
    return sum(p.numel() for p in model.parameters())


def eval_problems(seed: int, eval_size: int):
    """The held-out problems the trainer evaluates a run of this seed on."""
    from hadw.data import make_task
    from hadw.train.prompts import EVAL_SEED_OFFSET

    return list(make_task(DEMO_TASK, DEMO_LEVELS, seed=seed + EVAL_SEED_OFFSET, size=eval_size))


def evaluate_model(model_dir: Path, seed: int, eval_size: int, k: int, cache: Path) -> dict[str, float]:
    """Greedy, avg@k and pass@k at T = 1 on the seed's held-out problems: {"val/<bucket>/<metric>": value}."""
    settings = {"seed": seed, "eval_size": eval_size, "k": k, "model": str(model_dir)}
    if cache.is_file():
        stored = json.loads(cache.read_text(encoding="utf-8"))
        if stored["settings"] == settings:
            return stored["metrics"]
    from hadw.eval.data import EvalSource
    from hadw.eval.evaluate import evaluate_sources
    from hadw.rollout import load_model

    model, tokenizer = load_model(model_dir, device="cpu")
    source = EvalSource(f"task:{DEMO_TASK}", eval_problems(seed, eval_size), "plain", "exact", 6)
    result = evaluate_sources(
        model, tokenizer, [source], k=k, temperature=1.0, pass_ks=(k,), seed=seed, use_chat_template=False
    )
    metrics = {k: v for k, v in M.flatten_eval(result.buckets).items() if M.split_val_key(k)[1] != M.COUNT}
    cache.write_text(json.dumps({"settings": settings, "metrics": metrics}), encoding="utf-8")
    return metrics


def train_and_evaluate(spec: cmp.RunSpec, eval_size: int, k: int) -> dict:
    """The compare worker, then the evaluation of the run's final model (in the same process)."""
    result = cmp.execute_run(spec)
    if result["status"] != "failed":
        evaluate_model(spec.run_dir / "final_model", spec.seed, eval_size, k, spec.run_dir / "posthoc_eval.json")
    return result


def run_metrics(log: cmp.RunLog, eval_size: int, k: int) -> dict[str, float]:
    """A finished run's final numbers: the post-hoc evaluation plus the training accuracy of its last 10 steps."""
    metrics = evaluate_model(log.run_dir / "final_model", log.seed, eval_size, k, log.run_dir / "posthoc_eval.json")
    last = log.steps[-10:]
    for key, bucket in [
        (M.SCORE_MEAN, M.ALL),
        *((M.score_level(lv), f"{DEMO_TASK}/L{lv}") for lv in DEMO_LEVELS),
    ]:
        values = [r[key] for r in last if isinstance(r.get(key), int | float)]
        if values:
            metrics[M.val_key(bucket, "train_acc_last10")] = float(np.mean(values))
    return metrics


def section(title: str, result: cmp.CompareResult, metrics: list[tuple[str, str]]) -> str:
    """One markdown table per metric (rows: buckets), the repeated single-source row dropped."""
    parts = [f"## {title}\n"]
    for name, label in metrics:
        headers, rows = compare_rows(result, name)
        rows = [r for r in rows if r[0] != DEMO_TASK]
        if rows:
            parts.append(f"**{label}**\n\n" + markdown_table(headers, rows))
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-9", help="comma-separated, or a range a-b (inclusive)")
    demo = DemoSettings()
    parser.add_argument("--steps", type=int, default=demo.steps)
    parser.add_argument("--arms", default="grpo,hadw,hadw_per_level", help=f"comma-separated, from {list(ARMS)}")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--eval-size", type=int, default=500)
    parser.add_argument("--k", type=int, default=8, help="samples per evaluation problem at T = 1 (avg@k, pass@k)")
    parser.add_argument(
        "--warm-start",
        default=demo.warm_start,
        help="a shipped warm start (hadw.train.warm_starts; the same file on every machine), or 'rebuild': SFT one "
        "into --out here (its result depends on this CPU's kernels)",
    )
    parser.add_argument("--sft-target", type=float, default=demo.sft_target)
    parser.add_argument("--sft-max-steps", type=int, default=demo.sft_max_steps)
    parser.add_argument(
        "--sft-seconds", type=float, default=900.0, help="safety net only (the demo's 300 s is too short on busy cores)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="trainer override on top of the recipe, e.g. rollout.group_size=4 (repeat); a new --out per variant",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/hadw_effect"))
    parser.add_argument("--report", type=Path, default=None, help="default: <out>/hadw_effect.md")
    args = parser.parse_args()
    args.report = args.report or args.out / "hadw_effect.md"
    if "-" in args.seeds:
        lo, hi = args.seeds.split("-")
        seeds = list(range(int(lo), int(hi) + 1))
    else:
        seeds = [int(s) for s in args.seeds.split(",")]
    arms = [cmp.Arm(name, ARMS[name]) for name in args.arms.split(",")]
    start = time.perf_counter()

    if args.warm_start == "rebuild":
        print("rebuilding the warm start on this CPU: the result depends on its kernels (the shipped ones do not)")
        model_dir = warm_start(args.out, args.sft_seconds, args.sft_target, seed=0, max_steps=args.sft_max_steps)
    else:
        model_dir, _ = warm_starts.resolve(args.warm_start)
    overrides = with_sets(base_overrides(model_dir, args.steps, args.eval_size), args.set)
    specs = cmp.plan_runs(None, arms, seeds, args.out, overrides)
    order = {a.name: i for i, a in enumerate(arms)}
    specs.sort(key=lambda spec: (spec.seed, order[spec.arm]))  # seed-major: a partial study stays paired
    cmp.write_manifest(args.out, arms, seeds, None, overrides)
    print(f"{len(specs)} runs ({len(arms)} arms × {len(seeds)} seeds, {args.steps} steps), {args.jobs} at a time")
    t_runs = time.perf_counter()
    worker = functools.partial(train_and_evaluate, eval_size=args.eval_size, k=args.k)
    report = lambda r: print(f"  {r['arm']} seed {r['seed']}: {r['status']}", r["error"] or "", flush=True)
    results = cmp.run_all(specs, args.jobs, report, worker=worker)
    runs_s = time.perf_counter() - t_runs
    failed = [r for r in results if r["status"] == "failed"]
    counts = ", ".join(
        f"{sum(r['status'] == s for r in results)} {s}" for s in ("trained", "resumed", "reused", "failed")
    )

    import torch

    torch.set_num_threads(args.jobs)  # the workers are done; evaluations left to do here get the cores
    runs = cmp.collect_runs(args.out, [a.name for a in arms], seeds)
    for r in failed:  # e.g. a run dir made with another config: never report it as this one
        runs[r["arm"]].pop(r["seed"], None)
    for by_seed in runs.values():
        for log in by_seed.values():
            if log.final is not None:
                log.final = run_metrics(log, args.eval_size, args.k)
    warm_dir = args.out / "warm_eval"
    warm_dir.mkdir(exist_ok=True)
    warm = {s: cmp.RunLog("warm", s, warm_dir, None, []) for s in seeds}
    for s, log in warm.items():
        log.final = evaluate_model(model_dir, s, args.eval_size, args.k, warm_dir / f"seed{s}.json")

    k = args.k
    metrics = [
        (M.GREEDY, "greedy accuracy"),
        (M.avg_at(k), f"avg@{k}: mean accuracy of {k} samples at T = 1"),
        (M.pass_at(k), f"pass@{k} (unbiased estimator, T = 1)"),
        ("train_acc_last10", "training rollout accuracy, mean of the last 10 steps (T = 1)"),
    ]
    names = [m for m, _ in metrics]
    # One comparison per base algorithm: every HA-DW arm of it against it, paired by seed.
    families = {
        "grpo": ("grpo_scale", "hadw", "hadw_norm", "hadw_lam2", "hadw_per_level", "hadw_fixed"),
        "dapo": ("dapo_hadw",),
        "sgd_grpo": ("sgd_grpo_scale", "sgd_hadw", "sgd_hadw_norm"),
    }
    families = {base: [a for a in treated if a in runs] for base, treated in families.items()}
    pairs = [(base, treated) for base, treated in families.items() if base in runs and treated]
    sections, pngs = [], []
    for base, treated in pairs:
        group = {base: runs[base], **{t: runs[t] for t in treated}}
        result = cmp.aggregate(group, base, names)
        title = ", ".join(f"`{t}`" for t in treated)
        heading = f"{title} vs `{base}`: mean [95 % CI] (n seeds), paired difference, p"
        sections.append(section(heading, result, metrics))
        png = args.report.with_name(f"{args.report.stem}{'' if base == 'grpo' else '_' + base}.png")
        pngs.append(plot_compare(png, group, result, (M.SCORE_MEAN, M.ANCHOR), M.avg_at(k), smooth=5))
        (args.out / f"compare_{base}.json").write_text(json.dumps(jsonable(result.to_dict()), indent=1))
    rl_gain = cmp.aggregate({"warm": warm, **runs}, "warm", names[:3])
    sections.append(section("Every arm vs the warm start (did RL help at all?)", rl_gain, metrics[:3]))
    (args.out / "compare_vs_warm.json").write_text(json.dumps(jsonable(rl_gain.to_dict()), indent=1))

    n_params = count_parameters(model_dir)
    arm_text = ", ".join(f"`{a.name}`: `{' '.join(a.overrides)}`" for a in arms)
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    figures = "\n".join(f"![{p.stem}]({p.name})" for p in pngs)
    versus = " / ".join(f"{'/'.join(a)} vs {b}" for b, a in pairs)
    text = f"""# Does HA-DW help? {versus} over {len(seeds)} seeds (tiny model)

Command (from the repository root; {runs_s / 60:.1f} min for the runs and their evaluation,
{(time.perf_counter() - start) / 60:.1f} min in all, on 2 CPU cores shared with other work): `{command}`
(runs by status: {counts}).

Setup: one warm start (`{args.warm_start}`: tiny Qwen2, {n_params / 1e6:.2f} M parameters, SFT on `{DEMO_TASK}` levels
{DEMO_LEVELS} with `hadw.experiments.demo.warm_start`: until greedy accuracy {args.sft_target}), then
{args.steps} RL steps per run with the demo's recipe (`hadw.experiments.demo.rl_overrides`); every arm and seed starts
from that same checkpoint. A seed fixes the training prompts, the sampling streams and the {args.eval_size}
held-out evaluation problems; all arms of a seed see the same ones, so differences are paired by seed.
Each final model (and the warm start, on every seed's problems) is evaluated greedily and with {k} samples
at T = 1. Intervals: 95 % Student t over seeds; p: paired t-test. Levels: {level_text(DEMO_TASK, DEMO_LEVELS)}.

Overrides of every run: `{" ".join(overrides)}`; arms: {arm_text}.

{chr(10).join(sections)}
Per-seed values: `{args.out}/compare_*.json` (regenerated by the command).
{f"Failed runs: {[(r['arm'], r['seed']) for r in failed]}" if failed else ""}

{figures}

## Findings

"""
    # The findings are written by hand after reading the numbers; a rerun keeps them.
    old = args.report.read_text(encoding="utf-8") if args.report.is_file() else ""
    text += old.split("## Findings\n\n", 1)[1] if "## Findings\n\n" in old else "(to be written)\n"
    args.report.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
