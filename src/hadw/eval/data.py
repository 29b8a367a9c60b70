"""What `hadw eval` / `hadw probe` read: a source spec (see hadw.data.sources) with per-kind defaults.

    task:addition        built-in task: the held-out items the trainer evaluates on
    benchmark:math500    the local data folder's file, else its public Hub copy (docs/data.md)
    hf:ORG/NAME[:split]  any Hub dataset
    path/to/file.jsonl   any JSONL / parquet / HF dataset folder (fields detected, or --prompt-field ...)

A built-in task is scored by exact match with the "plain" template and answers in a few tokens; every
other source by math-verify with the paper's template and room for a chain of thought.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hadw.data import FieldMap, Problem, default_recipe, load_problems
from hadw.rewards.combine import RewardRecipe

DEFAULT_TASK_SIZE = 200


@dataclass
class EvalSource:
    """One data source of an evaluation, with how to prompt and score it."""

    name: str  # the spec as given ("task:addition", "benchmark:math500", a path)
    problems: list[Problem]
    template: str
    reward: str | RewardRecipe  # a name (a bare model's --reward), or a run's recipe: called as training calls it
    max_new_tokens: int


def load_source(
    spec: str,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    levels: Sequence[int] | None = None,
    seed: int = 0,
    fields: str | FieldMap = "auto",
    template: str = "auto",
    reward: str | RewardRecipe = "auto",
    max_new_tokens: int | None = None,
) -> EvalSource:
    """Parse one --data spec and load its problems. "auto" picks the per-kind default (module docstring).
    fields: "auto", a layout name or a FieldMap (hadw.data.make_fields)."""
    is_task = spec.startswith("task:")
    if is_task:
        problems = list(load_problems(spec, levels=levels, seed=seed, held_out=True, limit=limit or DEFAULT_TASK_SIZE))
    else:
        problems = list(load_problems(spec, fields, data_dir, limit))
    recipe = default_recipe(spec)  # the trainer resolves data.template / reward.functions the same way
    return EvalSource(
        spec,
        problems,
        recipe.template if template == "auto" else template,
        recipe.reward if reward == "auto" else reward,
        max_new_tokens or recipe.max_new_tokens,
    )
