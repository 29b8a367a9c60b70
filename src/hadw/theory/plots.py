"""Figures of `hadw bias plot`: |bias| against p (paper Figure 2) and the continuous-reward bias against the
mean reward for Beta rewards (Figure 5 style). Drawn with hadw.plotting (no pyplot, no display)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hadw.plotting import save, subplots
from hadw.theory.binary import bias
from hadw.theory.continuous import beta_from_mean, continuous_theory


def plot_binary_bias(path: Path, group_sizes: Sequence[int], n_points: int = 401) -> dict:
    """|A − E[Â | S]| against p for each G (Lemma 2); returns the plotted data."""
    p = np.linspace(0.0, 1.0, n_points)
    fig, (ax,) = subplots(figsize=(6.4, 4.2))
    curves = {}
    for G in group_sizes:
        curves[int(G)] = np.abs(bias(p, G))
        ax.plot(p, curves[int(G)], label=f"G = {G}")
    ax.axvline(0.5, color="grey", lw=0.8, ls=":")
    ax.text(0.25, 0.97, "underestimated\n(hard prompts)", transform=ax.transAxes, ha="center", va="top")
    ax.text(0.75, 0.97, "overestimated\n(easy prompts)", transform=ax.transAxes, ha="center", va="top")
    ax.set_xlabel("success rate p of the prompt")
    ax.set_ylabel(r"$|A - \mathbb{E}[\hat A \mid S]|$  (binary rewards)")
    ax.set_title("Bias of the group-relative advantage (Lemma 2)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, None)
    ax.legend(loc="center right")
    ax.grid(alpha=0.3)
    save(fig, path, dpi=150)
    return {"p": p.tolist(), "abs_bias": {G: v.tolist() for G, v in curves.items()}}


def plot_continuous_bias(
    path: Path, group_sizes: Sequence[int], sigma: float, concentration: float, n_points: int = 25
) -> dict:
    """A − E[Â | S_σ] against the mean reward for Beta(μκ, (1−μ)κ) rewards, one curve per G (Theorem 4)."""
    means = np.linspace(0.04, 0.96, n_points)
    values = np.array(
        [continuous_theory(beta_from_mean(m, concentration), list(group_sizes), sigma).bias for m in means]
    )  # (n_points, len(G))
    fig, (ax,) = subplots(figsize=(6.4, 4.2))
    for j, G in enumerate(group_sizes):
        ax.plot(means, values[:, j], marker=".", label=f"G = {G}")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.axvline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xlabel(r"mean reward $p = \mathbb{E}[r]$")
    ax.set_ylabel(r"bias $A - \mathbb{E}[\hat A \mid S_\sigma]$  (> 0: underestimated)")
    ax.set_title(f"Continuous rewards: Beta with α+β = {concentration:g}, σ = {sigma:g} (Theorem 4)")
    ax.legend()
    ax.grid(alpha=0.3)
    save(fig, path, dpi=150)
    return {"mean": means.tolist(), "bias": {int(G): values[:, j].tolist() for j, G in enumerate(group_sizes)}}
