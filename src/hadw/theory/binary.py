"""Binary rewards: the exact bias of the group-mean baseline (spec §2: Lemma 2, Theorems 1–2, Corollaries 1–3).

Rewards r_i ~ Bernoulli(p) i.i.d., R = Σ r_i ~ Binomial(G, p), p̂ = R / G, and everything is conditioned on the
non-degenerate event S = {1 ≤ R ≤ G−1} (the only groups that produce a gradient).

Every public function broadcasts p against G (numpy rules) and returns float64 arrays (0-d for scalars).

Numerics. Each quantity is symmetric under p ↔ 1−p (the bias flips sign), so it is evaluated at
q = min(p, 1−p) ≤ 1/2, where (1−q)^G ≥ q^G and the denominator 1 − (1−q)^G − q^G does not cancel. Powers are
exp(G·log …) with log1p / expm1, which keeps G up to 1024 and p within 1e-9 of 0 or 1 accurate. At p = 0 or 1
(where S has probability zero) the functions return their limits, by evaluating at q = the smallest normal float.
"""

from __future__ import annotations

import itertools
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import integrate, stats

Direction = Literal["auto", "under", "over"]
DIRECTIONS = ("auto", "under", "over")

# G·(p ± ε) this close to an integer counts as that integer, so decimal inputs such as p = 0.7, G = 10 sit on
# the boundary k = 7 as written instead of one float ulp to either side.
_SNAP = 1e-9


def check_p_G(p: ArrayLike, G: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Validate and broadcast (p, G); G comes back as float64 holding integers ≥ 2."""
    p = np.asarray(p, dtype=float)
    G_arr = np.asarray(G)
    if p.size and (not np.all(np.isfinite(p)) or np.any((p < 0) | (p > 1))):
        raise ValueError(f"p must lie in [0, 1]; got values in [{np.nanmin(p)}, {np.nanmax(p)}]")
    G_float = G_arr.astype(float)
    if G_arr.size and (np.any(G_float != np.round(G_float)) or np.any(G_float < 2)):
        raise ValueError(f"G (group size) must be an integer ≥ 2; got {G_arr.ravel()[:5].tolist()}")
    return tuple(np.broadcast_arrays(p, G_float))  # type: ignore[return-value]


def _fold(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(is_easy, log q, log(1−q)) with q = min(p, 1−p) clamped away from 0. 1−p is exact for p ≥ 1/2."""
    easy = p > 0.5
    q = np.maximum(np.where(easy, 1.0 - p, p), np.finfo(float).tiny)
    return easy, np.log(q), np.log1p(-q)


def _nondegenerate(log_q: np.ndarray, log_1mq: np.ndarray, G: np.ndarray) -> np.ndarray:
    """P(S) = 1 − (1−q)^G − q^G for q ≤ 1/2 (symmetric in p ↔ 1−p)."""
    return -np.expm1(G * log_1mq) - np.exp(G * log_q)


def log_p_and_1mp(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log p, log(1−p)), both accurate near 0 and 1 (clamped like `_fold`)."""
    easy, log_q, log_1mq = _fold(p)
    return np.where(easy, log_1mq, log_q), np.where(easy, log_q, log_1mq)


def p_nondegenerate(p: ArrayLike, G: ArrayLike) -> np.ndarray:
    """P(S) = 1 − (1−p)^G − p^G, the probability that a group produces a gradient."""
    p, G = check_p_G(p, G)
    _, log_q, log_1mq = _fold(p)
    return _nondegenerate(log_q, log_1mq, G)


def p_degenerate(p: ArrayLike, G: ArrayLike) -> np.ndarray:
    """P(R ∈ {0, G}) = (1−p)^G + p^G: all-wrong or all-right groups (Â = 0, no gradient)."""
    p, G = check_p_G(p, G)
    _, log_q, log_1mq = _fold(p)
    return np.exp(G * log_1mq) + np.exp(G * log_q)


def expected_baseline(p: ArrayLike, G: ArrayLike) -> np.ndarray:
    """E[p̂ | S] = (p − p^G) / (1 − (1−p)^G − p^G). Tends to 1/G as p → 0 and 1 − 1/G as p → 1."""
    p, G = check_p_G(p, G)
    easy, log_q, log_1mq = _fold(p)
    # (q − q^G) = q (1 − q^{G−1}); the folded value is E[p̂|S] at q, and E at p = 1 − E at 1−p.
    at_q = np.exp(log_q) * -np.expm1((G - 1) * log_q) / _nondegenerate(log_q, log_1mq, G)
    return np.where(easy, 1.0 - at_q, at_q)


def bias(p: ArrayLike, G: ArrayLike) -> np.ndarray:
    """Lemma 2: A − E[Â | S] = E[p̂ | S] − p = (p(1−p)^G + p^{G+1} − p^G) / (1 − (1−p)^G − p^G).

    Positive: the advantage is underestimated (hard prompt, p < 1/2); negative: overestimated (p > 1/2);
    zero iff p = 1/2 (Theorem 1). The numerator is evaluated as p(1−p)[(1−p)^{G−1} − p^{G−1}], which has the
    sign of 1/2 − p exactly and does not cancel.
    """
    p, G = check_p_G(p, G)
    easy, log_q, log_1mq = _fold(p)
    log_prefactor = log_q + G * log_1mq  # log[q (1−q)^G]
    gap = 0.0 - np.expm1((G - 1) * (log_q - log_1mq))  # 1 − (q/(1−q))^{G−1} ∈ [0, 1); +0 at p = 1/2
    at_q = np.exp(log_prefactor) * gap / _nondegenerate(log_q, log_1mq, G)
    return np.where(easy, -at_q, at_q)


def _snap(x: np.ndarray) -> np.ndarray:
    nearest = np.rint(x)
    return np.where(np.abs(x - nearest) <= _SNAP * np.maximum(1.0, np.abs(x)), nearest, x)


def _upper_tail(k: np.ndarray, G: np.ndarray, q: np.ndarray, log_1mq: np.ndarray) -> np.ndarray:
    """P(R > k) for R ~ Binomial(G, q), q ≤ 1/2; k = 0 via expm1 (binom.sf is accurate elsewhere)."""
    return np.where(k <= 0, -np.expm1(G * log_1mq), stats.binom.sf(np.maximum(k, 0), G, q))


def prob_count_given_S(p: ArrayLike, G: ArrayLike, a, b) -> np.ndarray:
    """P(a ≤ R ≤ b | S) for integer bounds (clipped to [1, G−1]); exactly 1 when the range covers S."""
    p, G = check_p_G(p, G)
    a = np.maximum(np.broadcast_to(a, p.shape), 1.0)
    b = np.minimum(np.broadcast_to(b, p.shape), G - 1)
    easy, log_q, log_1mq = _fold(p)
    # Reflect easy prompts: R ~ Bin(G, p) on [a, b]  ⇔  G − R ~ Bin(G, 1−p) on [G−b, G−a].
    lo = np.where(easy, G - b, a)
    hi = np.where(easy, G - a, b)
    q = np.exp(log_q)
    mass = _upper_tail(lo - 1, G, q, log_1mq) - _upper_tail(hi, G, q, log_1mq)
    prob = np.clip(mass / _nondegenerate(log_q, log_1mq, G), 0.0, 1.0)
    prob = np.where(a > b, 0.0, prob)
    return np.where((a <= 1) & (b >= G - 1), 1.0, prob)


def _bounds(p: np.ndarray, G: np.ndarray, eps: np.ndarray, direction: Direction):
    """Count range [a, b] of the mis-estimate event in `direction` (auto: under if p ≤ 1/2 else over)."""
    under = (p <= 0.5) if direction == "auto" else np.full(p.shape, direction == "under")
    a_under = np.floor(_snap(G * (p + eps))) + 1  # p̂ − p > ε  ⇔  R > G(p + ε)
    b_over = np.ceil(_snap(G * (p - eps))) - 1  # p − p̂ > ε  ⇔  R < G(p − ε)
    return np.where(under, a_under, 1.0), np.where(under, G - 1, b_over)


def prob_misestimate(
    p: ArrayLike,
    G: ArrayLike,
    eps: ArrayLike = 0.0,
    direction: Direction = "auto",
) -> np.ndarray:
    """Theorem 2: probability, given S, that Â misses A by more than ε in the direction of the bias.

    under: P(A − Â > ε | S) = P(p̂ − p > ε | S) = Σ_{k=⌊G(p+ε)⌋+1}^{G−1} C(G,k) p^k (1−p)^{G−k} / P(S)
    over:  P(Â − A > ε | S) = P(p − p̂ > ε | S) = Σ_{k=1}^{⌈G(p−ε)⌉−1} C(G,k) p^k (1−p)^{G−k} / P(S)
    auto:  under for p ≤ 1/2 (hard), over for p > 1/2 (easy).
    eps = 0 is the ε → 0⁺ limit (the floor/ceil are right-continuous there). Corollary 3: the under
    probability is exactly 1 for p < 1/G.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}; got {direction!r}")
    eps = np.asarray(eps, dtype=float)
    if np.any(eps < 0):
        raise ValueError(f"eps must be ≥ 0; got {eps.min()}")
    p, G = check_p_G(p, G)
    p, G, eps = np.broadcast_arrays(p, G, eps)
    a, b = _bounds(p, G, eps, direction)
    return prob_count_given_S(p, G, a, b)


def _interval_average_one(G: int, lo: float, hi: float, direction: Direction) -> float:
    """Uniform average over p ∈ [lo, hi] of the ε→0 mis-estimate probability, integrated piecewise."""
    cuts = {lo, hi, *(k / G for k in range(1, G) if lo < k / G < hi)}
    if direction == "auto" and lo < 0.5 < hi:
        cuts.add(0.5)
    cuts = sorted(cuts)
    total = 0.0
    for x0, x1 in itertools.pairwise(cuts):
        mid = 0.5 * (x0 + x1)
        # On (k/G, (k+1)/G) the count range is fixed: under ⇒ R ≥ k+1, over ⇒ R ≤ k.
        k = np.floor(G * mid)
        under = mid <= 0.5 if direction == "auto" else direction == "under"
        a, b = (k + 1, G - 1) if under else (1, k)
        if a <= 1 and b >= G - 1:
            total += x1 - x0  # Corollary 3: the event is sure on this piece
            continue
        piece, _ = integrate.quad(
            lambda x, a=a, b=b: float(prob_count_given_S(x, G, a, b)), x0, x1, epsabs=1e-13, epsrel=1e-11
        )
        total += piece
    return total / (hi - lo)


def interval_average(
    G: ArrayLike,
    lo: ArrayLike,
    hi: ArrayLike,
    direction: Direction = "auto",
) -> np.ndarray:
    """(1/(hi−lo)) ∫_lo^hi prob_misestimate(p, G, eps=0, direction) dp: the probability of a mis-estimate
    given S for p ~ Uniform[lo, hi] (Corollaries 1–2, paper Tables 4–6).

    The integrand is a ratio of polynomials between the breakpoints k/G (and 1/2 for `auto`), so each piece
    is integrated by adaptive quadrature (scipy quad) to ~1e-11. Broadcasts over G, lo, hi.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}; got {direction!r}")
    G_arr, lo_arr, hi_arr = np.broadcast_arrays(np.asarray(G), np.asarray(lo, float), np.asarray(hi, float))
    check_p_G(lo_arr, G_arr)
    check_p_G(hi_arr, G_arr)
    if np.any(lo_arr >= hi_arr):
        raise ValueError("interval_average needs lo < hi")
    out = [
        _interval_average_one(int(g), float(a), float(b), direction)
        for g, a, b in zip(G_arr.ravel(), lo_arr.ravel(), hi_arr.ravel(), strict=True)
    ]
    return np.asarray(out, dtype=float).reshape(G_arr.shape)


def poisson_limit_average(c: float) -> float:
    """lim_{G→∞} interval_average(G, 0, c/G, "under") for c ≥ 1 (Corollary 2's limit, c = 2 gives ≈ 0.78180).

    With p = x/G, R → Poisson(x) and P(R > x | R ≥ 1) = 1 on x < 1, h(x) = 1 − x/(e^x − 1) on [1, 2), ...;
    computed exactly as (1/c) ∫_0^c P(Pois(x) > ⌊x⌋ | Pois(x) ≥ 1) dx, piecewise on the integers.
    """
    if c < 1:
        return 1.0
    total = 1.0
    edges = [*range(1, int(np.floor(c)) + 1), c]
    for k, (x0, x1) in enumerate(itertools.pairwise(edges), start=1):
        tail = lambda x, k=k: stats.poisson.sf(k, x) / -np.expm1(-x)
        total += integrate.quad(tail, x0, x1, epsabs=1e-13)[0]
    return total / c
