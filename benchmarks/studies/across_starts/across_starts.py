"""Does HA-DW's effect depend on the warm start? HA-DW − GRPO at G = 8 and G = 4 over shipped warm starts.

The study pre-registered in across_starts.md (this folder): for each shipped warm start (hadw.train.warm_starts) and
each group size, `grpo` and `hadw` (benchmarks/studies/hadw_effect/hadw_effect.py's arms and recipe: the demo's) over
the same seeds, paired by seed within a start. Primary metric: avg@4 over all levels on each seed's 300 held-out
problems.

Usage: python benchmarks/studies/across_starts/across_starts.py run [--starts sums234-s0,sums234-s2,sums234-s7]
           [--seeds 0-6] [--groups 8,4] [--jobs 2] [--out runs/across_starts]
       python benchmarks/studies/across_starts/across_starts.py rebuild   # the tables from across_starts.raw.json alone
`run` trains what is missing (finished runs are reused), evaluates, writes the raw per-run results
(across_starts.raw.json, this folder) and rebuilds the tables.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: the shared helpers
import numpy as np
import raw_tables
from scipy import stats

RAW = Path(__file__).with_suffix(".raw.json")
REPORT = Path(__file__).with_suffix(".md")
ARMS = ("grpo", "hadw")
PRIMARY = "val/all/avg@4"
LEVEL_KEYS = {"L2": "val/sums/L2/avg@4", "L3": "val/sums/L3/avg@4", "L4": "val/sums/L4/avg@4"}


def run(args: argparse.Namespace) -> None:
    """Train and evaluate every (start, G, arm, seed) that is missing; write the raw file and the tables."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hadw_effect"))  # its recipe, arms and evaluation
    import hadw_effect as H

    from hadw.cli_lists import parse_ints
    from hadw.experiments import compare as cmp
    from hadw.train import warm_starts as W

    starts, seeds = args.starts.split(","), parse_ints(args.seeds, "--seeds")
    groups = parse_ints(args.groups, "--groups")
    arms = [cmp.Arm(name, H.ARMS[name]) for name in ARMS]
    cells, specs = {}, []
    for start in starts:
        folder, _ = W.resolve(start)
        for g in groups:
            out = args.out / f"{start}_G{g}"
            overrides = H.with_sets(H.base_overrides(folder, args.steps, args.eval_size), [f"rollout.group_size={g}"])
            cells[(start, g)] = (out, folder)
            specs += cmp.plan_runs(None, arms, seeds, out, overrides)
            cmp.write_manifest(out, arms, seeds, None, overrides)
    place = {(s, g): i for i, (s, g) in enumerate(cells)}
    # seed-major: a study cut short stays paired and balanced over starts and G
    specs.sort(key=lambda sp: (sp.seed, place[_cell(sp.run_dir, args.out)], ARMS.index(sp.arm)))
    print(f"{len(specs)} runs ({len(starts)} starts × {len(groups)} G × {len(arms)} arms × {len(seeds)} seeds)")
    worker = functools.partial(H.train_and_evaluate, eval_size=args.eval_size, k=args.k)
    t0 = time.perf_counter()
    report = lambda r: print(f"  {r['arm']} seed {r['seed']}: {r['status']} {r['error'] or ''}", flush=True)
    results = cmp.run_all(specs, args.jobs, report, worker=worker)
    failed = {(r["arm"], r["seed"]) for r in results if r["status"] == "failed"}
    print(f"runs done in {(time.perf_counter() - t0) / 60:.1f} min; failed: {sorted(failed) or 'none'}")

    rows = []
    for (start, g), (out, folder) in cells.items():
        for arm, by_seed in cmp.collect_runs(out, list(ARMS), seeds).items():
            for seed, log in sorted(by_seed.items()):
                if log.final is None:
                    continue
                metrics = H.run_metrics(log, args.eval_size, args.k)
                # path-free (compare.config_hash): one recipe run on two machines hashes alike
                rows.append(_row(start, g, arm, seed, metrics, log.config_hash))
        if g == groups[0]:  # the warm start itself, on every seed's problems (the same for every G)
            warm_dir = args.out / f"{start}_warm_eval"
            warm_dir.mkdir(parents=True, exist_ok=True)
            for seed in seeds:
                metrics = H.evaluate_model(folder, seed, args.eval_size, args.k, warm_dir / f"seed{seed}.json")
                rows.append(_row(start, None, "warm", seed, metrics, None))
    command = "python " + " ".join(sys.argv)
    raw_tables.write_raw(RAW, [REPORT], Path(__file__), command, rows)  # README: ../verdicts.py


def _cell(run_dir: Path, out: Path) -> tuple[str, int]:
    start, _, g = run_dir.relative_to(out).parts[0].rpartition("_G")
    return start, int(g)


def _row(start: str, g: int | None, arm: str, seed: int, metrics: dict, config_hash: str | None) -> dict:
    """One raw row. config_hash: hadw.experiments.compare.config_hash (path-free); rows written before issue 40 have
    config_sha256 instead, the sha256 of config.yaml's bytes with this machine's absolute paths in it."""
    keep = {k: round(float(v), 6) for k, v in sorted(metrics.items()) if "/avg@" in k or "/greedy" in k}
    return {"start": start, "group_size": g, "arm": arm, "seed": seed, "config_hash": config_hash, "metrics": keep}


# ------------------------------------------------------------------------------------------ analysis (raw -> tables)


def paired(rows: list[dict], start: str, g: int, key: str) -> dict[int, float]:
    """seed -> hadw − grpo of `key` for one start and G (seeds where both finished)."""
    by = {(r["arm"], r["seed"]): r["metrics"][key] for r in rows if r["start"] == start and r["group_size"] == g}
    return {s: by[("hadw", s)] - by[("grpo", s)] for a, s in by if a == "grpo" and ("hadw", s) in by}


def arm_mean(rows: list[dict], start: str, g: int, arm: str, seeds: set[int]) -> float:
    """Mean primary metric of one arm over `seeds` (those paired with the other arm)."""
    values = [r["metrics"][PRIMARY] for r in rows if (r["start"], r["group_size"], r["arm"]) == (start, g, arm)]
    seeds_of = [r["seed"] for r in rows if (r["start"], r["group_size"], r["arm"]) == (start, g, arm)]
    return float(np.mean([v for v, s in zip(values, seeds_of, strict=True) if s in seeds]))


def pooled(diffs: dict[str, dict[int, float]]) -> dict:
    """Start as a fixed factor: the mean of the per-start means, its 95 % t interval from the within-start
    (pooled) variance, and the one-way ANOVA F-test of "the effect is the same on every start"."""
    groups = [np.array(list(d.values())) for d in diffs.values() if len(d) > 1]
    n_total, k = sum(len(x) for x in groups), len(groups)
    means = np.array([x.mean() for x in groups])
    ss_within = sum(((x - x.mean()) ** 2).sum() for x in groups)
    df = n_total - k
    mse = ss_within / df
    weights = np.array([1 / len(x) for x in groups])
    se = float(np.sqrt(mse * weights.sum()) / k)  # SE of the unweighted mean of start means
    mean = float(means.mean())
    half = float(stats.t.ppf(0.975, df) * se)
    f = stats.f_oneway(*groups) if k > 1 else None
    from hadw.experiments.stats import minimal_detectable_effect

    return {
        "mean": mean,
        "low": mean - half,
        "high": mean + half,
        "n": n_total,
        "sd_within": float(np.sqrt(mse)),
        "p": float(2 * stats.t.sf(abs(mean) / se, df)) if se > 0 else float("nan"),
        "anova_p": float(f.pvalue) if f is not None else float("nan"),
        "mde": minimal_detectable_effect(n_total, float(np.sqrt(mse))),
    }


def tables(raw: dict) -> dict[str, str]:
    """Every table of across_starts.md, by block name, from the raw per-run results alone."""
    from hadw.experiments.stats import paired_difference

    rows = raw["runs"]
    starts = sorted({r["start"] for r in rows})
    groups = sorted({r["group_size"] for r in rows if r["group_size"] is not None}, reverse=True)
    out = {}
    lines = ["| G | warm start | n | GRPO | HA-DW | HA-DW − GRPO [95 %] | p | MDE (80 %) |", "|---" * 8 + "|"]
    for g in groups:
        diffs = {s: paired(rows, s, g, PRIMARY) for s in starts}
        for s in starts:
            d = diffs[s]
            if not d:
                continue
            pd = paired_difference(d, dict.fromkeys(d, 0.0))
            i = pd.diff
            grpo, hadw = (arm_mean(rows, s, g, arm, set(d)) for arm in ARMS)
            lines.append(
                f"| {g} | {s} | {i.n} | {grpo:.3f} | {hadw:.3f} | "
                f"{i.mean:+.4f} [{i.low:+.4f}, {i.high:+.4f}] | {pd.p_value:.3f} | {pd.mde:.4f} |"
            )
        if sum(len(d) > 1 for d in diffs.values()) > 1:
            p = pooled(diffs)
            lines.append(
                f"| {g} | **pooled** (start fixed; same on every start? ANOVA p = {p['anova_p']:.3f}) | {p['n']} | | | "
                f"**{p['mean']:+.4f} [{p['low']:+.4f}, {p['high']:+.4f}]** | {p['p']:.4f} | {p['mde']:.4f} |"
            )
    out["primary"] = "\n".join(lines)

    lines = ["| G | warm start | n | " + " | ".join(f"{lv} HA-DW − GRPO" for lv in LEVEL_KEYS) + " |"]
    lines.append("|---|---|---|" + "---|" * len(LEVEL_KEYS))
    for g in groups:
        for s in starts:
            cells = []
            for key in LEVEL_KEYS.values():
                d = paired(rows, s, g, key)
                if len(d) < 2:
                    cells = []
                    break
                i = paired_difference(d, dict.fromkeys(d, 0.0)).diff
                cells.append(f"{i.mean:+.3f} [{i.low:+.3f}, {i.high:+.3f}]")
            if cells:
                lines.append(f"| {g} | {s} | {len(d)} | " + " | ".join(cells) + " |")
    out["levels"] = "\n".join(lines)

    per_level = " | ".join(f"{lv} avg@4" for lv in LEVEL_KEYS)
    lines = [f"| warm start | n seeds | {per_level} | all avg@4 | all greedy |"]
    lines.append("|---|---|" + "---|" * (len(LEVEL_KEYS) + 2))
    for s in starts:
        warm = [r["metrics"] for r in rows if r["start"] == s and r["arm"] == "warm"]
        if warm:
            level = " | ".join(f"{np.mean([m[k] for m in warm]):.3f}" for k in LEVEL_KEYS.values())
            all_avg, all_greedy = np.mean([m[PRIMARY] for m in warm]), np.mean([m["val/all/greedy"] for m in warm])
            lines.append(f"| {s} | {len(warm)} | {level} | {all_avg:.3f} | {all_greedy:.3f} |")
    out["warm"] = "\n".join(lines)
    return out


def main() -> None:
    raw_tables.command_line(__doc__, RAW, tables, run, _options)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--starts", default="sums234-s0,sums234-s2,sums234-s7", help="shipped warm starts")
    parser.add_argument("--seeds", default="0-6")
    parser.add_argument("--groups", default="8,4")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-size", type=int, default=300)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/across_starts"))


if __name__ == "__main__":
    main()
