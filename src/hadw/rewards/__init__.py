"""Verifiable rewards: per-item verifiers (math-verify, exact integer, format), a registry, and `score`,
which combines weighted rewards and designates the 0/1 correctness signal HA-DW reads.

Importing this package does not import torch or sympy (verifier worker processes import it).
"""

from hadw.rewards.base import (
    DEFAULT_TIMEOUT_S,
    REWARDS,
    ItemScores,
    RewardFn,
    RewardFunction,
    get_reward,
    register_reward,
    run_reward,
)
from hadw.rewards.combine import RewardResult, RewardSpec, score
from hadw.rewards.pool import VerifierPool, configure_pool, get_pool, shutdown_pool
from hadw.rewards.verifiers import exact_item, format_item, math_item

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "REWARDS",
    "ItemScores",
    "RewardFn",
    "RewardFunction",
    "RewardResult",
    "RewardSpec",
    "VerifierPool",
    "configure_pool",
    "exact_item",
    "format_item",
    "get_pool",
    "get_reward",
    "math_item",
    "register_reward",
    "run_reward",
    "score",
    "shutdown_pool",
]
