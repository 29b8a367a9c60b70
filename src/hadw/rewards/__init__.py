"""Verifiable rewards: per-item verifiers (math-verify, exact integer, format), a registry, and `score`,
which combines weighted rewards and designates the 0/1 correctness signal HA-DW reads. Rewards can also
be named by import path ("my_pkg.rewards:accuracy", TRL's signature; see loader.py).

Importing this package does not import torch or sympy (verifier worker processes import it).
"""

from hadw.rewards.base import (
    DEFAULT_TIMEOUT_S,
    ERROR_KINDS,
    REWARDS,
    ItemError,
    ItemScores,
    RewardFailure,
    RewardFn,
    RewardFunction,
    get_reward,
    register_reward,
    run_reward,
)
from hadw.rewards.combine import RewardRecipe, RewardResult, RewardSpec, score, score_problems
from hadw.rewards.loader import TRLReward, is_import_path, resolve_reward, reward_inputs, trl_reward
from hadw.rewards.math_any import math_any_item
from hadw.rewards.pool import VerifierPool, configure_pool, get_pool, shutdown_pool
from hadw.rewards.verifiers import exact_item, format_item, math_item

# math_any: math-verify's default extraction, the answer need not be boxed (math_any.py).
register_reward(RewardFunction("math_any", math_any_item, isolated=True))

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ERROR_KINDS",
    "REWARDS",
    "ItemError",
    "ItemScores",
    "RewardFailure",
    "RewardFn",
    "RewardFunction",
    "RewardRecipe",
    "RewardResult",
    "RewardSpec",
    "TRLReward",
    "VerifierPool",
    "configure_pool",
    "exact_item",
    "format_item",
    "get_pool",
    "get_reward",
    "is_import_path",
    "math_any_item",
    "math_item",
    "register_reward",
    "resolve_reward",
    "reward_inputs",
    "run_reward",
    "score",
    "score_problems",
    "shutdown_pool",
    "trl_reward",
]
