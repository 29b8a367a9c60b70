"""Binary-reward theory (spec §2): Lemma 2's table, Theorem 1's signs, Theorem 2, Corollaries 1–3, numerical
stability, and agreement with Monte Carlo."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate

from hadw.theory import (
    bias,
    expected_baseline,
    interval_average,
    monte_carlo,
    p_degenerate,
    poisson_limit_average,
    prob_misestimate,
)

# spec §2, Lemma 2 reference values (positive = underestimation)
LEMMA2_P = [0.05, 0.125, 0.25, 0.375, 0.5, 0.75, 0.875]
LEMMA2_TABLE = {
    2: [0.45, 0.375, 0.25, 0.125, 0, -0.25, -0.375],
    4: [0.2195, 0.1767, 0.1121, 0.0542, 0, -0.1121, -0.1767],
    8: [0.0986, 0.0654, 0.0278, 0.0087, 0, -0.0278, -0.0654],
    16: [0.0393, 0.0167, 0.0025, 0.0002, 0, -0.0025, -0.0167],
}


@pytest.mark.parametrize("G", sorted(LEMMA2_TABLE))
def test_lemma2_table_to_four_decimals(G):
    assert np.round(bias(LEMMA2_P, G), 4) + 0.0 == pytest.approx(LEMMA2_TABLE[G], abs=1e-12)


def test_bias_equals_baseline_minus_p_and_has_closed_form_at_G2():
    p = np.linspace(0.01, 0.99, 99)
    for G in (2, 3, 5, 8, 16):
        np.testing.assert_allclose(bias(p, G), expected_baseline(p, G) - p, atol=1e-14)
    # G = 2: S means exactly one success, so p̂ = 1/2 and the bias is 1/2 − p.
    np.testing.assert_allclose(bias(p, 2), 0.5 - p, atol=1e-15)


def test_theorem1_sign_pattern_on_dense_grid():
    p = np.linspace(0.0005, 0.9995, 1999)  # includes p = 0.5 exactly
    G = np.array([*range(2, 33), 64, 128, 256, 512, 1024])[:, None]
    b = bias(p, G)
    assert np.all(np.isfinite(b))
    np.testing.assert_array_equal(np.sign(b), np.broadcast_to(np.sign(0.5 - p), b.shape))
    assert np.all(bias(0.5, G) == 0.0)


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-12, 1 - 1e-12), st.integers(2, 1024))
def test_symmetry_under_p_to_one_minus_p(p, G):
    assert bias(1 - p, G) == pytest.approx(-bias(p, G), rel=1e-6, abs=1e-15)
    assert expected_baseline(1 - p, G) == pytest.approx(1 - expected_baseline(p, G), rel=1e-6, abs=1e-12)
    assert p_degenerate(1 - p, G) == pytest.approx(p_degenerate(p, G), rel=1e-6)


def test_theorem2_hand_computed():
    # G = 4, p = 1/4, ε → 0: P(R ≥ 2 | 1 ≤ R ≤ 3) = (54 + 12) / (256 − 81 − 1) = 66/174
    assert prob_misestimate(0.25, 4) == pytest.approx(66 / 174, rel=1e-12)
    # easy side, p = 3/4, ε = 0.1: p̂ < 0.65 ⇔ R ≤ 2: (12 + 54)/174 by symmetry
    assert prob_misestimate(0.75, 4, 0.1) == pytest.approx(66 / 174, rel=1e-12)
    # ε = 0.3 at p = 0.25: p̂ > 0.55 ⇔ R = 3: 12/174
    assert prob_misestimate(0.25, 4, 0.3) == pytest.approx(12 / 174, rel=1e-12)
    # ε beyond the largest possible error: probability 0
    assert prob_misestimate(0.25, 4, 0.6) == 0.0


def test_corollary3_probability_exactly_one_below_one_over_G():
    for G in (2, 3, 8, 64, 1024):
        p = np.linspace(1e-9, 1 / G, 200, endpoint=False)
        assert np.all(prob_misestimate(p, G) == 1.0)
        assert np.all(prob_misestimate(1 - p, G) == 1.0)  # over-estimation for p > (G−1)/G
    assert prob_misestimate(1.5 / 8, 8) < 1.0


@pytest.mark.parametrize("G", range(2, 9))
def test_corollary1_bounds(G):
    assert interval_average(G, 0.0, 0.5) > 0.63
    assert interval_average(G, 0.5, 1.0) > 0.63
    assert interval_average(G, 0.0, 0.25) > 0.78
    assert interval_average(G, 0.75, 1.0) > 0.78
    assert interval_average(G, 0.0, 0.125) == 1.0
    assert interval_average(G, 0.875, 1.0) == 1.0


def test_corollary2_bound_and_poisson_limit():
    # (1/2)(1 + ∫_1^2 h), h(x) = 1 − x/(e^x − 1)
    limit = 0.5 * (1.0 + integrate.quad(lambda x: 1.0 - x / np.expm1(x), 1.0, 2.0)[0])
    assert poisson_limit_average(2.0) == pytest.approx(limit, abs=1e-12)
    assert limit > 0.78
    G = np.arange(6, 41)
    assert np.all(interval_average(G, 0.0, 2.0 / G) > 0.78)
    assert np.all(interval_average(G, 1.0 - 2.0 / G, 1.0) > 0.78)
    assert interval_average(3, 0.0, 2.0 / 3) < 0.78  # the bound needs G ≥ 6 (3 fails, 4–5 happen to hold)
    assert interval_average(1024, 0.0, 2.0 / 1024) == pytest.approx(limit, abs=1e-3)


@pytest.mark.parametrize(
    ("G", "lo", "hi", "direction"),
    [(8, 0.0, 0.5, "auto"), (5, 0.1, 0.9, "auto"), (7, 0.2, 0.6, "under"), (16, 0.3, 1.0, "over")],
)
def test_interval_average_matches_fine_midpoint_rule(G, lo, hi, direction):
    n = 200_000
    p = lo + (np.arange(n) + 0.5) * (hi - lo) / n
    riemann = prob_misestimate(p, G, 0.0, direction).mean()
    assert interval_average(G, lo, hi, direction) == pytest.approx(riemann, abs=2e-5)


def test_stability_at_G_1024_near_zero_and_one():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    G = 1024
    for p in (1e-9, 1 - 1e-9):
        P = mpmath.mpf(p)  # the float's exact value
        A = 1 - (1 - P) ** G - P**G
        ref_baseline = (P - P**G) / A
        ref_bias = (P * (1 - P) ** G + P ** (G + 1) - P**G) / A
        assert expected_baseline(p, G) == pytest.approx(float(ref_baseline), rel=1e-9)
        assert bias(p, G) == pytest.approx(float(ref_bias), rel=1e-6)
        assert p_degenerate(p, G) == pytest.approx(float((1 - P) ** G + P**G), rel=1e-12)
        assert prob_misestimate(p, G) == 1.0
    assert bias(1e-9, G) > 0 > bias(1 - 1e-9, G)
    # the endpoints return the limits 1/G and −1/G
    np.testing.assert_allclose(bias([0.0, 1.0], G), [1 / G, -1 / G], rtol=1e-12)


def test_bad_inputs_are_rejected_with_the_name():
    with pytest.raises(ValueError, match="p must lie in"):
        bias(1.5, 8)
    with pytest.raises(ValueError, match=r"G .* integer ≥ 2"):
        bias(0.3, 1)
    with pytest.raises(ValueError, match=r"G .* integer ≥ 2"):
        bias(0.3, 2.5)
    with pytest.raises(ValueError, match="direction"):
        prob_misestimate(0.3, 8, direction="sideways")
    with pytest.raises(ValueError, match="eps"):
        prob_misestimate(0.3, 8, eps=-0.1)


MC_P = np.array([0.03, 0.11, 0.3, 0.5, 0.62, 0.9, 0.985])
MC_G = np.array([2, 3, 5, 8, 16, 64])[:, None]


def _within(est, exact, n=None, k=4.0):
    """|MC − exact| ≤ k standard errors (≤ 1e-12 where the estimate has no spread). For a frequency over n
    draws the SE under the exact value is used too: a rare event may simply not have occurred."""
    se = est.se if n is None else np.maximum(est.se, np.sqrt(exact * (1 - exact) / n))
    ok = np.isfinite(est.value)
    diff = np.abs(est.value - exact)[ok]
    return np.all(diff <= k * se[ok] + 1e-12), np.max(diff / np.maximum(se[ok], 1e-300))


@pytest.mark.parametrize(("eps", "direction"), [(0.0, "auto"), (0.07, "auto"), (0.0, "under"), (0.05, "over")])
def test_exact_functions_agree_with_monte_carlo(eps, direction):
    mc = monte_carlo(MC_P, MC_G, n_groups=100_000, eps=eps, direction=direction, seed=11)
    n_update = mc.n_groups * (1 - p_degenerate(MC_P, MC_G))  # expected number of non-degenerate groups
    for name, est, exact, n in [
        ("p_degenerate", mc.p_degenerate, p_degenerate(MC_P, MC_G), mc.n_groups),
        ("expected_baseline", mc.expected_baseline, expected_baseline(MC_P, MC_G), None),
        ("bias", mc.bias, bias(MC_P, MC_G), None),
        ("prob_misestimate", mc.prob_misestimate, prob_misestimate(MC_P, MC_G, eps, direction), n_update),
    ]:
        ok, worst = _within(est, exact, n)
        assert ok, f"{name}: worst deviation {worst:.2f} SE"
