"""Exact formulas vs Monte Carlo for the bias and the ε→0 mis-estimation probability on a 1000 × 1000 grid of
(p, G), G ≤ 1024, at an accuracy of 1e-3 (one standard error).

Exact: `bias` and `prob_misestimate` evaluated once on the whole grid (vectorised).
Monte Carlo: the number of groups each grid point needs is computed from the exact conditional variances
    n = max(Var(p̂ | S), π(1 − π), 1e-6 · 30) / (1e-3)² / P(S),   π = P(mis-estimate | S),
(at least 30 non-degenerate groups), so that both standard errors reach 1e-3. Running all of it would take
hours, so `monte_carlo` is timed on a uniform random subsample of grid points, each with its own n, and the
total is extrapolated as (grid size / sample size) × (summed sample time), an unbiased estimate of the
full-grid time. The sample's estimates are checked against the exact values (within 4 SE).

The exact evaluation is timed --repeats times (min / median / max, wall and process CPU time); the
Monte Carlo sample runs once (its cost is the sum of many independent draws), wall and CPU time.

Run: .venv/bin/python benchmarks/speed/theory_speed.py [--sample 40] [--seed 0] [--repeats 5] [--report FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import numpy as np
from bench_report import add_report_option, report

from hadw.theory import bias, expected_baseline, monte_carlo, p_nondegenerate, prob_misestimate

TARGET_SE = 1e-3


def needed_groups(p: np.ndarray, G: np.ndarray) -> np.ndarray:
    """Groups to draw at each (p, G) for a standard error of TARGET_SE on both the bias and the probability."""
    p_s = p_nondegenerate(p, G)
    # E[p̂² 1_S] = E[p̂²] − P(R = G) = p(1−p)/G + p² − p^G
    second = (p * (1 - p) / G + p**2 - p**G) / p_s
    var_baseline = np.maximum(second - expected_baseline(p, G) ** 2, 0.0)
    prob = prob_misestimate(p, G)
    var = np.maximum(np.maximum(var_baseline, prob * (1 - prob)), 30 * TARGET_SE**2)
    return np.ceil(var / TARGET_SE**2 / p_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=40, help="grid points timed by Monte Carlo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of the exact evaluation")
    add_report_option(parser)
    args = parser.parse_args()
    with report(args.report, parser, args):
        measure(args)


def measure(args: argparse.Namespace) -> None:

    p = (np.arange(1000) + 0.5) / 1000  # 0.0005 … 0.9995
    G = np.round(np.linspace(2, 1024, 1000))
    P, GG = np.meshgrid(p, G, indexing="ij")
    print(f"grid: {P.size:,} points, p in [{p[0]}, {p[-1]}], G in [{int(G[0])}, {int(G[-1])}]")

    walls, cpus = {"bias": [], "prob": []}, {"bias": [], "prob": []}
    for _ in range(args.repeats):  # alternating: bias, prob, bias, prob, ...
        for name, fn in (("bias", bias), ("prob", prob_misestimate)):
            t0, c0 = time.perf_counter(), time.process_time()
            value = fn(P, GG)
            walls[name].append(time.perf_counter() - t0)
            cpus[name].append(time.process_time() - c0)
            if name == "bias":
                exact_bias = value
            else:
                exact_prob = value
    assert np.all(np.isfinite(exact_bias)) and np.all(np.isfinite(exact_prob))
    fmt = lambda v: f"{min(v):.3f} / {statistics.median(v):.3f} / {max(v):.3f} s"
    for name in walls:
        print(f"exact {name:4s} ({args.repeats} runs, min/median/max): wall {fmt(walls[name])}, CPU {fmt(cpus[name])}")
    t_exact = statistics.median(walls["bias"]) + statistics.median(walls["prob"])
    c_exact = statistics.median(cpus["bias"]) + statistics.median(cpus["prob"])
    print(f"exact, bias + prob_misestimate (medians): wall {t_exact:.3f} s, CPU {c_exact:.3f} s")

    n_needed = needed_groups(P, GG)
    print(
        f"Monte Carlo at SE {TARGET_SE:g}: {n_needed.sum():.3e} groups in all "
        f"(median {np.median(n_needed):.3g}, max {n_needed.max():.3g} per point)"
    )

    rng = np.random.default_rng(args.seed)
    pick = rng.choice(P.size, size=args.sample, replace=False)
    t_sample, c_sample, worst_z, worst_se = 0.0, 0.0, 0.0, 0.0
    for k, i in enumerate(pick):
        pi, Gi, ni = P.flat[i], GG.flat[i], int(n_needed.flat[i])
        t0, c0 = time.perf_counter(), time.process_time()
        mc = monte_carlo(pi, Gi, n_groups=ni, seed=args.seed + k)
        t_sample += time.perf_counter() - t0
        c_sample += time.process_time() - c0
        for est, exact in ((mc.bias, exact_bias.flat[i]), (mc.prob_misestimate, exact_prob.flat[i])):
            worst_se = max(worst_se, float(est.se))
            if est.se > 0:
                worst_z = max(worst_z, abs(float(est.value) - exact) / float(est.se))
    t_mc, c_mc = t_sample * P.size / args.sample, c_sample * P.size / args.sample
    print(
        f"Monte Carlo on {args.sample} random grid points: wall {t_sample:.2f} s, CPU {c_sample:.2f} s, "
        f"{n_needed.flat[pick].sum():.3e} groups; largest SE {worst_se:.2e}, worst |MC − exact| {worst_z:.2f} SE"
    )
    print(f"Monte Carlo, extrapolated to the full grid: {t_mc:.3e} s ({t_mc / 3600:.1f} h)")
    print(f"ratio Monte Carlo / exact: wall {t_mc / t_exact:.3e}, CPU {c_mc / c_exact:.3e}")


if __name__ == "__main__":
    main()
