"""Continuous rewards (spec §2, Theorem 4 with the corrected 1/G)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, special, stats

from hadw.theory import (
    beta_rewards,
    continuous_bias,
    continuous_theory,
    monte_carlo_continuous,
    truncated_gaussian_rewards,
)
from hadw.theory import continuous as continuous_module


def test_uniform_rewards_match_the_range_distribution():
    # range of G uniforms: P(range ≤ σ) = G σ^{G−1} − (G−1) σ^G; symmetric about 1/2, so no bias
    G, sigma = np.array([2, 3, 8, 30]), 0.3
    res = continuous_theory(stats.uniform(), G, sigma)
    np.testing.assert_allclose(res.p_no_update, G * sigma ** (G - 1) - (G - 1) * sigma**G, rtol=1e-9)
    np.testing.assert_allclose(res.bias, 0.0, atol=1e-10)


@pytest.mark.parametrize(("a", "b"), [(2.0, 5.0), (0.16, 3.84), (0.5, 1.3)])
def test_beta_mirror_symmetry(a, b):
    # Beta(b, a) is Beta(a, b) mirrored about 1/2; mass piled up at 1 (b < 1) is the hard case numerically
    G = [2, 4, 8]
    np.testing.assert_allclose(
        continuous_bias(beta_rewards(b, a), G, 0.1), -continuous_bias(beta_rewards(a, b), G, 0.1), rtol=1e-9, atol=1e-15
    )


def test_beta_sign_and_symmetric_case():
    G = [2, 4, 8]
    b25 = continuous_bias(beta_rewards(2, 5), G, 0.1)
    assert np.all(b25 > 0)  # hard prompt (mean 2/7): advantage underestimated, as in the binary case
    np.testing.assert_allclose(continuous_bias(beta_rewards(3, 3), G, 0.1), 0.0, atol=1e-9)


def _nested_quad_reference(a: float, b: float, G: int, sigma: float) -> float:
    """Theorem 4 for Beta(a, b) straight from the formulas, in u-space with scipy quad."""
    d = stats.beta(a, b)
    q = lambda u: d.cdf(min(1.0, u + sigma)) - d.cdf(u)
    mq = lambda u: a / (a + b) * (special.betainc(a + 1, b, min(1.0, u + sigma)) - special.betainc(a + 1, b, u))
    kw = {"limit": 200, "epsabs": 1e-13, "epsrel": 1e-11}
    p_no = G * integrate.quad(lambda u: d.pdf(u) * q(u) ** (G - 1), 0, 1, **kw)[0]
    mean_no = integrate.quad(lambda u: d.pdf(u) * (u * q(u) + (G - 1) * mq(u)) * q(u) ** (G - 2), 0, 1, **kw)[0]
    p = a / (a + b)
    return (p - mean_no) / (1 - p_no) - p


@pytest.mark.parametrize(("a", "b", "G"), [(2.0, 5.0, 2), (0.7, 3.0, 4), (1.5, 1.2, 8)])
def test_beta_matches_nested_quadrature(a, b, G):
    assert continuous_bias(beta_rewards(a, b), G, 0.15) == pytest.approx(
        _nested_quad_reference(a, b, G, 0.15), abs=1e-9
    )


def test_generic_path_agrees_with_closed_forms(monkeypatch):
    cases = [beta_rewards(2, 5), beta_rewards(0.6, 1.4), truncated_gaussian_rewards(0.3, 0.2)]
    closed = [continuous_theory(d, [2, 4], 0.2) for d in cases]
    monkeypatch.setattr(continuous_module, "PARTIAL_MOMENTS", {})  # force quadrature of F⁻¹
    for d, ref in zip(cases, closed, strict=True):
        res = continuous_theory(d, [2, 4], 0.2)
        np.testing.assert_allclose(res.bias, ref.bias, rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(res.p_no_update, ref.p_no_update, rtol=1e-8)


@pytest.mark.parametrize(
    ("rewards", "G", "sigma"),
    [
        (beta_rewards(2, 5), 2, 0.2),
        (beta_rewards(2, 5), 4, 0.2),
        (beta_rewards(0.5, 2), 3, 0.15),
        (truncated_gaussian_rewards(0.3, 0.2), 4, 0.2),
        (stats.triang(0.3), 3, 0.2),  # no closed form: generic quadrature path
    ],
)
def test_theorem4_agrees_with_simulation(rewards, G, sigma):
    exact = continuous_theory(rewards, G, sigma)
    mc = monte_carlo_continuous(rewards, G, sigma, n_groups=200_000, seed=5)
    se_no = np.sqrt(exact.p_no_update * (1 - exact.p_no_update) / mc.n_groups)
    assert abs(mc.p_no_update.value - exact.p_no_update) <= 4 * se_no
    assert abs(mc.bias.value - exact.bias) <= 4 * mc.bias.se
    assert abs(mc.expected_baseline.value - exact.expected_baseline) <= 4 * mc.expected_baseline.se


def test_simulation_rejects_the_formula_as_printed():
    """The paper prints E[p̂ 1{S^c}] without the 1/G; that version is far outside the simulation's error."""
    rewards, G, sigma = beta_rewards(2, 5), 4, 0.2
    exact = continuous_theory(rewards, G, sigma)
    mean_no_update = exact.mean - exact.expected_baseline * (1 - exact.p_no_update)  # E[p̂ 1{S^c}]
    printed_baseline = (exact.mean - G * mean_no_update) / (1 - exact.p_no_update)
    mc = monte_carlo_continuous(rewards, G, sigma, n_groups=200_000, seed=6)
    assert abs(mc.expected_baseline.value - exact.expected_baseline) <= 4 * mc.expected_baseline.se
    assert abs(mc.expected_baseline.value - printed_baseline) > 20 * mc.expected_baseline.se


def test_bad_distributions_and_sigma_are_rejected():
    with pytest.raises(ValueError, match="supported inside"):
        continuous_bias(stats.norm(0.5, 0.1), 4, 0.1)
    with pytest.raises(TypeError, match="frozen scipy"):
        continuous_bias("beta", 4, 0.1)
    with pytest.raises(ValueError, match="sigma"):
        continuous_bias(beta_rewards(2, 2), 4, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        beta_rewards(0, 1)
