"""`hadw sim`: GRPO ± HA-DW on a simulated prompt population with known success rates, over seeds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hadw.sim.simulate import ARMS, SimConfig, simulate, summarise


def _ci(d: dict) -> str:
    return f"{d['mean']:.3f} [{d['low']:.3f}, {d['high']:.3f}]"


def plot(summary: dict, path: Path) -> Path:
    """Overall accuracy curve (mean and 95 % band per arm) + final per-bucket bars with error bars."""
    from hadw.plotting import COLORS, save, subplots

    fig, (ax_curve, ax_bars) = subplots(1, 2, figsize=(11, 4.2))
    arms = list(summary["arms"])
    width = 0.8 / max(len(arms), 1)
    for i, arm in enumerate(arms):
        e, color = summary["arms"][arm], COLORS[i % len(COLORS)]
        steps = range(len(e["curve_mean"]))
        ax_curve.plot(steps, e["curve_mean"], color=color, label=arm)
        ax_curve.fill_between(steps, e["curve_low"], e["curve_high"], color=color, alpha=0.2)
        means = [b["mean"] for b in e["final_bucket"]]
        err = [[b["mean"] - b["low"] for b in e["final_bucket"]], [b["high"] - b["mean"] for b in e["final_bucket"]]]
        xs = [k + (i - (len(arms) - 1) / 2) * width for k in range(len(means))]
        ax_bars.bar(xs, means, width, yerr=err, color=color, label=arm, capsize=2)
    ax_curve.set(xlabel="step", ylabel="mean true p (all prompts)", title="accuracy, mean ± 95 % CI over seeds")
    ax_bars.set(xlabel="difficulty bucket (0 = hardest)", ylabel="final mean true p", title="final accuracy per bucket")
    ax_curve.legend()
    ax_bars.legend()
    return save(fig, path)


def sim_cmd(
    seeds: Annotated[int, typer.Option("--seeds", help="Number of seeds S (simulated in one batch).")] = 20,
    prompts: Annotated[int, typer.Option("--prompts", help="Prompts N in the population.")] = 2000,
    buckets: Annotated[int, typer.Option("--buckets", help="Difficulty buckets (equal-sized).")] = 5,
    steps: Annotated[int, typer.Option("--steps", help="Training steps.")] = 200,
    batch_prompts: Annotated[int, typer.Option("--batch-prompts", "-P", help="Prompts drawn per step P.")] = 64,
    group_size: Annotated[int, typer.Option("--group-size", "-G", help="Responses per prompt G ≥ 2.")] = 8,
    arms: Annotated[str, typer.Option("--arms", help=f"Comma-separated arms from {', '.join(ARMS)}.")] = ",".join(
        ARMS
    ),
    anchor: Annotated[str, typer.Option("--anchor", help="HA-DW anchor: window, kalman, ema or fixed.")] = "window",
    lam: Annotated[float, typer.Option("--lam", help="HA-DW scale λ.")] = 1.3,
    estimator: Annotated[
        str, typer.Option("--estimator", help="Advantage estimator: grpo, drgrpo, rloo, grpo_batch_std.")
    ] = "grpo",
    lr_skill: Annotated[float, typer.Option("--lr-skill", help="Learning rate of the shared skill s.")] = SimConfig.lr_skill,
    lr_prompt: Annotated[
        float, typer.Option("--lr-prompt", help="Learning rate of the per-prompt logits b_j.")
    ] = SimConfig.lr_prompt,
    bucket_low: Annotated[float, typer.Option("--bucket-low", help="Mean logit of the hardest bucket.")] = -3.0,
    bucket_high: Annotated[float, typer.Option("--bucket-high", help="Mean logit of the easiest bucket.")] = 1.0,
    noise: Annotated[float, typer.Option("--noise", help="Std of a prompt's logit around its bucket mean.")] = 0.5,
    seed: Annotated[int, typer.Option("--seed", help="Base random seed (populations and sampling).")] = 0,
    out: Annotated[Path, typer.Option("--out", "-o", help="PNG with the curves and per-bucket bars.")] = Path("sim.png"),
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the summary and curves here.")] = None,
) -> None:
    """Simulated GRPO ± HA-DW on prompts with known success rates p_j = sigmoid(s + b_j); exact Bernoulli groups."""
    arm_list = [a.strip() for a in arms.split(",") if a.strip()]
    bad = [a for a in arm_list if a not in ARMS]
    if bad or not arm_list:
        raise typer.BadParameter(f"unknown arm(s) {bad}; allowed: {', '.join(ARMS)}", param_hint="'--arms'")
    if group_size < 2 or seeds < 1 or steps < 1 or not 1 <= batch_prompts <= prompts or buckets < 1:
        raise typer.BadParameter("need -G ≥ 2, --seeds ≥ 1, --steps ≥ 1, 1 ≤ -P ≤ --prompts, --buckets ≥ 1")
    cfg = SimConfig(seeds=seeds, prompts=prompts, buckets=buckets, steps=steps, batch_prompts=batch_prompts,
                    group_size=group_size, lr_skill=lr_skill, lr_prompt=lr_prompt, bucket_low=bucket_low,
                    bucket_high=bucket_high, noise=noise, estimator=estimator, anchor=anchor, lam=lam, seed=seed)
    result = simulate(cfg, arm_list)
    summary = summarise(result)
    console = Console()
    console.print(f"simulated {seeds} seeds × {prompts} prompts × {steps} steps, arms {arm_list}: "
                  f"{result.seconds:.1f} s")
    table = Table(title=escape(f"final accuracy (mean true p), 95 % t interval over {seeds} seeds"))
    for col in ["arm", "all", *(f"bucket {k}" for k in range(buckets))]:
        table.add_column(escape(col), justify="right")
    for arm, e in summary["arms"].items():
        table.add_row(arm, _ci(e["final"]), *(_ci(b) for b in e["final_bucket"]))
        if "diff" in e:
            table.add_row(escape(f"{arm} − grpo"), _ci(e["diff"]["diff"]), *(_ci(d["diff"]) for d in e["diff_bucket"]))
    console.print(table)
    plot(summary, out)
    console.print(f"wrote {out}")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({"summary": summary, **result.to_dict()}))
        console.print(f"wrote {json_path}")


def register(app: typer.Typer) -> None:
    app.command("sim")(sim_cmd)
