"""Registries (advantage estimators, policy losses, rewards): a taken name is refused, unknown names list the
allowed ones."""

import pytest

from hadw.core import ADVANTAGE_ESTIMATORS
from hadw.core.losses import POLICY_LOSSES
from hadw.core.registry import Registry
from hadw.rewards import REWARDS, RewardFunction, register_reward


def test_duplicate_names_are_refused_unless_replace():
    reg = Registry("widget", {"a": 1})
    with pytest.raises(ValueError, match="widget 'a' is already registered"):
        reg.add("a", 2)
    assert reg.add("a", 2, replace=True) == 2 and reg.get("a") == 2
    with pytest.raises(ValueError, match=r"unknown widget 'b'; allowed: a"):
        reg.get("b")


def test_built_in_registries_guard_their_names():
    with pytest.raises(ValueError, match="already registered"):
        ADVANTAGE_ESTIMATORS.register("grpo")(lambda *a, **k: None)
    with pytest.raises(ValueError, match="already registered"):
        POLICY_LOSSES.add("token_clip", lambda *a: None)
    with pytest.raises(ValueError, match="reward 'exact' is already registered"):
        register_reward(RewardFunction("exact", lambda completion, answer: 1.0))
    assert REWARDS.get("exact").name == "exact"  # the built-in one survived
