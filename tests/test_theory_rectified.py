"""Rectified baseline and λ_scale (spec §2: Lemma 1, Theorem 3)."""

from __future__ import annotations

import numpy as np
import pytest

from hadw.theory import (
    c_bounds,
    debias_constant,
    eps_delta,
    expected_baseline,
    lambda_interval,
    monte_carlo,
)


def test_debias_constant_hand_values_and_identity():
    p = np.linspace(0.01, 0.99, 99)
    np.testing.assert_allclose(debias_constant(p, 2), 2 * p, rtol=1e-13)  # G = 2: 2p(1−p)/(1−p)
    np.testing.assert_allclose(debias_constant(0.5, [2, 5, 64]), 1.0, rtol=1e-14)
    for G in (3, 8, 64, 1024):
        np.testing.assert_allclose(debias_constant(p, G) * expected_baseline(p, G), p, rtol=1e-12)
    # limits: c* → 0 as p → 0 and G/(G−1) as p → 1, finite and accurate at the extremes
    assert debias_constant(1e-9, 1024) == pytest.approx(1e-9 / (1 / 1024), rel=1e-5)
    assert debias_constant(1 - 1e-9, 1024) == pytest.approx(1024 / 1023, rel=1e-5)


def test_debias_constant_agrees_with_monte_carlo():
    p, G = np.array([0.05, 0.2, 0.45, 0.7, 0.93]), 6
    mc = monte_carlo(p, G, n_groups=200_000, seed=3)
    c = debias_constant(p, G)
    # E[c* p̂ | S] = p, to within 4 standard errors of c*·(mean of p̂ over S)
    assert np.all(np.abs(c * mc.expected_baseline.value - p) <= 4 * c * mc.expected_baseline.se)


def test_eps_delta_formula_and_its_guarantee():
    G, Delta, delta = 8, 0.05, 0.1
    A = 1 - 0.95**8 - 0.05**8
    assert eps_delta(G, Delta, delta) == pytest.approx(np.sqrt(np.log(2 / (0.1 * A)) / 16), rel=1e-14)
    # Lemma 5: P(|p̂ − p| ≥ ε_δ | S) ≤ δ for p ∈ [Δ, 1−Δ]; check by simulation on the worst-looking cases
    G, Delta, delta = 16, 0.1, 0.2
    e = float(eps_delta(G, Delta, delta))
    p = np.array([0.1, 0.3, 0.5, 0.8, 0.9])
    rng = np.random.default_rng(0)
    R = rng.binomial(G, p, size=(100_000, p.size))
    update = (R > 0) & (R < G)
    miss = (np.abs(R / G - p) >= e) & update
    assert np.all(miss.sum(0) / update.sum(0) <= delta)
    with pytest.raises(ValueError, match="Delta"):
        eps_delta(8, 0.7, 0.1)
    with pytest.raises(ValueError, match="delta"):
        eps_delta(8, 0.1, 1.5)


def test_c_bounds_match_brute_force_and_certify_lemma1():
    p_hat, G, Delta, delta, eps = 0.25, 64, 0.1, 0.1, 0.05
    cb = c_bounds(p_hat, G, Delta, delta, eps)
    e = float(eps_delta(G, Delta, delta))
    assert (cb.I_lo, cb.I_hi) == pytest.approx((max(p_hat - e, Delta), min(p_hat + e, 1 - Delta)))
    grid = np.linspace(cb.I_lo, cb.I_hi, 200_001)
    c_star = debias_constant(grid, G)
    assert cb.c_low == pytest.approx(np.max((grid - eps) / grid * c_star), abs=1e-9)
    assert cb.c_high == pytest.approx(np.min((grid + eps) / grid * c_star), abs=1e-9)
    assert cb.c_low < cb.c_high
    # Lemma 1's conclusion: any c in (c_low, c_high) keeps E[c p̂ | S] within ε of p for every p in I
    for c in np.linspace(cb.c_low, cb.c_high, 7)[1:-1]:
        assert np.all(np.abs(c * expected_baseline(grid, G) - grid) < eps)


def test_c_bounds_empty_interval_and_broadcasting():
    cb = c_bounds([0.25, 0.99], 1024, 0.1, 0.1, 0.05)
    assert np.isfinite(cb.c_low[0]) and np.isnan(cb.c_low[1])  # 0.99 − ε_δ > 1 − Δ: I is empty
    assert cb.c_low.shape == (2,)


def test_lambda_interval_reproduces_the_rectified_advantage():
    p_hat, anchor, G, Delta, delta, eps = 0.25, 0.5, 64, 0.1, 0.1, 0.05
    li = lambda_interval(p_hat, anchor, G, Delta, delta, eps)
    assert (li.D_correct, li.D_incorrect, li.M) == (1.0, -1.0, 0.25)  # hard prompt: boost correct answers
    for lam in np.linspace(li.correct_lo, li.correct_hi, 5)[1:-1]:
        # Â Φ for a correct response = (1 − p̂) λ e^{D M} must equal 1 − c p̂ with c in (c_low, c_high)
        c = (1 - (1 - p_hat) * lam * np.exp(li.D_correct * li.M)) / p_hat
        assert li.c_low < c < li.c_high
    for lam in np.linspace(li.incorrect_lo, li.incorrect_hi, 5)[1:-1]:
        c = lam * np.exp(li.D_incorrect * li.M)  # Â Φ = −p̂ λ e^{DM} = −c p̂
        assert li.c_low < c < li.c_high
    # here no single λ serves both responses: e^{-M}·(≈1) and e^{+M}·(≈1) do not overlap
    assert li.both_lo >= li.both_hi
    # with the anchor at p̂ (M = 0) both ranges contain 1 and overlap
    li0 = lambda_interval(p_hat, p_hat, G, Delta, delta, eps)
    assert li0.both_lo < 1.0 < li0.both_hi


def test_lambda_interval_rejects_degenerate_p_hat():
    with pytest.raises(ValueError, match="p_hat"):
        lambda_interval(0.0, 0.5, 8, 0.1, 0.1, 0.1)
    with pytest.raises(ValueError, match="anchor"):
        lambda_interval(0.5, 1.5, 8, 0.1, 0.1, 0.1)
