"""Where each training step's prompts come from: a pure function of (source, seed, step).

Built-in tasks are infinite random-access streams; file datasets are reshuffled every epoch with a
seed. Either way `batch(step)` needs no hidden state, so the data position saved in a checkpoint is
just the step and a resumed run sees exactly the prompts the uninterrupted run would have seen.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from hadw.data import Problem, load_benchmark, load_dataset_file, make_task
from hadw.train.config import DataConfig

EVAL_SEED_OFFSET = 99_991  # evaluation items of a built-in task come from a disjoint stream


def default_data_dir() -> Path:
    """$HADW_SHARED_DATA, else ../shared/data beside the working directory's repository."""
    env = os.environ.get("HADW_SHARED_DATA")
    return Path(env) if env else Path.cwd().parent / "shared" / "data"


def load_problems(source: str, data: DataConfig) -> list[Problem]:
    """A finite list of problems from a "benchmark:<name>" or a file path."""
    if source.startswith("benchmark:"):
        data_dir = Path(data.data_dir) if data.data_dir else default_data_dir()
        return load_benchmark(source.split(":", 1)[1], data_dir, limit=data.limit)
    return load_dataset_file(source, layout=data.layout, limit=data.limit)


class PromptSource:
    def __init__(self, data: DataConfig, seed: int):
        self.data, self.seed = data, seed
        if data.source.startswith("task:"):
            self.task = data.source.split(":", 1)[1]
            self.stream = make_task(self.task, data.levels, seed=seed)
            self.problems: list[Problem] = []
        else:
            self.task = None
            problems = load_problems(data.source, data)
            held_out = 0 if data.eval_source else min(data.eval_size, len(problems) // 5)
            self.problems, self._held_out = problems[held_out:], problems[:held_out]
            if not self.problems:
                raise ValueError(f"data.source={data.source!r} has no training rows")

    def batch(self, step: int, num_prompts: int, refill_round: int = 0) -> list[Problem]:
        """The prompts of training step `step` (0-based); refill rounds (DAPO) draw from a separate
        region, so round 0 of every step is the same whatever the dynamic-sampling setting."""
        if refill_round:
            rng = random.Random(f"refill:{self.seed}:{step}:{refill_round}")
            if self.task is not None:
                return [self.stream[(1 << 40) + rng.randrange(1 << 40)] for _ in range(num_prompts)]
            return rng.choices(self.problems, k=num_prompts)
        start = step * num_prompts
        if self.task is not None:
            return [self.stream[start + j] for j in range(num_prompts)]
        return [self._file_item(start + j) for j in range(num_prompts)]

    def _file_item(self, index: int) -> Problem:
        epoch, offset = divmod(index, len(self.problems))
        order = list(range(len(self.problems)))
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return self.problems[order[offset]]

    def eval_problems(self) -> list[Problem]:
        """Fixed evaluation prompts: `data.eval_source`, else held-out items of the training source."""
        if self.data.eval_source:
            if self.data.eval_source.startswith("task:"):
                name = self.data.eval_source.split(":", 1)[1]
                return list(
                    make_task(name, self.data.levels, seed=self.seed + EVAL_SEED_OFFSET, size=self.data.eval_size)
                )
            return load_problems(self.data.eval_source, self.data)[: self.data.eval_size]
        if self.task is not None:
            return list(
                make_task(self.task, self.data.levels, seed=self.seed + EVAL_SEED_OFFSET, size=self.data.eval_size)
            )
        return self._held_out
