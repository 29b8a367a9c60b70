"""`hadw sim`: run the simulator, print final accuracies with intervals, write curves (JSON) and a PNG."""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path
from typing import Annotated

import torch
import typer
from rich.console import Console
from rich.table import Table

from hadw.plotting import COLORS, save, subplots
from hadw.sim.core import BUCKETS, SimConfig, simulate

BUCKET_NAMES = [f"p0∈[{lo},{hi})" for lo, hi in itertools.pairwise(BUCKETS)] + ["all"]


def _interval(x: torch.Tensor) -> tuple[float, float, float]:
    """Mean and normal 95% interval of the mean over the seeds axis (dim 0)."""
    m = float(x.mean())
    half = 1.96 * float(x.std()) / math.sqrt(x.shape[0]) if x.shape[0] > 1 else float("nan")
    return m, m - half, m + half


def sim_cmd(
    prompts: Annotated[int, typer.Option(help="Prompts in the population.")] = SimConfig.prompts,
    steps: Annotated[int, typer.Option(help="Policy-gradient steps.")] = SimConfig.steps,
    seeds: Annotated[int, typer.Option(help="Independent seeds (intervals are across them).")] = SimConfig.seeds,
    batch: Annotated[int, typer.Option(help="Prompts per step.")] = SimConfig.batch,
    group_size: Annotated[int, typer.Option("--group-size", "-G", help="Responses per prompt.")] = 8,
    beta_a: Annotated[float, typer.Option(help="Initial p ~ Beta(a, b): a.")] = 0.6,
    beta_b: Annotated[float, typer.Option(help="Initial p ~ Beta(a, b): b.")] = 1.2,
    lr: Annotated[float, typer.Option(help="Step size on per-prompt logits.")] = SimConfig.lr,
    shared_lr: Annotated[float, typer.Option(help="Step size on the shared logit.")] = SimConfig.shared_lr,
    lam: Annotated[float, typer.Option("--lambda", help="λ_scale of Φ.")] = SimConfig.lam,
    arm: Annotated[
        list[str] | None, typer.Option("--arm", help="grpo, grpo-lam or an anchor kind (repeat).")
    ] = None,
    out: Annotated[Path, typer.Option(help="Folder for sim.json and sim.png.")] = Path("sim_out"),
    seed: Annotated[int, typer.Option(help="Base random seed.")] = 0,
) -> None:
    """Simulate GRPO ± HA-DW on a prompt population; learning curves per difficulty bucket (docs/sim.md)."""
    for name, value in (("--prompts", prompts), ("--steps", steps), ("--seeds", seeds), ("--batch", batch)):
        if value < 1:
            raise typer.BadParameter(f"must be ≥ 1, got {value}", param_hint=f"'{name}'")
    if group_size < 2:
        raise typer.BadParameter(f"must be ≥ 2, got {group_size}", param_hint="'--group-size'")
    if beta_a <= 0 or beta_b <= 0:
        raise typer.BadParameter(f"Beta parameters must be > 0, got {beta_a}, {beta_b}", param_hint="'--beta-a'")
    cfg = SimConfig(prompts, steps, seeds, batch, group_size, (beta_a, beta_b), lr, shared_lr, lam=lam)
    if arm:
        cfg.arms = list(arm)
    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        curves = simulate(cfg, seed)
    except ValueError as err:  # an unknown anchor kind
        raise typer.BadParameter(str(err), param_hint="'--arm'") from None
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    table = Table(title=f"expected accuracy after {steps} steps, mean [95% CI] over {seeds} seeds")
    for col in ["arm", *BUCKET_NAMES, "Δ all vs grpo (paired)"]:
        table.add_column(col, justify="right")
    summary = {}
    base = curves.get("grpo")
    for name, c in curves.items():
        finals = [_interval(c[-1, :, k]) for k in range(c.shape[2])]
        diff = _interval(c[-1, :, -1] - base[-1, :, -1]) if base is not None and name != "grpo" else None
        summary[name] = {"final": dict(zip(BUCKET_NAMES, finals, strict=True)), "diff_vs_grpo": diff}
        cells = [f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in finals]
        table.add_row(name, *cells, "" if diff is None else f"{diff[0]:+.3f} [{diff[1]:+.3f}, {diff[2]:+.3f}]")
    Console().print(table)
    print(f"wall {wall:.1f} s, CPU {cpu:.1f} s")
    out.mkdir(parents=True, exist_ok=True)
    (out / "sim.json").write_text(
        json.dumps(
            {
                "config": cfg.__dict__ | {"beta": list(cfg.beta)},
                "summary": summary,
                "curves_mean": {k: v.mean(1).tolist() for k, v in curves.items()},
            },
            indent=1,
        )
    )
    print(f"wrote {plot_curves(curves, out / 'sim.png')} and {out / 'sim.json'}")


def plot_curves(curves: dict[str, torch.Tensor], path: Path) -> Path:
    """One panel per bucket (and overall): mean curve and its 95% band over seeds, one colour per arm."""
    fig, axes = subplots(1, len(BUCKET_NAMES), figsize=(3.2 * len(BUCKET_NAMES), 3.2))
    for colour, (name, c) in zip(COLORS, curves.items(), strict=False):
        mean = c.mean(1)
        half = 1.96 * c.std(1) / math.sqrt(c.shape[1]) if c.shape[1] > 1 else torch.zeros_like(mean)
        for k, ax in enumerate(axes):
            ax.plot(mean[:, k], color=colour, label=name)
            ax.fill_between(range(len(mean)), mean[:, k] - half[:, k], mean[:, k] + half[:, k], color=colour, alpha=0.2)
            ax.set_title(BUCKET_NAMES[k])
            ax.set_xlabel("step")
    axes[0].set_ylabel("expected accuracy")
    axes[0].legend()
    return save(fig, path)


def register(app: typer.Typer) -> None:
    app.command("sim")(sim_cmd)
