"""benchmarks/studies/hadw_effect/hadw_effect.py --set: a study on a variant of the demo recipe
(benchmarks/studies/sim_vs_trainer/sim_vs_trainer.md's check of the sim on a setting it was not calibrated on runs the
recipe at another G)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies" / "hadw_effect"))
from hadw_effect import base_overrides, with_sets


def test_set_replaces_the_recipes_key_in_place_and_appends_a_new_one():
    recipe = base_overrides(Path("m"), steps=200, eval_size=300)
    assert "rollout.group_size=8" in recipe
    out = with_sets(recipe, ["rollout.group_size=4", "algorithm.kl_coef=0.01"])
    assert out.index("rollout.group_size=4") == recipe.index("rollout.group_size=8")
    assert "rollout.group_size=8" not in out
    assert out[-1] == "algorithm.kl_coef=0.01" and len(out) == len(recipe) + 1
    assert with_sets(recipe, []) == recipe


@pytest.mark.parametrize("item", ["train.seed=3", "hadw.enabled=true", "train.output_dir=x", "group_size", "=4"])
def test_set_refuses_per_run_keys_and_malformed_items(item):
    with pytest.raises(ValueError):
        with_sets(base_overrides(Path("m"), steps=200, eval_size=300), [item])
