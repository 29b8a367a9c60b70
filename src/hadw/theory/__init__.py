"""The paper's theory of biased group-relative advantages, as exact functions and Monte Carlo checks.

binary      Bernoulli rewards: E[p̂|S], the bias (Lemma 2), P(degenerate), mis-estimation probabilities
            (Theorem 2) and their interval averages (Corollaries 1–3).
rectified   the de-biasing constant c*, Lemma 1's (c_low, c_high) and Theorem 3's λ_scale range.
continuous  rewards in [0, 1] (Theorem 4), Beta and truncated-Gaussian built in.
simulate    Monte Carlo estimates of all of the above, with standard errors.
plots       the figures of `hadw bias plot`.
"""

from typing import TYPE_CHECKING

from hadw.lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and IDEs; at run time each name is imported on first use
    from hadw.theory.binary import (
        bias,
        expected_baseline,
        interval_average,
        p_degenerate,
        p_nondegenerate,
        poisson_limit_average,
        prob_misestimate,
    )
    from hadw.theory.continuous import (
        ContinuousBias,
        beta_from_mean,
        beta_rewards,
        continuous_bias,
        continuous_theory,
        truncated_gaussian_rewards,
    )
    from hadw.theory.rectified import CBounds, LambdaInterval, c_bounds, debias_constant, eps_delta, lambda_interval
    from hadw.theory.simulate import BinaryMC, ContinuousMC, Estimate, monte_carlo, monte_carlo_continuous

# Lazy: `hadw bias` is registered at every `hadw` start-up, and binary / continuous import scipy.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "bias": "binary",
        "expected_baseline": "binary",
        "interval_average": "binary",
        "p_degenerate": "binary",
        "p_nondegenerate": "binary",
        "poisson_limit_average": "binary",
        "prob_misestimate": "binary",
        "ContinuousBias": "continuous",
        "beta_from_mean": "continuous",
        "beta_rewards": "continuous",
        "continuous_bias": "continuous",
        "continuous_theory": "continuous",
        "truncated_gaussian_rewards": "continuous",
        "CBounds": "rectified",
        "LambdaInterval": "rectified",
        "c_bounds": "rectified",
        "debias_constant": "rectified",
        "eps_delta": "rectified",
        "lambda_interval": "rectified",
        "BinaryMC": "simulate",
        "ContinuousMC": "simulate",
        "Estimate": "simulate",
        "monte_carlo": "simulate",
        "monte_carlo_continuous": "simulate",
    },
)

__all__ = [
    "BinaryMC",
    "CBounds",
    "ContinuousBias",
    "ContinuousMC",
    "Estimate",
    "LambdaInterval",
    "beta_from_mean",
    "beta_rewards",
    "bias",
    "c_bounds",
    "continuous_bias",
    "continuous_theory",
    "debias_constant",
    "eps_delta",
    "expected_baseline",
    "interval_average",
    "lambda_interval",
    "monte_carlo",
    "monte_carlo_continuous",
    "p_degenerate",
    "p_nondegenerate",
    "poisson_limit_average",
    "prob_misestimate",
    "truncated_gaussian_rewards",
]
