"""Continuous rewards in [0, 1] (spec §2, Theorem 4, with the corrected 1/G; Corollaries 4–5).

G i.i.d. rewards with CDF F; a group updates on S_σ = {max r − min r > σ}. With u⁺ = min(1, u + σ),
q(u) = F(u⁺) − F(u) and m(u) q(u) = ∫_u^{u⁺} x dF(x):
    P(S_σ^c)        = G ∫ q(u)^{G−1} dF(u)                       (the minimum is u, the others in [u, u⁺])
    E[p̂ 1{S_σ^c}]   = ∫ (u + (G−1) m(u)) q(u)^{G−1} dF(u)        (= (1/G)·Σ of the group, times the density)
    E[p̂ | S_σ]      = (p − E[p̂ 1{S_σ^c}]) / P(S_σ),    bias = E[p̂ | S_σ] − p = A − E[Â | S_σ].
The sign convention matches `binary.bias` (positive = advantage underestimated); the paper's Theorem 4 states
E[Â − A | S_σ] = p − E[p̂ | S_σ], i.e. minus this value.

Integrals are taken in w = F(u) (so u = F⁻¹(w)): the integrand is bounded even where the density is not
(Beta with α < 1), and ∫_u^{u⁺} x dF = ∫_{F(u)}^{F(u⁺)} F⁻¹(w) dw. Composite Gauss–Legendre in w, panels
doubled until the result stops changing (relative 1e-9); everything is vectorised over nodes and over G.
Panels are graded towards 0, 1 and the kink of q, so densities that vanish or blow up at an end (Beta with
α or β < 1) still converge fast; results agree with nested adaptive quadrature to ~1e-13.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import special, stats

_ORDER = 16
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(_ORDER)  # on [−1, 1]


def beta_rewards(alpha: float, beta: float):
    """Beta(α, β) rewards on [0, 1] (Corollary 4); mean α / (α + β)."""
    if alpha <= 0 or beta <= 0:
        raise ValueError(f"Beta rewards need alpha > 0 and beta > 0; got alpha={alpha}, beta={beta}")
    return stats.beta(alpha, beta)


def beta_from_mean(mean: float, concentration: float):
    """Beta rewards with the given mean and concentration κ = α + β."""
    if not 0 < mean < 1 or concentration <= 0:
        raise ValueError(f"need 0 < mean < 1 and concentration > 0; got {mean}, {concentration}")
    return beta_rewards(mean * concentration, (1.0 - mean) * concentration)


def truncated_gaussian_rewards(mu: float, xi: float):
    """N(μ, ξ²) conditioned on [0, 1] (Corollary 5)."""
    if xi <= 0:
        raise ValueError(f"truncated Gaussian rewards need xi > 0; got {xi}")
    return stats.truncnorm((0.0 - mu) / xi, (1.0 - mu) / xi, loc=mu, scale=xi)


def check_rewards(rewards) -> None:
    """A frozen scipy continuous distribution supported inside [0, 1]."""
    if not isinstance(getattr(rewards, "dist", None), stats.rv_continuous):
        raise TypeError(f"rewards must be a frozen scipy.stats continuous distribution; got {type(rewards)}")
    lo, hi = rewards.support()
    if lo < 0 or hi > 1:
        raise ValueError(f"rewards must be supported inside [0, 1]; {rewards.dist.name} has support [{lo}, {hi}]")


def _gauss_legendre(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the order-16 rule on each panel [edges[..., j], edges[..., j+1]] (last axis)."""
    half = 0.5 * np.diff(edges, axis=-1)[..., None]
    mid = 0.5 * (edges[..., 1:] + edges[..., :-1])[..., None]
    nodes = (mid + half * _NODES).reshape(*edges.shape[:-1], -1)
    weights = (half * _WEIGHTS).reshape(*edges.shape[:-1], -1)
    return nodes, weights


def _graded_edges(n_panels: int, kink: float) -> np.ndarray:
    """n_panels equal panels on [0, 1] plus an edge at the kink of q (where u + σ reaches 1); the panels
    touching 0, 1 and the kink are split geometrically (ratio 1/4, 18 levels) towards that point. Algebraic
    singularities sit exactly there (F⁻¹ at the ends; F(u + σ) as u + σ → 1 when the density blows up at 1),
    and geometric grading keeps Gauss–Legendre converging fast on them."""
    edges = np.unique(np.append(np.linspace(0.0, 1.0, n_panels + 1), kink))
    refine = 0.25 ** np.arange(1, 19)
    extra = []
    for point in {0.0, float(kink), 1.0}:
        i = int(np.searchsorted(edges, point))
        for neighbour in (edges[i - 1] if i > 0 else None, edges[i + 1] if i + 1 < edges.size else None):
            if neighbour is not None:
                extra.append(point + (neighbour - point) * refine)
    return np.unique(np.concatenate([edges, *extra]))


def _shapes_loc_scale(rewards) -> tuple[tuple[float, ...], float, float]:
    shapes, loc, scale = rewards.dist._parse_args(*rewards.args, **rewards.kwds)
    return tuple(float(s) for s in shapes), float(loc), float(scale)


def _beta_moment(y: np.ndarray, a: float, b: float) -> np.ndarray:
    return a / (a + b) * special.betainc(a + 1.0, b, np.clip(y, 0.0, 1.0))


def _truncnorm_moment(z: np.ndarray, a: float, b: float) -> np.ndarray:
    # ∫_a^z t φ(t) dt / (Φ(b) − Φ(a)); the mass is taken from the tail that keeps it accurate
    mass = special.ndtr(-a) - special.ndtr(-b) if a > 0 else special.ndtr(b) - special.ndtr(a)
    return (stats.norm.pdf(a) - stats.norm.pdf(np.clip(z, a, b))) / mass


def _uniform_moment(y: np.ndarray) -> np.ndarray:
    return 0.5 * np.clip(y, 0.0, 1.0) ** 2


# Closed-form partial first moments K(y) = ∫_{-∞}^y t dF(t) of the standardised families (Corollaries 4–5);
# other distributions fall back to quadrature of F⁻¹.
PARTIAL_MOMENTS = {"beta": _beta_moment, "truncnorm": _truncnorm_moment, "uniform": _uniform_moment}


def excess_moment(rewards, u: np.ndarray, v: np.ndarray, w: np.ndarray, w_v: np.ndarray) -> np.ndarray:
    """∫_u^v (x − u) dF(x), given w = F(u) and w_v = F(v); m(u) q(u) = u q(u) + this, for v = u⁺.

    Measured from u so that it stays right where u has rounded to 1 but w = F(u) has not (mass piled up
    at 1): there the excess is ~0 and q comes from w alone.
    """
    moment = PARTIAL_MOMENTS.get(rewards.dist.name)
    if moment is None:  # ∫_w^{w_v} (F⁻¹(t) − u) dt, one 16-point panel per node (F⁻¹ monotone, bounded)
        nodes, weights = _gauss_legendre(np.stack([w, w_v], axis=-1))
        return np.sum(weights * (rewards.ppf(nodes) - u[..., None]), axis=-1)
    shapes, loc, scale = _shapes_loc_scale(rewards)
    # X = loc + scale·Y  ⇒  ∫_u^v (x − u) dF = (loc − u)(F(v) − F(u)) + scale (K(y_v) − K(y_u)), with F and K
    # both taken at the (rounded) u so that the two terms cancel consistently
    y_u, y_v = (u - loc) / scale, (v - loc) / scale
    mass = rewards.cdf(v) - rewards.cdf(u)
    return np.maximum((loc - u) * mass + scale * (moment(y_v, *shapes) - moment(y_u, *shapes)), 0.0)


def _no_update_terms(rewards, G: np.ndarray, sigma: float, n_panels: int) -> tuple[np.ndarray, np.ndarray]:
    """(P(S_σ^c), E[p̂ 1{S_σ^c}]) for each G, with n_panels panels in w."""
    w, w_weights = _gauss_legendre(_graded_edges(n_panels, float(rewards.cdf(1.0 - sigma))))
    with warnings.catch_warnings():
        # boost's inverse CDF may give up within ~1e-10 of an end of [0, 1] in w, where u is within ~1e-20
        # of 0 or 1 anyway: the integrand cannot tell.
        warnings.simplefilter("ignore", RuntimeWarning)
        u = rewards.ppf(w)
    u_plus = np.minimum(1.0, u + sigma)
    w_plus = rewards.cdf(u_plus)
    q = np.clip(w_plus - w, 0.0, 1.0)
    mq = u * q + excess_moment(rewards, u, u_plus, w, w_plus)  # m(u) q(u)
    Gc = G[:, None]
    q_pow = q ** (Gc - 2)  # q^{G−2}; 0^0 = 1 for G = 2
    p_no_update = np.sum(Gc * q_pow * q * w_weights, axis=-1)
    mean_no_update = np.sum((u * q_pow * q + (Gc - 1) * q_pow * mq) * w_weights, axis=-1)
    return p_no_update, mean_no_update


class ContinuousBias(NamedTuple):
    """Theorem 4 for one reward distribution, arrays over G."""

    mean: float  # p = E[r]
    p_no_update: np.ndarray  # P(S_σ^c)
    expected_baseline: np.ndarray  # E[p̂ | S_σ]
    bias: np.ndarray  # E[p̂ | S_σ] − p  (positive = underestimated advantage)


def continuous_theory(rewards, G: ArrayLike, sigma: float, rtol: float = 1e-9) -> ContinuousBias:
    """Theorem 4: P(S_σ^c), E[p̂ | S_σ] and the bias for rewards ~ `rewards` (frozen scipy distribution on
    [0, 1]), group sizes G (int or array, ≥ 2) and threshold σ ∈ [0, 1)."""
    check_rewards(rewards)
    if not 0 <= sigma < 1:
        raise ValueError(f"sigma must lie in [0, 1) (σ ≥ 1 never updates); got {sigma}")
    G_arr = np.atleast_1d(np.asarray(G))
    if np.any(G_arr.astype(float) != np.round(G_arr.astype(float))) or np.any(G_arr < 2):
        raise ValueError(f"G (group size) must be an integer ≥ 2; got {G_arr.tolist()}")
    G_f = G_arr.astype(float).ravel()
    n_panels = 32
    previous = _no_update_terms(rewards, G_f, sigma, n_panels)
    while n_panels < 2048:  # double until both terms agree to rtol (+1e-15 absolute) between refinements
        n_panels *= 2
        current = _no_update_terms(rewards, G_f, sigma, n_panels)
        converged = all(
            np.all(np.abs(c - p) <= rtol * np.abs(c) + 1e-15) for c, p in zip(current, previous, strict=True)
        )
        previous = current
        if converged:
            break
    p_no_update, mean_no_update = previous
    p = float(rewards.mean())
    # E[p̂|S] − p = (p P(S^c) − E[p̂ 1{S^c}]) / P(S): no cancellation when P(S^c) is tiny.
    bias = (p * p_no_update - mean_no_update) / (1.0 - p_no_update)
    baseline = p + bias
    shape = np.shape(G)
    return ContinuousBias(p, p_no_update.reshape(shape), baseline.reshape(shape), bias.reshape(shape))


def continuous_bias(rewards, G: ArrayLike, sigma: float) -> np.ndarray:
    """Theorem 4's bias A − E[Â | S_σ] = E[p̂ | S_σ] − p (see `continuous_theory`)."""
    return continuous_theory(rewards, G, sigma).bias
