"""Where each training step's prompts come from: a pure function of (source, seed, step).

Built-in tasks are infinite random-access streams; file datasets are reshuffled every epoch with a
seed. Either way `batch(step)` needs no hidden state, so the data position saved in a checkpoint is
just the step and a resumed run sees exactly the prompts the uninterrupted run would have seen.
Sources and the held-out rule come from hadw.data.sources.
"""

from __future__ import annotations

import random

from hadw.data import DatasetError, FieldMap, Problem, load_problems, make_fields, split_held_out, with_system_prompt
from hadw.data.sources import EVAL_SEED_OFFSET  # noqa: F401  (demo and benchmarks import it from here)
from hadw.train.config import DataConfig


def data_fields(data: DataConfig) -> str | FieldMap:
    """`data.fields` as a FieldMap when set, else `data.layout` (a layout name, or a FieldMap set from Python)."""
    f = data.fields
    if isinstance(data.layout, FieldMap):
        return data.layout
    return make_fields(data.layout, f.prompt, f.answer, f.level, f.uid)


class PromptSource:
    def __init__(self, data: DataConfig, seed: int):
        self.data, self.seed = data, seed
        self.fields = data_fields(data)
        self.task = data.source.split(":", 1)[1] if data.source.startswith("task:") else None
        if self.task is not None:
            self.stream = load_problems(data.source, levels=data.levels, seed=seed)
            self.problems: list[Problem] = []
        else:
            problems = self._load(data.source)
            self.problems, self._held_out = split_held_out(problems, 0 if data.eval_source else data.eval_size)
            if not self.problems:
                raise DatasetError(f"data.source={data.source!r} has no training rows")

    def _load(self, spec: str) -> list[Problem]:
        d = self.data
        return self._system(list(load_problems(spec, self.fields, d.data_dir or None, d.limit)))

    def _system(self, problems: list[Problem]) -> list[Problem]:
        """data.system_prompt as every prompt's first chat turn."""
        return with_system_prompt(problems, self.data.system_prompt)

    def batch(self, step: int, num_prompts: int, refill_round: int = 0) -> list[Problem]:
        """The prompts of training step `step` (0-based); refill rounds (DAPO) draw from a separate
        region, so round 0 of every step is the same whatever the dynamic-sampling setting."""
        if refill_round:
            rng = random.Random(f"refill:{self.seed}:{step}:{refill_round}")
            if self.task is not None:
                return self._system([self.stream[(1 << 40) + rng.randrange(1 << 40)] for _ in range(num_prompts)])
            return rng.choices(self.problems, k=num_prompts)
        start = step * num_prompts
        if self.task is not None:
            return self._system([self.stream[start + j] for j in range(num_prompts)])
        return [self._file_item(start + j) for j in range(num_prompts)]

    def _file_item(self, index: int) -> Problem:
        epoch, offset = divmod(index, len(self.problems))
        order = list(range(len(self.problems)))
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return self.problems[order[offset]]

    def eval_problems(self) -> list[Problem]:
        """Fixed evaluation prompts: `data.eval_source`, else held-out items of the training source."""
        d = self.data
        if d.eval_source:
            if d.eval_source.startswith("task:"):
                spec = d.eval_source
                problems = load_problems(spec, levels=d.levels, seed=self.seed, held_out=True, limit=d.eval_size)
                return self._system(list(problems))
            return self._load(d.eval_source)[: d.eval_size]
        if self.task is not None:
            problems = load_problems(d.source, levels=d.levels, seed=self.seed, held_out=True, limit=d.eval_size)
            return self._system(list(problems))
        return self._held_out
