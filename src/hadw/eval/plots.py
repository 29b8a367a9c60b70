"""The probe's figure (paper Figure 1(b) on your model): beside hadw.eval.probe, on the eval floor."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hadw.plotting import save, subplots


def plot_probe(path: str | Path, report) -> Path:
    """Figure 1(b) on your model: std-normalised group vs reference advantages per p bucket, and the bias vs theory."""
    from hadw.theory import bias as theory_bias

    fig, (ax1, ax2) = subplots(1, 2, figsize=(11, 4.2))
    labels = [k for k in report.buckets if k.startswith("p∈")]
    rows = [report.buckets[k] for k in labels]
    x = np.arange(len(labels))
    for offset, key, name, color in (
        (-0.3, "z_correct_est", f"correct, group of {report.G}", "tab:green"),
        (-0.1, "z_correct_ref", f"correct, reference N={report.N}", "tab:olive"),
        (0.1, "z_wrong_est", f"wrong, group of {report.G}", "tab:red"),
        (0.3, "z_wrong_ref", f"wrong, reference N={report.N}", "tab:pink"),
    ):
        ax1.bar(x + offset, [r[key] for r in rows], 0.2, color=color, label=name)
    ax1.axhline(0, color="black", linewidth=0.8)
    ax1.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    ax1.set(ylabel="mean advantage (r − mean) / std", title="advantage: small group vs reference")
    ax1.legend(fontsize=7)
    grid = np.linspace(0.005, 0.995, 199)
    ax2.plot(grid, theory_bias(grid, report.G), color="black", label=f"theory bias(p, G={report.G})")
    measured = [(r["p_ref_mean"], r["bias_measured"], r["bias_se"]) for r in rows if np.isfinite(r["bias_measured"])]
    if measured:
        px, by, se = map(np.array, zip(*measured, strict=True))
        ax2.errorbar(
            px,
            by,
            yerr=1.96 * np.nan_to_num(se),
            fmt="o",
            color="tab:blue",
            capsize=3,
            label="measured mean(p̂ − p_ref | S), 95% CI",
        )
    live = (report.p_hat > 0) & (report.p_hat < 1)
    per_prompt = np.where(live, report.p_hat - report.p_ref[:, None], np.nan)
    with np.errstate(invalid="ignore"):
        prompt_mean = np.nanmean(np.where(live.any(axis=1, keepdims=True), per_prompt, 0.0), axis=1)
    has = live.any(axis=1)
    ax2.scatter(report.p_ref[has], prompt_mean[has], s=6, alpha=0.3, color="tab:gray", label="per prompt")
    ax2.axhline(0, color="black", linewidth=0.5)
    ax2.set(
        xlabel="p_ref (N-sample success rate)",
        ylabel="A − Â = p̂ − p  (> 0: under-estimated)",
        title="bias of the group baseline, given a gradient",
        xlim=(0, 1),
    )
    ax2.legend(fontsize=7)
    return save(fig, path)
