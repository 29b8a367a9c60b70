"""The tiny testbed's pilot: the positive control's learning-rate factor f* and its pre-registered size, derived from
the pilot's raw file by the rule fixed before the pilot ran (benchmarks/tiny_testbed/README.md).

d(f) is the mean paired difference (lr arm − grpo) in held-out greedy accuracy over the pilot's seeds, d(1) = 0,
interpolated linearly between the measured factors; f* is the largest factor of the grid whose d(f) reaches the
target τ = −0.010, and the control's pre-registered size is d(f*).

    python benchmarks/sweep_tables.py pack --out runs/tiny_pilot --baseline grpo --treatment lr050,lr075 \
        --raw benchmarks/tiny_testbed_pilot.raw.json --table benchmarks/tiny_testbed.md --testbed tiny_pilot \
        --script benchmarks/tiny_testbed_pilot.py
    python benchmarks/tiny_testbed_pilot.py   # rebuild the blocks from the raw file alone
"""

from __future__ import annotations

from pathlib import Path

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


def tables(raw: dict) -> dict[str, str]:
    """The pilot's paired table and variance split (sweep_tables), and the rule's outcome: {tiny_pilot_rule}."""
    out = sweep_tables.tables(raw)
    measured = {}
    for arm in sweep_tables.treatments(raw):
        c = sweep_tables.comparison(raw, arm)
        if c is not None:
            measured[FACTORS[arm]] = c["pair"].diff.mean
    if 0.50 not in measured:
        return {**out, "tiny_pilot_rule": "(the pilot's lr050 arm has not finished)"}
    if measured[0.50] > EXTEND_BELOW and 0.25 not in measured:
        return {**out, "tiny_pilot_rule": f"d(0.50) = {measured[0.50]:+.4f} > {EXTEND_BELOW}: the pilot adds lr025"}
    f, size = control_rule(measured)
    header = " | ".join(f"d({x:.2f})" for x in sorted(measured))
    cells = " | ".join(f"{measured[x]:+.4f}" for x in sorted(measured))
    return {
        **out,
        "tiny_pilot_rule": "\n".join([
            f"| {header} | target τ | f* | control lr | pre-registered size d(f*) |",
            "|" + "---|" * (len(measured) + 4),
            f"| {cells} | {TARGET:+.3f} | {f:.2f} | {f * BASE_LR:.3g} | {size:+.4f} |",
        ]),
    }  # fmt: skip


if __name__ == "__main__":
    rebuild(Path(__file__).resolve().parent / "tiny_testbed_pilot.raw.json", tables)
