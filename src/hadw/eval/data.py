"""What `hadw eval` / `hadw probe` read: "task:<name>", "benchmark:<name>" or a file, with per-kind defaults.

    task:addition        built-in task: the held-out items the trainer evaluates on (seed + EVAL_SEED_OFFSET)
    benchmark:math500    a benchmark file under data_dir (default $HADW_SHARED_DATA or ../shared/data):
                         math500, aime25, amc23, minerva_math, olympiadbench, gsm8k, math_train
    path/to/file.jsonl   any JSONL / parquet / HF dataset folder (layout detected, or given)

A built-in task is scored by exact match with the "plain" template and answers in a few tokens; every
other source by math-verify with the paper's template and room for a chain of thought.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hadw.data import BENCHMARKS, Problem, load_benchmark, load_dataset_file, make_task
from hadw.train.prompts import EVAL_SEED_OFFSET, default_data_dir

DEFAULT_TASK_SIZE = 200


@dataclass
class EvalSource:
    """One data source of an evaluation, with how to prompt and score it."""

    name: str  # the spec as given ("task:addition", "benchmark:math500", a path)
    problems: list[Problem]
    template: str
    reward: str
    max_new_tokens: int


def load_source(
    spec: str,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    levels: Sequence[int] | None = None,
    seed: int = 0,
    layout: str = "auto",
    template: str = "auto",
    reward: str = "auto",
    max_new_tokens: int | None = None,
) -> EvalSource:
    """Parse one --data spec and load its problems. "auto" picks the per-kind default (module docstring)."""
    if spec.startswith("task:"):
        size = limit or DEFAULT_TASK_SIZE
        problems = list(make_task(spec.split(":", 1)[1], levels, seed=seed + EVAL_SEED_OFFSET, size=size))
        defaults = ("plain", "exact", 16)
    elif spec.startswith("benchmark:"):
        name = spec.split(":", 1)[1]
        if name not in BENCHMARKS:
            raise ValueError(f"--data {spec!r}: unknown benchmark {name!r}; allowed: {', '.join(BENCHMARKS)}")
        problems = load_benchmark(name, Path(data_dir) if data_dir else default_data_dir(), limit=limit)
        defaults = ("paper", "math", 2048)
    else:
        if not Path(spec).exists():
            raise ValueError(f"--data {spec!r} is neither task:<name>, benchmark:<name> nor an existing file or folder")
        problems = load_dataset_file(spec, layout=layout, limit=limit)
        defaults = ("paper", "math", 2048)
    if not problems:
        raise ValueError(f"--data {spec!r} has no problems")
    return EvalSource(
        spec,
        problems,
        defaults[0] if template == "auto" else template,
        defaults[1] if reward == "auto" else reward,
        max_new_tokens or defaults[2],
    )
