"""What `hadw sim` shows: final accuracy per bucket with intervals over seeds, paired differences to the
first arm, learning curves (PNG) and a JSON dump. Intervals come from hadw.experiments.stats."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from hadw.experiments.stats import interval, paired_difference, seeds_needed
from hadw.plotting import COLORS, save, subplots
from hadw.sim.engine import TINY_PAIRED_SD, SimResult

# Printed with every SGD prediction (and written to --json): the pre-registered check on the tiny model found the
# sim's SGD predictions wrong in sign near the model's stability edge, which the sim cannot represent.
SGD_CAVEAT = (
    "SGD predictions failed their pre-registered check on the tiny model "
    "(benchmarks/studies/sim_vs_trainer/sim_vs_trainer.md, sums 2-4, "
    "lr 0.01 without clip): HA-DW - GRPO was predicted +0.047 and measured -0.089 [-0.191, +0.012] over 10 seeds, "
    "with 1 of 10 GRPO and 3 of 10 HA-DW runs collapsing. The sim has no instability or collapse (its learning "
    "rises with the step size), so under SGD it is not a prediction for step sizes near a model's stability edge: "
    "trust it only where a GRPO pilot at a larger learning rate does better, not worse."
)


def caveat(result: SimResult) -> str | None:
    """What the user must read beside these predictions: the SGD caveat for plain SGD (and the SGD logit model)."""
    s = result.settings
    return SGD_CAVEAT if s.model == "logit" or s.optimizer == "sgd" else None


def bucket_names(result: SimResult) -> list[str]:
    """L1..Ln, then all (the last column of every curve)."""
    return [f"L{i + 1}" for i in range(len(result.settings.level_offsets))] + ["all"]


def summary(result: SimResult, confidence: float = 0.95, paired_sd: float = TINY_PAIRED_SD) -> dict:
    """{arm: {bucket: {start, final: Interval, diff_vs_<base>: PairedDifference, seeds_needed}}} at the last step.

    seeds_needed: the seeds a real run whose paired difference has SD `paired_sd` needs to detect the predicted
    mean difference with 80 % power (two-sided paired t-test at 5 %); null when more than 10⁶ (or exactly 0)."""
    seeds = result.settings.seeds
    base = result.settings.arms[0]
    out: dict = {}
    for arm, curves in result.curves.items():
        out[arm] = {}
        for j, bucket in enumerate(bucket_names(result)):
            final = curves[-1, :, j]
            row = {
                "start": float(curves[0, :, j].mean()),
                "final": interval(final, confidence).to_dict(),
                "anchor_final": float(result.anchors[arm][-1].mean()),
            }
            if arm != base:
                ref = result.curves[base][-1, :, j]
                diff = paired_difference(dict(zip(seeds, final, strict=True)), dict(zip(seeds, ref, strict=True)))
                row["diff_vs_" + base] = diff.to_dict()
                needed = seeds_needed(diff.diff.mean, paired_sd)
                row["seeds_needed"] = None if needed == float("inf") else int(needed)
            out[arm][bucket] = row
    return out


def to_json(result: SimResult, confidence: float = 0.95, paired_sd: float = TINY_PAIRED_SD) -> dict:
    """Settings, timings, the summary and the mean curves (per arm: [records][buckets])."""
    return {
        "settings": asdict(result.settings),
        "seconds": result.seconds,
        "buckets": bucket_names(result),
        "steps": result.steps.tolist(),
        "paired_sd": paired_sd,
        "summary": summary(result, confidence, paired_sd),
        "caveat": caveat(result),
        "mean_curves": {arm: c.mean(axis=1).round(5).tolist() for arm, c in result.curves.items()},
    }


def rich_table(result: SimResult, confidence: float = 0.95, paired_sd: float = TINY_PAIRED_SD):
    """Final true accuracy per bucket: mean [CI] per arm, each arm − the first arm (paired by seed), and the seeds
    a real run would need to detect that difference."""
    from rich.table import Table

    base = result.settings.arms[0]
    summ = summary(result, confidence, paired_sd)
    s = result.settings
    table = Table(
        title=f"hadw sim ({s.model}, {s.optimizer if s.model == 'softmax' else 'sgd'}): true accuracy after "
        f"{s.steps} steps, {len(s.seeds)} seeds: mean ± {confidence:.0%} t half-width; "
        f"Δ = arm − {base}, paired by seed; n = seeds a real run needs to detect Δ (80 % power, "
        f"paired SD {paired_sd:g})"
    )
    table.add_column("arm")
    for bucket in bucket_names(result):
        table.add_column(bucket, justify="right")
    start = [f"{summ[base][b]['start']:.3f}" for b in bucket_names(result)]
    table.add_row("(start)", *start)
    for arm in result.settings.arms:
        cells = []
        for bucket in bucket_names(result):
            row = summ[arm][bucket]
            iv = row["final"]
            cell = f"{iv['mean']:.3f} ± {(iv['high'] - iv['low']) / 2:.3f}"
            if arm != base:
                d = row["diff_vs_" + base]["diff"]
                needed = row["seeds_needed"]
                cell += f"  Δ {d['mean']:+.4f} ± {(d['high'] - d['low']) / 2:.4f} n {needed or '>1e6'}"
            cells.append(cell)
        table.add_row(arm, *cells)
    return table


def plot(result: SimResult, path: str | Path, confidence: float = 0.95) -> Path:
    """One panel per bucket: mean true accuracy over seeds with a t band, one line per arm."""
    names = bucket_names(result)
    fig, axes = subplots(1, len(names), figsize=(4.0 * len(names), 3.6))
    for a, (arm, curves) in enumerate(result.curves.items()):
        for j, ax in enumerate(axes):
            ivs = [interval(curves[r, :, j], confidence) for r in range(curves.shape[0])]
            mean = np.array([iv.mean for iv in ivs])
            ax.plot(result.steps, mean, color=COLORS[a % len(COLORS)], label=arm)
            ax.fill_between(
                result.steps,
                [iv.low for iv in ivs],
                [iv.high for iv in ivs],
                color=COLORS[a % len(COLORS)],
                alpha=0.2,
                linewidth=0,
            )
    for ax, name in zip(axes, names, strict=True):
        ax.set_title(f"{name}: true accuracy")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return save(fig, path)
