"""The tiny testbed's pilot: the positive control and its pre-registered size, derived from the pilot's raw file by
the rules fixed before each part of the pilot ran (benchmarks/studies/tiny_testbed/README.md and its Amendment 1).

- The lr rule (the pre-registration): d(f) is the mean paired difference (lr arm − grpo) in held-out greedy accuracy
  over the pilot's seeds, d(1) = 0, interpolated linearly between the measured factors; f* is the largest factor of
  the grid whose d(f) reaches τ = −0.010, and the control's size is d(f*); if d(0.50) > −0.005 the pilot adds lr025.
- The G rule (Amendment 1, after the lr arms showed a smaller lr learning more): the control is GRPO at G = 7 with
  size d(7), the `g7` arm's mean paired difference; G = 6 with size d(6) if d(7) > −0.005.

    python benchmarks/sweep_tables.py pack --out runs/tiny_pilot --baseline grpo --treatment lr050,lr075,g7 \
        --raw benchmarks/studies/tiny_testbed/tiny_testbed_pilot.raw.json \
        --table benchmarks/studies/tiny_testbed/tiny_testbed.md --testbed tiny_pilot \
        --script benchmarks/studies/tiny_testbed/tiny_testbed_pilot.py
    python benchmarks/studies/tiny_testbed/tiny_testbed_pilot.py   # rebuild the blocks from the raw file alone
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: the shared helpers
import numpy as np
import sweep_tables
from raw_tables import rebuild

TARGET = -0.010  # one point: the size the testbed should show it can detect
BASE_LR = 1.0e-4  # the recipe's lr
FACTORS = {"lr025": 0.25, "lr050": 0.50, "lr075": 0.75}  # the pilot's arms (lr025 only if d(0.50) > -0.005)
EXTEND_BELOW = -0.005  # d(0.50) above this: the pilot adds lr025


def control_rule(d: dict[float, float]) -> tuple[float, float]:
    """(f*, d(f*)) from the measured {factor: mean difference}: the largest grid factor whose interpolated d reaches
    TARGET, else the smallest factor measured (whose d is then the size)."""
    xs, ys = zip(*sorted({**d, 1.0: 0.0}.items()), strict=True)
    lowest = min(d)
    grid = [round(lowest + 0.05 * i, 2) for i in range(round((1 - lowest) / 0.05))]  # lowest, ..., 0.95
    reach = [f for f in grid if np.interp(f, xs, ys) <= TARGET]
    f = max(reach) if reach else lowest
    return f, float(np.interp(f, xs, ys))


def lr_rule(measured: dict[float, float]) -> str:
    """The pre-registered lr rule's outcome, in words."""
    if 0.50 not in measured:
        return "the pilot's lr050 arm has not finished"
    if measured[0.50] > EXTEND_BELOW and 0.25 not in measured:
        return (
            f"d(0.50) = {measured[0.50]:+.4f} > {EXTEND_BELOW}: a smaller lr did not learn less; the rule's lr025 "
            "is not run and the control is chosen by Amendment 1's G rule"
        )
    f, size = control_rule(measured)
    return f"f* = {f:.2f} (lr {f * BASE_LR:.3g}), pre-registered size d(f*) = {size:+.4f}"


def g_rule(measured: dict[int, float]) -> str:
    """Amendment 1's G rule's outcome, in words."""
    if 7 not in measured:
        return "the pilot's g7 arm has not finished"
    if measured[7] > EXTEND_BELOW:
        if 6 not in measured:
            return f"d(7) = {measured[7]:+.4f} > {EXTEND_BELOW}: pilot 2 adds g6"
        return f"control G = 6, pre-registered size d(6) = {measured[6]:+.4f}"
    return f"control G = 7, pre-registered size d(7) = {measured[7]:+.4f}"


def tables(raw: dict) -> dict[str, str]:
    """The pilot's paired table and variance split (sweep_tables), and the rules' outcomes: {tiny_pilot_rule}."""
    out = sweep_tables.tables(raw)
    lr, group = {}, {}
    for arm in sweep_tables.treatments(raw):
        c = sweep_tables.comparison(raw, arm)
        if c is None:
            continue
        if arm in FACTORS:
            lr[FACTORS[arm]] = c["pair"].diff.mean
        else:
            group[int(arm.removeprefix("g"))] = c["pair"].diff.mean
    rows = [
        "| rule | measured | outcome |",
        "|---|---|---|",
        f"| lr (pre-registered) | {', '.join(f'd({f:.2f}) = {d:+.4f}' for f, d in sorted(lr.items()))} | "
        f"{lr_rule(lr)} |",
        f"| G (Amendment 1) | {', '.join(f'd({g}) = {d:+.4f}' for g, d in sorted(group.items()))} | {g_rule(group)} |",
    ]
    return {**out, "tiny_pilot_rule": "\n".join(rows)}


if __name__ == "__main__":
    rebuild(Path(__file__).resolve().parent / "tiny_testbed_pilot.raw.json", tables)
