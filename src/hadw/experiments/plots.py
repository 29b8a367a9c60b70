"""Figures of runs: `hadw compare` (learning curves with bands, final accuracy per level), `hadw plot` and the
demo (training curves, final accuracy per level), and `hadw probe` (the bias on your own model)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hadw import metrics as M
from hadw.errors import UserError
from hadw.eval.report import bucket_order
from hadw.experiments.compare import CompareResult, RunLog, curve
from hadw.plotting import COLORS, save, subplots


def plot_compare(
    path: str | Path,
    runs: dict[str, dict[int, RunLog]],
    result: CompareResult,
    curve_metrics: Sequence[str] = (M.SCORE_MEAN,),
    final_metric: str = M.GREEDY,
    smooth: int = 5,
) -> Path:
    """Learning curves (mean over seeds, t band) per curve metric; final metric per bucket with intervals;
    and each arm's seed-paired difference to the baseline per bucket (the comparison that matters)."""
    panels = len(curve_metrics) + 2
    fig, axes = subplots(1, panels, figsize=(5.0 * panels, 4.2))
    color = {arm: COLORS[i % len(COLORS)] for i, arm in enumerate(result.arms)}
    for ax, metric in zip(axes, curve_metrics, strict=False):
        for arm, by_seed in runs.items():
            steps, mean, low, high = curve(list(by_seed.values()), metric, smooth, result.confidence)
            if steps.size:
                ax.plot(steps, mean, color=color[arm], label=f"{arm} (n={len(by_seed)})")
                ax.fill_between(steps, low, high, color=color[arm], alpha=0.2, linewidth=0)
        smoothed = f", {smooth}-step mean" if smooth > 1 else ""
        ax.set(xlabel="step", ylabel=metric, title=f"{metric} (mean, {result.confidence:.0%} t band{smoothed})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    keys = sorted(
        (k for k in result.metrics if M.split_val_key(k)[1] == final_metric),
        key=lambda k: bucket_order(M.split_val_key(k)[0]),
    )
    buckets = [M.split_val_key(k)[0] for k in keys]
    x = np.arange(len(keys))
    ax_final, ax_diff = axes[-2], axes[-1]
    _interval_bars(
        ax_final, x, [[result.metrics[k].arms.get(a) for k in keys] for a in result.arms], result.arms, color
    )
    ax_final.set(ylabel=f"final {final_metric}", title=f"final {final_metric} ({result.confidence:.0%} CI over seeds)")
    others = [a for a in result.arms if a != result.baseline]
    diffs = [[result.metrics[k].diffs[a].diff if a in result.metrics[k].diffs else None for k in keys] for a in others]
    _interval_bars(ax_diff, x, diffs, others, color)
    ax_diff.axhline(0, color="black", linewidth=0.8)
    ax_diff.set(
        ylabel=f"Δ final {final_metric}", title=f"arm − {result.baseline}, paired by seed ({result.confidence:.0%} CI)"
    )
    if not others:
        ax_diff.text(0.5, 0.5, "one arm: nothing to compare", ha="center", transform=ax_diff.transAxes)
    for ax in (ax_final, ax_diff):
        ax.set_xticks(x, buckets, rotation=45, ha="right", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    return save(fig, path)


def _interval_bars(ax, x: np.ndarray, series: list[list], names: list[str], color: dict[str, str]) -> None:
    """Grouped bars of Interval means with [low, high] error bars; None = missing."""
    width = 0.8 / max(len(names), 1)
    for i, (name, ivs) in enumerate(zip(names, series, strict=True)):
        mean = np.array([iv.mean if iv else np.nan for iv in ivs])
        err = np.array([[iv.mean - iv.low if iv else 0 for iv in ivs], [iv.high - iv.mean if iv else 0 for iv in ivs]])
        ax.bar(x + (i - (len(names) - 1) / 2) * width, mean, width, yerr=err, capsize=2, color=color[name], label=name)


def plot_runs(
    runs: dict[str, Path], path: Path, smooth: int = 5, initial: dict[str, dict[str, float]] | None = None
) -> Path:
    """Training accuracy (moving average) and anchor C per step for each run; with `initial` (the warm
    start's evaluation summary) also the final greedy accuracy by level. One PNG."""
    panels = 3 if initial is not None else 2
    fig, axes = subplots(1, panels, figsize=(5.5 * panels, 4))
    ax_acc, ax_c = axes[0], axes[1]
    for name, run_dir in runs.items():
        records = M.read_run(run_dir).steps
        if not records:  # a mistyped folder, or a run before its first step: an empty curve would hide it
            raise UserError(f"{run_dir}: no training step in its {M.METRICS_FILE} (expected a `hadw train` run folder)")
        steps = [r["step"] for r in records]
        acc = [r[M.SCORE_MEAN] for r in records]
        window = [acc[max(0, i - smooth + 1) : i + 1] for i in range(len(acc))]
        ax_acc.plot(steps, [sum(w) / len(w) for w in window], label=name)
        anchored = [r for r in records if isinstance(r.get(M.ANCHOR), int | float)]  # none when HA-DW never ran
        ax_c.plot([r["step"] for r in anchored], [r[M.ANCHOR] for r in anchored], label=name)
    ax_acc.set(xlabel="training step", ylabel=f"rollout accuracy, T=1 ({smooth}-step mean)", title="Rollout accuracy")
    ax_c.set(xlabel="training step", ylabel="anchor C (window, k=10)", title="Difficulty anchor")
    if initial is not None:
        _plot_levels(axes[2], runs, initial)
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a run without HA-DW has no anchor curve: no empty legend (a warning)
            ax.legend()
    return save(fig, path)


def _plot_levels(ax, runs: dict[str, Path], initial: dict[str, dict[str, float]]) -> None:
    buckets = [b for b in sorted(initial) if "/L" in b] + ["all"]
    series = {"warm start": [initial[b][M.GREEDY] for b in buckets]}
    series |= {name: [final_eval(run_dir)[b] for b in buckets] for name, run_dir in runs.items()}
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(buckets))], values, width, label=name)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(buckets))])
    ax.set_xticklabels([b.split("/")[-1] for b in buckets])
    ax.set(xlabel="difficulty level", ylabel="greedy accuracy (held-out)", title="Final evaluation", ylim=(0, 1.05))


def final_eval(run_dir: Path) -> dict[str, float]:
    """Greedy accuracy per bucket from the final evaluation of a finished run."""
    final = M.read_run(run_dir).final_eval
    if final is None:
        raise RuntimeError(f"run {run_dir} did not finish (no {M.FINAL_EVAL_FILE}); see its metrics.jsonl")
    return {bucket: row[M.GREEDY] for bucket, row in final.items()}
