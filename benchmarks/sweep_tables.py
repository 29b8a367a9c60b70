"""A finished `hadw compare` sweep kept as a committed raw file, and its paired table rebuilt from that file alone.

`hadw compare` leaves each run's held-out results in its folder (final_eval.json, final_eval_problems.jsonl); the
folder also holds models and checkpoints, far too big to commit. `pack` keeps what a table needs, per run: the
arm, the seed, the per-level greedy accuracies and every held-out problem's greedy score (a 0/1 string in the
problems' order, with the levels once per seed), and checks that the two arms of a seed scored the same problems.
`tables` rebuilds, from the raw file alone, the primary paired difference (mean and 95 % Student-t interval over
seeds, MDE at 80 % power, Wilcoxon p as the pre-registered secondary) and the variance split (evaluation sampling
vs training, from the per-problem scores; hadw.experiments.stats, the same code `hadw compare` reports with).

    python benchmarks/sweep_tables.py pack --out runs/bf16_tiny --baseline fp32 --treatment bf16 \
        --raw benchmarks/studies/bf16_equivalence/bf16_equivalence_tiny.raw.json \
        --table benchmarks/studies/bf16_equivalence/bf16_equivalence.md \
        --testbed "tiny" --margin 0.02
    python benchmarks/sweep_tables.py rebuild --raw benchmarks/studies/bf16_equivalence/bf16_equivalence_tiny.raw.json

Several treatments against one baseline (`--treatment hadw,control`) make one row each; `--predicted control=-0.01`
records a positive control's pre-registered size, and its verdict says whether the interval holds it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from raw_tables import environment, rebuild

from hadw import metrics as M
from hadw.experiments.stats import eval_sampling_variance, paired_difference, variance_split

HERE = Path(__file__).resolve().parent


def _run_record(run_dir: Path, arm: str, seed: int) -> tuple[dict, list[int], list[int]]:
    """(the run's row, its problems' levels, their uids' order) from its folder."""
    final = json.loads((run_dir / M.FINAL_EVAL_FILE).read_text(encoding="utf-8"))
    rows = M.read_eval_problems(run_dir)
    if any(len(r["scores"]) != 1 or r["scores"][0] not in (0, 1) for r in rows):
        raise SystemExit(f"{run_dir}: expected one greedy 0/1 score per problem")
    greedy = {bucket: values[M.GREEDY] for bucket, values in final.items() if M.GREEDY in values}
    row = {"arm": arm, "seed": seed, "greedy": greedy, "scores": "".join(str(int(r["scores"][0])) for r in rows)}
    return row, [r["level"] for r in rows], [r["uid"] for r in rows]


def pack(args: argparse.Namespace) -> None:
    runs, levels = [], {}
    arms = args.treatment.split(",")
    predicted = {}
    for item in args.predicted:
        arm, _, size = item.partition("=")
        if arm not in arms:
            raise SystemExit(f"--predicted {item}: {arm!r} is not one of --treatment {arms}")
        predicted[arm] = float(size)
    for arm in (args.baseline, *arms):
        for run_dir in sorted((args.out / arm).glob("seed*"), key=lambda p: int(p.name[4:])):
            if not (run_dir / M.FINAL_EVAL_FILE).is_file():
                continue  # unfinished: a sweep still going, or stopped
            seed = int(run_dir.name[4:])
            row, run_levels, uids = _run_record(run_dir, arm, seed)
            if seed in levels and levels[seed][1] != uids:
                raise SystemExit(f"seed {seed}: the arms scored different held-out problems")
            levels[seed] = ("".join(str(level) for level in run_levels), uids)
            runs.append(row)
    raw = {
        "script": str((args.script or Path(__file__)).resolve().relative_to(HERE.parent)),
        "tables": [str(table.resolve().relative_to(HERE.parent)) for table in args.table],
        "command": shlex.join(sys.argv),
        "environment": environment(),
        "testbed": args.testbed,
        "baseline": args.baseline,
        "treatment": arms[0] if len(arms) == 1 else arms,
        "primary": "all/greedy",
        "margin": args.margin,
        **({"predicted": predicted} if predicted else {}),
        "levels": {str(seed): lv for seed, (lv, _) in sorted(levels.items())},
        "runs": runs,
    }
    args.raw.write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.raw}: {len(runs)} runs")


def verdict(low: float, high: float, margin: float) -> str:
    """The pre-registered decision rule, in words."""
    if low > 0 or high < 0:
        return f"a difference ({'higher' if low > 0 else 'lower'} with the treatment)"
    if -margin < low and high < margin:
        return f"equivalent within ±{margin}"
    return "no detectable difference at this n"


def treatments(raw: dict) -> list[str]:
    """The arms compared with the baseline: one name (the older raw files) or a list."""
    return [raw["treatment"]] if isinstance(raw["treatment"], str) else list(raw["treatment"])


def comparison(raw: dict, treat: str) -> dict | None:
    """treat − baseline over the seeds both finished: the paired t interval, MDE, Wilcoxon p and the variance split
    (evaluation sampling from the per-problem scores vs training); None with fewer than 2 paired seeds."""
    base = raw["baseline"]
    by = {(r["arm"], r["seed"]): r for r in raw["runs"]}
    seeds = sorted(s for (arm, s) in by if arm == treat and (base, s) in by)
    if len(seeds) < 2:
        return None
    acc = {arm: {s: by[arm, s]["greedy"]["all"] for s in seeds} for arm in (base, treat)}
    pair = paired_difference(acc[treat], acc[base], robust="wilcoxon")
    scores = {(arm, s): [int(c) for c in by[arm, s]["scores"]] for arm in (base, treat) for s in seeds}
    diffs = [acc[treat][s] - acc[base][s] for s in seeds]
    eval_vars = [eval_sampling_variance(scores[treat, s], scores[base, s]) for s in seeds]
    problems = sum(len(scores[base, s]) for s in seeds) / len(seeds)
    mean = {arm: sum(acc[arm].values()) / len(seeds) for arm in (base, treat)}
    return {
        "seeds": seeds,
        "mean": mean,
        "pair": pair,
        "diffs": diffs,
        "problems": problems,
        "split": variance_split(diffs, eval_vars, problems),
    }


def _verdict_cell(raw: dict, treat: str, low: float, high: float) -> str:
    """The decision rule's words, and where a pre-registered size (a positive control's) lies against the interval."""
    words = verdict(low, high, raw["margin"])
    size = raw.get("predicted", {}).get(treat)
    if size is not None:
        words += f"; pre-registered size {size:+.4f} {'inside' if low <= size <= high else 'outside'} the interval"
    return words


def tables(raw: dict) -> dict[str, str]:
    """{<testbed>_primary, <testbed>_variance}: one row per treatment (the older one-treatment layout kept)."""
    base, arms = raw["baseline"], treatments(raw)
    found = {treat: comparison(raw, treat) for treat in arms}
    if all(c is None for c in found.values()):
        return {"primary": "(fewer than 2 paired seeds finished)", "variance": ""}
    one = len(arms) == 1
    primary = (
        [f"| testbed | seeds | {base} | {arms[0]} | {arms[0]} − {base} [95 % t] | MDE (80 %) | Wilcoxon p | verdict |"]
        if one
        else [f"| testbed | arm | seeds | {base} | arm | arm − {base} [95 % t] | MDE (80 %) | Wilcoxon p | verdict |"]
    )
    primary.append("|---|---|---|---|---|---|---|---|" + ("" if one else "---|"))
    columns = "| problems / seed | paired SD | evaluation share of the variance | half-width now | 2× problems"
    columns += " | 2× seeds |"
    variance = [("" if one else "| arm ") + columns, "|---|---|---|---|---|---|" + ("" if one else "---|")]
    per_seed = []
    for treat, c in found.items():
        if c is None:
            continue
        d, split, arm_cell = c["pair"].diff, c["split"], "" if one else f" {treat} |"
        primary.append(
            f"| {raw['testbed']} |{arm_cell} {len(c['seeds'])} | {c['mean'][base]:.4f} | {c['mean'][treat]:.4f} | "
            f"{d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}] | {c['pair'].mde:.4f} | {c['pair'].wilcoxon_p:.3f} | "
            f"{_verdict_cell(raw, treat, d.low, d.high)} |"
        )
        variance.append(
            f"|{arm_cell} {c['problems']:.0f} | {split.total**0.5:.4f} | {split.eval_share:.2f} | "
            f"{split.half_width:.4f} | {split.half_width_2x_problems:.4f} | {split.half_width_2x_seeds:.4f} |"
        )
        diffs = " ".join(f"{x:+.3f}" for x in c["diffs"])
        per_seed.append(f"Per seed ({', '.join(map(str, c['seeds']))}), {treat} − {base}: {diffs}.")
    variance += ["", "\n\n".join(per_seed)]
    return {f"{raw['testbed']}_primary": "\n".join(primary), f"{raw['testbed']}_variance": "\n".join(variance)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["pack", "rebuild"])
    parser.add_argument("--raw", type=Path, required=True, help="the raw file (benchmarks/.../NAME.raw.json)")
    parser.add_argument("--out", type=Path, help="pack: the sweep's --out folder")
    parser.add_argument("--baseline", help="pack: the baseline arm's name")
    parser.add_argument("--treatment", help="pack: the other arm's name, or several: a,b (a row each)")
    parser.add_argument(
        "--predicted",
        action="append",
        default=[],
        metavar="ARM=SIZE",
        help="pack: an arm's pre-registered size (a positive control's); the verdict says if its interval holds it",
    )
    parser.add_argument(
        "--table",
        type=Path,
        action="append",
        help="pack: a markdown file holding rebuilt blocks (repeat: README.md too)",
    )
    parser.add_argument("--testbed", help="pack: the testbed's name (the blocks are named after it)")
    parser.add_argument(
        "--script", type=Path, help="pack: the script whose tables() rebuilds the blocks (default: this one)"
    )
    parser.add_argument("--margin", type=float, default=0.02, help="pack: the pre-registered equivalence margin")
    args = parser.parse_args()
    if args.what == "pack":
        needed = {"--out": args.out, "--baseline": args.baseline, "--treatment": args.treatment}
        needed |= {"--table": args.table, "--testbed": args.testbed}
        missing = [name for name, value in needed.items() if not value]
        if missing:  # else a TypeError traceback from deep in pack (--table: iterating None)
            _fail(f"pack needs {', '.join(missing)} (see --help)")
        pack(args)
    _check_raw(args.raw)
    rebuild(args.raw)  # with the tables() of the script the raw file names


def _fail(message: str) -> None:
    """One line on stderr, exit 2: a wrong argument or raw file is not a bug of the script (no traceback)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _check_raw(raw: Path) -> None:
    """The raw file must be the JSON object `pack` writes (naming its tables); else one line naming it."""
    try:
        data = json.loads(raw.read_text(encoding="utf-8"))
    except OSError as err:
        _fail(f"--raw {raw}: cannot read it ({err.strerror})")
    except (UnicodeDecodeError, ValueError) as err:
        _fail(f"--raw {raw}: not JSON ({type(err).__name__}: {str(err).splitlines()[0][:120]}); allowed: a raw file "
              "`pack` wrote")  # fmt: skip
    else:
        if not isinstance(data, dict) or not isinstance(data.get("tables"), list):
            _fail(f"--raw {raw}: not a raw file `pack` wrote (no 'tables' list)")


if __name__ == "__main__":
    main()
