"""Monte Carlo estimates of everything in `binary` and `continuous`, with standard errors.

Independent of the closed forms on purpose: groups are drawn, degenerate (or non-updating) ones are dropped,
and plain sample averages are taken. A binary group's reward sum is Binomial(G, p), so it is drawn directly
(G Bernoulli draws per group would give the same law at G times the cost). Continuous groups are drawn
reward by reward. Work is done in chunks so memory stays bounded for any n_groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hadw.theory.binary import DIRECTIONS, Direction, check_p_G
from hadw.theory.continuous import check_rewards

_CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Estimate:
    """A Monte Carlo estimate and its standard error (arrays of the broadcast shape)."""

    value: np.ndarray
    se: np.ndarray


@dataclass(frozen=True)
class BinaryMC:
    """Estimates of `p_degenerate`, `expected_baseline`, `bias` and `prob_misestimate` from n_groups groups."""

    p_degenerate: Estimate
    expected_baseline: Estimate
    bias: Estimate
    prob_misestimate: Estimate
    n_groups: int


def _mean_se(total: np.ndarray, total_sq: np.ndarray, n: np.ndarray) -> Estimate:
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / n
        var = np.maximum(total_sq / n - mean**2, 0.0) * n / (n - 1)
        return Estimate(mean, np.sqrt(var / n))


def monte_carlo(
    p: np.typing.ArrayLike,
    G: np.typing.ArrayLike,
    n_groups: int = 100_000,
    eps: float = 0.0,
    direction: Direction = "auto",
    seed: int = 0,
) -> BinaryMC:
    """Simulate n_groups groups at every broadcast (p, G) and estimate the binary-reward quantities.

    The conditional estimates (baseline, bias, mis-estimation) average over the non-degenerate groups only;
    they are NaN where none occurred. The mis-estimate event is p̂ − p > ε (under), p − p̂ > ε (over), or
    the one matching the bias (auto: under for p ≤ 1/2), as in `binary.prob_misestimate`.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}; got {direction!r}")
    if n_groups < 2:
        raise ValueError(f"n_groups must be ≥ 2; got {n_groups}")
    p, G = check_p_G(p, G)
    n_trials = G.astype(np.int64)
    under = (p <= 0.5) if direction == "auto" else np.full(p.shape, direction == "under")
    rng = np.random.default_rng(seed)
    n_degenerate = np.zeros(p.shape)
    n_update, sum_hat, sum_hat_sq, n_miss = (np.zeros(p.shape) for _ in range(4))
    chunk = max(1, _CHUNK_ELEMENTS // max(p.size, 1))
    for start in range(0, n_groups, chunk):
        counts = rng.binomial(n_trials, p, size=(min(chunk, n_groups - start), *p.shape))
        p_hat = counts / G
        update = (counts > 0) & (counts < n_trials)
        miss = np.where(under, p_hat - p > eps, p - p_hat > eps) & update
        n_degenerate += np.sum(~update, axis=0)
        n_update += np.sum(update, axis=0)
        sum_hat += np.sum(np.where(update, p_hat, 0.0), axis=0)
        sum_hat_sq += np.sum(np.where(update, p_hat**2, 0.0), axis=0)
        n_miss += np.sum(miss, axis=0)
    frac = n_degenerate / n_groups
    degenerate = Estimate(frac, np.sqrt(frac * (1 - frac) / n_groups))
    baseline = _mean_se(sum_hat, sum_hat_sq, n_update)
    bias = Estimate(baseline.value - p, baseline.se)
    with np.errstate(invalid="ignore", divide="ignore"):
        miss_frac = n_miss / n_update
        miss_se = np.sqrt(miss_frac * (1 - miss_frac) / n_update)
    return BinaryMC(degenerate, baseline, bias, Estimate(miss_frac, miss_se), n_groups)


@dataclass(frozen=True)
class ContinuousMC:
    """Estimates of `continuous_theory`'s P(S_σ^c), E[p̂ | S_σ] and bias (the true mean is exact)."""

    p_no_update: Estimate
    expected_baseline: Estimate
    bias: Estimate
    n_groups: int


def monte_carlo_continuous(rewards, G: int, sigma: float, n_groups: int = 100_000, seed: int = 0) -> ContinuousMC:
    """Simulate n_groups groups of G rewards ~ `rewards` (frozen scipy distribution on [0, 1]); a group
    updates when max − min > σ (the event S_σ of Theorem 4)."""
    check_rewards(rewards)
    if int(G) != G or G < 2:
        raise ValueError(f"G (group size) must be an integer ≥ 2; got {G}")
    if n_groups < 2:
        raise ValueError(f"n_groups must be ≥ 2; got {n_groups}")
    G = int(G)
    rng = np.random.default_rng(seed)
    n_update = sum_hat = sum_hat_sq = 0.0
    chunk = max(1, _CHUNK_ELEMENTS // G)
    for start in range(0, n_groups, chunk):
        r = rewards.rvs(size=(min(chunk, n_groups - start), G), random_state=rng)
        update = r.max(axis=1) - r.min(axis=1) > sigma
        p_hat = r.mean(axis=1)[update]
        n_update += update.sum()
        sum_hat += p_hat.sum()
        sum_hat_sq += (p_hat**2).sum()
    frac = 1.0 - n_update / n_groups
    no_update = Estimate(np.asarray(frac), np.asarray(np.sqrt(frac * (1 - frac) / n_groups)))
    baseline = _mean_se(np.asarray(sum_hat), np.asarray(sum_hat_sq), np.asarray(n_update))
    bias = Estimate(baseline.value - float(rewards.mean()), baseline.se)
    return ContinuousMC(no_update, baseline, bias, n_groups)
