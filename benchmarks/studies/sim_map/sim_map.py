"""The map of docs/sim.md: `hadw sim`'s predicted HA-DW − GRPO (avg@k over all levels, the primary metric) over
G × difficulty × λ × normalize, under AdamW and SGD, with the seeds a real run needs (paired SD 0.013, 80 % power).

Usage: python benchmarks/studies/sim_map/sim_map.py [--seeds 0-9] [--out docs/sim_map.png] [--json runs/sim_map.json]
Everything else is the sim's default (the tiny model's `sums` 2-4 testbed); prints the markdown table.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from hadw.experiments.stats import paired_difference, seeds_needed
from hadw.plotting import COLORS, save, subplots
from hadw.sim.engine import TINY_PAIRED_SD, SimSettings, simulate

GROUP_SIZES = (2, 4, 8, 16)
# Initial success rate per level -> logit offsets: most prompts hard / the testbed / most prompts easy
DIFFICULTY = {
    "mostly hard": (0.25, 0.08, 0.04),
    "balanced": (0.55, 0.23, 0.13),
    "mostly easy": (0.85, 0.65, 0.45),
}
LAMBDAS = (1.3, 2.0)
OPTIMISERS = {"adamw": dict(optimizer="adamw"), "sgd": dict(optimizer="sgd", lr=0.0012, grad_clip=0.0)}


def offsets(rates: tuple[float, ...]) -> list[float]:
    # the sim's offset is the logit of the median prompt's rate (the spread makes the level's mean a bit closer to 1/2)
    return [float(np.log(p / (1 - p))) for p in rates]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--out", type=Path, default=Path("docs/sim_map.png"))
    parser.add_argument("--json", type=Path, default=Path("runs/sim_map.json"))
    parser.add_argument("--from-json", action="store_true", help="redraw and reprint from --json, no simulation")
    a = parser.parse_args()
    if a.from_json:
        report(json.loads(a.json.read_text(encoding="utf-8")), a.out)
        return
    lo, hi = (int(x) for x in a.seeds.split("-"))
    torch.set_num_threads(1)
    start = time.perf_counter()
    cells = []
    for opt, opt_kw in OPTIMISERS.items():
        for diff_name, rates in DIFFICULTY.items():
            for G in GROUP_SIZES:
                for lam in LAMBDAS:
                    s = replace(SimSettings(), arms=["grpo", "hadw", "hadw_norm"], seeds=list(range(lo, hi + 1)),
                                group_size=G, level_offsets=offsets(rates), lam=lam, **opt_kw)  # fmt: skip
                    res = simulate(s)
                    base = res.curves["grpo"][-1, :, -1]
                    for arm, norm in (("hadw", "none"), ("hadw_norm", "batch")):
                        d = paired_difference(dict(enumerate(res.curves[arm][-1, :, -1])), dict(enumerate(base))).diff
                        need = seeds_needed(d.mean, TINY_PAIRED_SD)
                        cells.append(dict(optimizer=opt, difficulty=diff_name, G=G, lam=lam, normalize=norm,
                                          grpo=float(base.mean()), diff=d.mean, low=d.low, high=d.high,
                                          seeds_needed=None if need == float("inf") else int(need)))  # fmt: skip
                    print(
                        f"{opt} {diff_name} G={G} λ={lam}: Δ hadw {cells[-2]['diff']:+.4f}, "
                        f"hadw_norm {cells[-1]['diff']:+.4f}",
                        flush=True,
                    )
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(cells, indent=1) + "\n", encoding="utf-8")
    print(f"\n{time.perf_counter() - start:.0f} s\n")
    report(cells, a.out)


def report(cells: list[dict], out: Path) -> None:
    """The figure (one panel per optimiser; colour = difficulty, line = λ or normalize) and the markdown table."""
    fig, axes = subplots(1, 2, figsize=(11, 4.2))
    for ax, opt in zip(axes, OPTIMISERS, strict=True):
        for k, diff_name in enumerate(DIFFICULTY):
            for lam, norm, style in ((1.3, "none", "-"), (2.0, "none", ":"), (1.3, "batch", "--")):
                rows = [c for c in cells if (c["optimizer"], c["difficulty"], c["lam"], c["normalize"])
                        == (opt, diff_name, lam, norm)]  # fmt: skip
                label = f"{diff_name}, " + ("normalize=batch" if norm == "batch" else f"λ={lam}")
                ax.plot(GROUP_SIZES, [100 * c["diff"] for c in rows], style, marker="o", color=COLORS[k],
                        label=label)  # fmt: skip
        mde = 100 * 0.0086  # what 20 seeds of the tiny model detect (80 % power)
        ax.axhspan(-mde, mde, color="grey", alpha=0.15, lw=0, label="undetectable with 20 seeds")
        ax.set_xscale("log", base=2)
        ax.set_xticks(GROUP_SIZES, [str(g) for g in GROUP_SIZES])
        ax.set_xlabel("G (responses per prompt)")
        ax.set_ylabel("predicted HA-DW − GRPO, avg@k all (points)")
        ax.set_title(f"{opt}" + (" (lr 0.0012, no clip)" if opt == "sgd" else " (the trainer's default)"))
        ax.axhline(0, color="black", lw=0.5)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=6.5, ncol=2)
    save(fig, out)
    print(f"figure {out}\n")
    print(
        "| optimiser | difficulty | G | GRPO final | Δ λ=1.3 | Δ λ=2.0 | Δ normalize=batch "
        "| seeds needed (λ=1.3 / 2.0 / batch) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for opt in OPTIMISERS:
        for diff_name in DIFFICULTY:
            for G in GROUP_SIZES:
                c = {(r["lam"], r["normalize"]): r for r in cells
                     if (r["optimizer"], r["difficulty"], r["G"]) == (opt, diff_name, G)}  # fmt: skip
                need = " / ".join(str(c[k]["seeds_needed"] or ">10^6") for k in ((1.3, "none"), (2.0, "none"),
                                                                                (1.3, "batch")))  # fmt: skip
                print(
                    f"| {opt} | {diff_name} | {G} | {c[(1.3, 'none')]['grpo']:.3f} | {c[(1.3, 'none')]['diff']:+.4f} "
                    f"| {c[(2.0, 'none')]['diff']:+.4f} | {c[(1.3, 'batch')]['diff']:+.4f} | {need} |"
                )


if __name__ == "__main__":
    main()
