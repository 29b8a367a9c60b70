"""Intervals over seeds: the mean with a Student-t or bootstrap interval, and the paired difference.

With 3–10 seeds per arm the t interval is the honest default (the bootstrap of so few values is too
narrow: it cannot see variance the sample did not show). Both come from scipy.stats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

METHODS = ("t", "bootstrap")
# Secondary tests `hadw compare --robust` reports beside the t interval (never in its place).
ROBUST_TESTS = ("none", "wilcoxon")


@dataclass(frozen=True)
class Interval:
    """mean of n values with a `confidence` interval [low, high]; low = high = mean when n = 1."""

    mean: float
    low: float
    high: float
    n: int
    std: float  # sample std (ddof = 1); 0 when n = 1
    confidence: float
    method: str

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def to_dict(self) -> dict:
        return asdict(self)


def _values(values: Sequence[float], what: str) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0:
        raise ValueError(f"{what}: no values")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what}: non-finite values {x.tolist()}")
    return x


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """mean ± t_{(1+c)/2, n−1} · s / √n (scipy.stats.t.interval); a point when n = 1 or s = 0."""
    x = _values(values, "t_interval")
    mean, n = float(x.mean()), x.size
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    if n == 1 or np.all(x == x[0]):  # no spread: the interval is the point
        return Interval(mean, mean, mean, n, std, confidence, "t")
    low, high = stats.t.interval(confidence, df=n - 1, loc=mean, scale=std / np.sqrt(n))
    return Interval(mean, float(low), float(high), n, std, confidence, "t")


def bootstrap_interval(
    values: Sequence[float], confidence: float = 0.95, resamples: int = 9999, seed: int = 0
) -> Interval:
    """Percentile bootstrap of the mean (scipy.stats.bootstrap); a point when n = 1 or all values equal."""
    x = _values(values, "bootstrap_interval")
    mean, n = float(x.mean()), x.size
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    if n == 1 or np.all(x == x[0]):  # no spread: the interval is the point
        return Interval(mean, mean, mean, n, std, confidence, "bootstrap")
    res = stats.bootstrap(
        (x,),
        np.mean,
        confidence_level=confidence,
        n_resamples=resamples,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    ci = res.confidence_interval
    return Interval(mean, float(ci.low), float(ci.high), n, std, confidence, "bootstrap")


def interval(values: Sequence[float], confidence: float = 0.95, method: str = "t") -> Interval:
    if method == "t":
        return t_interval(values, confidence)
    if method == "bootstrap":
        return bootstrap_interval(values, confidence)
    raise ValueError(f"unknown interval method {method!r}; allowed: {', '.join(METHODS)}")


@dataclass(frozen=True)
class PairedDifference:
    """treatment − baseline over the seeds both have: interval of the mean difference and a paired t-test."""

    diff: Interval
    seeds: list[int]
    p_value: float  # two-sided paired t-test (scipy.stats.ttest_rel); nan with < 2 pairs or zero spread
    wilcoxon_p: float | None = None  # --robust wilcoxon: wilcoxon_p of the same differences; None when not asked

    @property
    def mde(self) -> float:
        """The smallest true difference these n pairs detect with 80 % power at α = 0.05, given the observed SD
        of the differences (minimal_detectable_effect; inf with < 2 pairs)."""
        return minimal_detectable_effect(self.diff.n, self.diff.std)

    def to_dict(self) -> dict:
        out = {"diff": self.diff.to_dict(), "seeds": self.seeds, "p_value": self.p_value, "mde_80": self.mde}
        return out if self.wilcoxon_p is None else {**out, "wilcoxon_p": self.wilcoxon_p}


def paired_difference(
    treatment: dict[int, float],
    baseline: dict[int, float],
    confidence: float = 0.95,
    method: str = "t",
    robust: str = "none",
) -> PairedDifference:
    """Pair the two arms by seed (seed -> value) and take the interval of treatment − baseline. robust
    ("none" | "wilcoxon", ROBUST_TESTS): also the Wilcoxon signed-rank p-value of the differences (wilcoxon_p)."""
    seeds = sorted(set(treatment) & set(baseline))
    if not seeds:
        raise ValueError(f"paired_difference: no common seeds ({sorted(treatment)} vs {sorted(baseline)})")
    a = np.array([treatment[s] for s in seeds], dtype=float)
    b = np.array([baseline[s] for s in seeds], dtype=float)
    d = a - b
    p_value = float("nan")
    if d.size > 1 and not np.all(d == d[0]):
        p_value = float(stats.ttest_rel(a, b).pvalue)
    if robust not in ROBUST_TESTS:
        raise ValueError(f"unknown robust test {robust!r}; allowed: {', '.join(ROBUST_TESTS)}")
    robust_p = wilcoxon_p(d) if robust == "wilcoxon" else None
    return PairedDifference(interval(d, confidence, method), seeds, p_value, robust_p)


def wilcoxon_p(diffs: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p-value of "the differences are symmetric about 0" (scipy.stats.wilcoxon:
    exact for small n without ties, zero differences dropped as Wilcoxon did). A secondary check beside the t
    interval, robust to one far-out seed; nan with fewer than 2 non-zero differences."""
    d = _values(diffs, "wilcoxon_p")
    if np.count_nonzero(d) < 2:
        return float("nan")
    return float(stats.wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)


# ----------------------------------------------------------------------------------------------- power
# Power of the two-sided paired t-test the reports use: with n pairs whose differences have SD `sd`, a true mean
# difference `effect` gives the statistic a noncentral t distribution, df = n − 1, noncentrality effect·√n / sd.


def paired_power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Probability that a two-sided paired t-test at level alpha rejects "no difference" with n pairs."""
    if n < 2 or sd <= 0:
        return float("nan")
    df, nc = n - 1, abs(effect) * np.sqrt(n) / sd
    crit = stats.t.ppf(1 - alpha / 2, df)
    power = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
    if np.isnan(power):  # scipy's nct fails far in the tail (tiny df, large nc): the normal approximation there
        power = float(stats.norm.sf(crit - nc) + stats.norm.cdf(-crit - nc))
    return power


def minimal_detectable_effect(n: int, sd: float, power: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest |true difference| detected with probability `power` by n pairs of SD sd (inf for n < 2)."""
    if n < 2 or not sd > 0:
        return float("inf") if n < 2 else 0.0
    from scipy.optimize import brentq

    # power(crit + 5 standard errors) > 0.99 for every df: the root lies below it (and nct stays finite there)
    high = (stats.t.ppf(1 - alpha / 2, n - 1) + 5.0) * sd / np.sqrt(n)
    return float(brentq(lambda e: paired_power(e, sd, n, alpha) - power, 0.0, high))


def seeds_needed(effect: float, sd: float, power: float = 0.8, alpha: float = 0.05, cap: int = 10**6) -> float:
    """The fewest pairs (≥ 2) that detect a true difference `effect` with probability `power`; inf when
    effect = 0 or more than `cap` would be needed."""
    if effect == 0 or not sd > 0:
        return float("inf") if effect == 0 else 2.0
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    n = max(2, int((z * sd / abs(effect)) ** 2) - 1)  # the normal approximation, from just below
    if n > cap:
        return float("inf")
    while paired_power(effect, sd, n, alpha) < power:
        n += 1
    return float(n)


# ----------------------------------------------------------------------------------------- variance split
# A seed's paired difference d = Y_arm − Y_base is a mean over that seed's held-out problems, so its variance across
# seeds has two parts: training (what the two runs learned differs from seed to seed) and evaluation sampling (which
# problems were drawn, and at T > 0 which answers were sampled). The second is known from one run's per-problem
# scores alone, the variance of a mean over problems; the first is the rest. More problems shrink only the second,
# more seeds both.


def eval_sampling_variance(
    treatment: Sequence[float], baseline: Sequence[float], paired_by_problem: bool = True
) -> float:
    """The evaluation-sampling variance of one seed's mean difference, from its per-problem scores.

    treatment, baseline: [m_t], [m_b] per-problem mean scores (the mean of each problem's k samples). paired
    (the same problems in the same order, m_t = m_b = m): var(t_i − b_i) / m, sample variance (ddof 1), which
    keeps what the two arms share on a problem out; else var(t_i) / m_t + var(b_i) / m_b. nan with < 2 problems.
    """
    t = _values(treatment, "eval_sampling_variance")
    b = _values(baseline, "eval_sampling_variance")
    if paired_by_problem:
        if t.size != b.size:
            raise ValueError(f"eval_sampling_variance: paired by problem needs equal counts; got {t.size}, {b.size}")
        return float(np.var(t - b, ddof=1) / t.size) if t.size > 1 else float("nan")
    if t.size < 2 or b.size < 2:
        return float("nan")
    return float(np.var(t, ddof=1) / t.size + np.var(b, ddof=1) / b.size)


def projected_half_width(
    train: float, eval_var: float, n: int, problems_factor: float = 1.0, seeds_factor: float = 1.0,
    confidence: float = 0.95,
) -> float:  # fmt: skip
    """Half-width of the t interval of the mean paired difference with seeds_factor × n seeds, each evaluated on
    problems_factor × as many problems: t_{(1+c)/2, n'−1} · √((train + eval_var / problems_factor) / n'),
    n' = round(seeds_factor · n). train, eval_var: per-seed variances (variance_split). nan for n' < 2."""
    n_new = round(seeds_factor * n)
    if n_new < 2:
        return float("nan")
    var = max(train, 0.0) + eval_var / problems_factor
    return float(stats.t.ppf((1 + confidence) / 2, n_new - 1) * np.sqrt(var / n_new))


@dataclass(frozen=True)
class VarianceSplit:
    """The paired variance of arm − baseline over n seeds, split into evaluation sampling and training.

    total: sample variance (ddof 1) of the n per-seed differences; eval: the mean over seeds of each seed's
    eval_sampling_variance; train: total − eval floored at 0 (the estimate can fall below 0 by chance when
    training adds little). half_width: the t interval's now; half_width_2x_problems / _2x_seeds: what it would be
    with twice the held-out problems per seed / twice the seeds (projected_half_width)."""

    n: int
    problems: float  # held-out problems per seed and arm (mean over seeds)
    paired_by_problem: bool  # every seed's two arms scored the same problems
    total: float
    eval: float
    train: float
    confidence: float
    half_width: float
    half_width_2x_problems: float
    half_width_2x_seeds: float

    @property
    def eval_share(self) -> float:
        """The share of the paired variance that evaluation sampling explains (at most 1)."""
        return min(self.eval / self.total, 1.0) if self.total > 0 else float("nan")

    def to_dict(self) -> dict:
        return {**asdict(self), "eval_share": self.eval_share}


def variance_split(
    diffs: Sequence[float],
    eval_variances: Sequence[float],
    problems: float,
    paired_by_problem: bool = True,
    confidence: float = 0.95,
) -> VarianceSplit:
    """diffs: [n] per-seed paired differences; eval_variances: [n] each seed's eval_sampling_variance (same order);
    problems: held-out problems per seed. Needs n ≥ 2 (a variance over seeds)."""
    d = _values(diffs, "variance_split")
    v = _values(eval_variances, "variance_split eval variances")
    if d.size != v.size or d.size < 2:
        raise ValueError(f"variance_split: needs as many eval variances as differences, at least 2; got {d.size}, "
                         f"{v.size}")  # fmt: skip
    n, total, eval_var = d.size, float(np.var(d, ddof=1)), float(v.mean())
    train = max(total - eval_var, 0.0)
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1) * np.sqrt(total / n))
    return VarianceSplit(
        n, float(problems), paired_by_problem, total, eval_var, train, confidence, half,
        projected_half_width(train, eval_var, n, problems_factor=2, confidence=confidence),
        projected_half_width(train, eval_var, n, seeds_factor=2, confidence=confidence),
    )  # fmt: skip


# ----------------------------------------------------------------------------------------- confidence sequence
# `hadw compare --sequential` looks at the paired differences after every round of seeds and stops when they answer
# the question. A t interval read after every round covers less than its level (a look that happens to exclude 0
# ends the study: about 0.8 at 95 % over ten rounds); a confidence sequence covers the true mean at all looks at once.
# This one is the normal mixture over the standardised effect θ = μ / σ of the scale-invariant likelihood ratio
# (Lai 1976, "On confidence sequences", Ann. Statist. 4(2); Howard, Ramdas, McAuliffe and Sekhon 2021,
# "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann. Statist. 49(2); Wang and Ramdas 2023,
# "Anytime-valid t-tests and confidence sequences for Gaussian means with unknown variance"): exact for i.i.d.
# normal differences with unknown variance. With θ ~ N(0, τ²) the mixture martingale at μ is
#     M_n = (1 + nτ²)^(-1/2) · (A / (A − τ² S² / (1 + nτ²)))^(n/2),  S = Σ (d_i − μ), A = Σ (d_i − μ)²,
# and by Ville's inequality P(∃ n: M_n ≥ 1/α) ≤ α. {μ : M_n < 1/α} is the interval mean ± cs_half_width.
# τ = 1 (CS_PRIOR_SD) keeps it within ~1.7× the t interval from 10 to 60 pairs; it is infinite below 5 pairs.
CS_PRIOR_SD = 1.0
SEQUENTIAL_DECISIONS = ("effect", "equivalent", "continue", "cap")


def cs_half_width(n, ss, confidence: float = 0.95, prior_sd: float = CS_PRIOR_SD):
    """Half-width of the confidence sequence after n pairs whose differences have sum of squared deviations ss
    (Σ (d_i − mean)²): √(r · ss / (n (n − r))), r = (1 − 1/K)(1 + nτ²)/τ², K = ((1 + nτ²)^½ / α)^(2/n); inf when
    r ≥ n (too few pairs for this level). n, ss: scalars or arrays of one shape (vectorised); returns that shape."""
    n = np.asarray(n, dtype=float)
    ss = np.asarray(ss, dtype=float)
    alpha, tau2 = 1 - confidence, prior_sd**2
    k = np.exp((np.log1p(n * tau2) - 2 * np.log(alpha)) / n)
    r = (1 - 1 / k) * (1 + n * tau2) / tau2
    with np.errstate(divide="ignore", invalid="ignore"):
        half = np.sqrt(r * ss / (n * (n - r)))
    return np.where(r < n, half, np.inf)


def confidence_sequence(
    diffs: Sequence[float], confidence: float = 0.95, prior_sd: float = CS_PRIOR_SD
) -> tuple[np.ndarray, np.ndarray]:
    """(low, high), each [n]: the confidence sequence after each prefix d_1..d_j of the paired differences, in the
    order the seeds were added, as the running intersection of the intervals so far (valid too: each covers at
    every j at once). An intersection that would be empty (a chance of at most 1 − confidence under the model)
    keeps the j-th interval itself."""
    d = _values(diffs, "confidence_sequence")
    j = np.arange(1, d.size + 1)
    mean = np.cumsum(d) / j
    ss = np.maximum(np.cumsum(d**2) - j * mean**2, 0.0)
    half = cs_half_width(j, ss, confidence, prior_sd)
    low, high = mean - half, mean + half
    for i in range(1, d.size):
        lo, hi = max(low[i], low[i - 1]), min(high[i], high[i - 1])
        if lo <= hi:
            low[i], high[i] = lo, hi
    return low, high


@dataclass(frozen=True)
class SequentialVerdict:
    """Where a sequential comparison stands after n pairs: the confidence sequence [low, high] (valid under looking
    after every round), the fixed-n t interval [t_low, t_high] for contrast (not valid under such looks), and
    the decision: "effect" (the sequence excludes 0), "equivalent" (it lies within ± margin), "cap" (neither,
    with max_n pairs reached), else "continue"."""

    n: int
    mean: float
    low: float
    high: float
    t_low: float
    t_high: float
    decision: str
    margin: float | None
    confidence: float

    def to_dict(self) -> dict:
        return asdict(self)


def sequential_verdict(
    diffs: Sequence[float],
    margin: float | None = None,
    max_n: int | None = None,
    confidence: float = 0.95,
    prior_sd: float = CS_PRIOR_SD,
) -> SequentialVerdict:
    """The decision after the paired differences `diffs` ([n], in the order their seeds were added) of a study that
    stops once its confidence sequence excludes 0 (an effect) or lies within (−margin, +margin) (shown smaller than
    margin; None: no such stop), or at max_n pairs. An effect takes precedence over equivalence."""
    d = _values(diffs, "sequential_verdict")
    low, high = confidence_sequence(d, confidence, prior_sd)
    lo, hi = float(low[-1]), float(high[-1])
    t = t_interval(d, confidence)
    if lo > 0 or hi < 0:
        decision = "effect"
    elif margin is not None and -margin < lo and hi < margin:
        decision = "equivalent"
    elif max_n is not None and d.size >= max_n:
        decision = "cap"
    else:
        decision = "continue"
    return SequentialVerdict(d.size, float(d.mean()), lo, hi, t.low, t.high, decision, margin, confidence)
