"""Rectified baseline c·p̂ and the λ_scale range of HA-DW (spec §2: Lemma 1, Theorem 3).

c* makes the rectified baseline unbiased given S; Lemma 1 gives a range (c_low, c_high) that, with
probability ≥ 1 − δ, keeps E[c p̂ | S] within ε of the unknown p using only the observed p̂; Theorem 3 turns
that range into a range for λ_scale in Φ = λ_scale · exp(D·M).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize

from hadw.theory.binary import check_p_G, log_p_and_1mp, p_nondegenerate


def debias_constant(p: ArrayLike, G: ArrayLike) -> np.ndarray:
    """c* = p / E[p̂ | S] = (1 − (1−p)^G − p^G) / (1 − p^{G−1}); tends to 0 as p → 0 and G/(G−1) as p → 1."""
    p, G = check_p_G(p, G)
    log_p, _ = log_p_and_1mp(p)
    return p_nondegenerate(p, G) / -np.expm1((G - 1) * log_p)


def eps_delta(G: ArrayLike, Delta: ArrayLike, delta: ArrayLike) -> np.ndarray:
    """ε_δ = sqrt( log(2 / (δ (1 − (1−Δ)^G − Δ^G))) / (2G) ): |p̂ − p| < ε_δ with prob. ≥ 1 − δ given S,
    for any p ∈ [Δ, 1−Δ] (Hoeffding, divided by the worst-case P(S))."""
    Delta, delta = np.asarray(Delta, float), np.asarray(delta, float)
    if np.any((Delta <= 0) | (Delta > 0.5)):
        raise ValueError(f"Delta must lie in (0, 1/2]; got {Delta}")
    if np.any((delta <= 0) | (delta >= 1)):
        raise ValueError(f"delta must lie in (0, 1); got {delta}")
    Delta, G = check_p_G(Delta, G)
    return np.sqrt(np.log(2.0 / (delta * p_nondegenerate(Delta, G))) / (2.0 * G))


class CBounds(NamedTuple):
    """Lemma 1's range for c, the interval I it was optimised over, and ε_δ (arrays, broadcast shape).
    Where I is empty all fields but eps_delta are NaN; c_low ≥ c_high means no c is certified."""

    c_low: np.ndarray
    c_high: np.ndarray
    I_lo: np.ndarray
    I_hi: np.ndarray
    eps_delta: np.ndarray


def _extremum(fun, lo: float, hi: float, maximise: bool, n_grid: int = 257) -> float:
    """Global max/min of a smooth 1-d function on [lo, hi]: dense grid, then bounded Brent around the best."""
    sign = -1.0 if maximise else 1.0
    grid = np.linspace(lo, hi, n_grid)
    values = sign * fun(grid)
    i = int(np.argmin(values))
    best = values[i]
    left, right = grid[max(i - 1, 0)], grid[min(i + 1, n_grid - 1)]
    if right > left:
        res = optimize.minimize_scalar(
            lambda x: sign * float(fun(x)), bounds=(left, right), method="bounded", options={"xatol": 1e-12}
        )
        best = min(best, res.fun)
    return sign * best


def _c_bounds_one(p_hat: float, G: int, Delta: float, delta: float, eps: float):
    e_d = float(eps_delta(G, Delta, delta))
    lo, hi = max(p_hat - e_d, Delta), min(p_hat + e_d, 1.0 - Delta)
    if lo > hi:
        return np.nan, np.nan, np.nan, np.nan, e_d
    c_star = lambda p: debias_constant(p, G)
    c_low = _extremum(lambda p: (p - eps) / p * c_star(p), lo, hi, maximise=True)
    c_high = _extremum(lambda p: (p + eps) / p * c_star(p), lo, hi, maximise=False)
    return c_low, c_high, lo, hi, e_d


def c_bounds(
    p_hat: ArrayLike,
    G: ArrayLike,
    Delta: ArrayLike,
    delta: ArrayLike,
    eps: ArrayLike,
) -> CBounds:
    """Lemma 1: c_low = sup_{p∈I} (p−ε) c*(p) / p,  c_high = inf_{p∈I} (p+ε) c*(p) / p,
    with I = [p̂ − ε_δ, p̂ + ε_δ] ∩ [Δ, 1−Δ] (note (p±ε)A(p)/(p(1−p^{G−1})) = (p±ε) c*(p)/p).

    Any c ∈ (c_low, c_high) gives E[c p̂ | S] ∈ (p − ε, p + ε) with probability ≥ 1 − δ given S. Found by
    bounded optimisation over I (grid + Brent). Broadcasts over all arguments (one optimisation per element).
    """
    if np.any(np.asarray(eps, float) <= 0):
        raise ValueError(f"eps must be > 0; got {eps}")
    args = np.broadcast_arrays(
        np.asarray(p_hat, float),
        np.asarray(G),
        np.asarray(Delta, float),
        np.asarray(delta, float),
        np.asarray(eps, float),
    )
    check_p_G(args[0], args[1])
    rows = [
        _c_bounds_one(float(ph), int(g), float(D), float(d), float(e))
        for ph, g, D, d, e in zip(*(a.ravel() for a in args), strict=True)
    ]
    cols = np.asarray(rows, dtype=float).reshape(*args[0].shape, 5)
    return CBounds(*(cols[..., j] for j in range(5)))


class LambdaInterval(NamedTuple):
    """Theorem 3's open λ_scale ranges for a correct (r = 1) and an incorrect (r = 0) response, and the
    range valid for both (lo ≥ hi means empty). D_correct / D_incorrect are the signs D_{t,i}; M = |p̂ − C|."""

    correct_lo: np.ndarray
    correct_hi: np.ndarray
    incorrect_lo: np.ndarray
    incorrect_hi: np.ndarray
    both_lo: np.ndarray
    both_hi: np.ndarray
    c_low: np.ndarray
    c_high: np.ndarray
    D_correct: np.ndarray
    D_incorrect: np.ndarray
    M: np.ndarray


def lambda_interval(
    p_hat: ArrayLike,
    anchor: ArrayLike,
    G: ArrayLike,
    Delta: ArrayLike,
    delta: ArrayLike,
    eps: ArrayLike,
) -> LambdaInterval:
    """Theorem 3: λ_scale such that Â·Φ equals the rectified advantage r − c p̂ for some c ∈ (c_low, c_high),
    so |E[Â Φ | S] − A| < |E[Â | S] − A|.

    Φ = λ exp(D M), M = |p̂ − C|, D = −sgn(Â) sgn(p̂ − C) with C the anchor.
      correct   (Â = 1 − p̂ > 0): λ e^{DM} = (1 − c p̂)/(1 − p̂) = 1 + (1 − c) p̂/(1 − p̂), c ∈ (c_low, c_high)
      incorrect (Â = −p̂ < 0):    λ e^{DM} = c
    The paper writes the union of the two; a single λ_scale serves both only on their intersection.
    """
    p_hat_a, anchor_a = np.broadcast_arrays(np.asarray(p_hat, float), np.asarray(anchor, float))
    if np.any((anchor_a < 0) | (anchor_a > 1)):
        raise ValueError(f"anchor must lie in [0, 1]; got {anchor}")
    if np.any((p_hat_a <= 0) | (p_hat_a >= 1)):
        raise ValueError(f"p_hat must lie in (0, 1) (non-degenerate group); got {p_hat}")
    cb = c_bounds(p_hat, G, Delta, delta, eps)
    p_hat_b, anchor_b = np.broadcast_arrays(p_hat_a, anchor_a, cb.c_low)[:2]
    M = np.abs(p_hat_b - anchor_b)
    sign_diff = np.sign(p_hat_b - anchor_b)
    D_correct, D_incorrect = -sign_diff, sign_diff
    odds = p_hat_b / (1.0 - p_hat_b)
    correct_lo = (1.0 + (1.0 - cb.c_high) * odds) / np.exp(D_correct * M)
    correct_hi = (1.0 + (1.0 - cb.c_low) * odds) / np.exp(D_correct * M)
    incorrect_lo = cb.c_low / np.exp(D_incorrect * M)
    incorrect_hi = cb.c_high / np.exp(D_incorrect * M)
    fields = (
        correct_lo,
        correct_hi,
        incorrect_lo,
        incorrect_hi,
        np.maximum(correct_lo, incorrect_lo),
        np.minimum(correct_hi, incorrect_hi),
        cb.c_low,
        cb.c_high,
        D_correct,
        D_incorrect,
        M,
    )
    return LambdaInterval(*(np.asarray(f, dtype=float) for f in fields))
