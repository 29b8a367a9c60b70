"""The one resolver from a source spec to Problems, used by train, sft, eval, probe and compare.

    task:addition             a built-in task (an infinite stream, or `size` items)
    benchmark:math500         the local data folder's file when it is there, else the public Hub copy
    hf:ORG/NAME[:SPLIT]       any Hub dataset (hf:ORG/NAME:CONFIG:SPLIT for a named config)
    path/to/file.jsonl        a JSONL / parquet file or a HF dataset folder

Field names: `fields` is "auto" (the benchmark's layout, else detected from the first row), a layout
name, or a FieldMap; `make_fields` builds one from the user's field names (config `data.fields.*`,
CLI `--prompt-field` ...).

One held-out rule: a built-in task's evaluation items come from the stream seeded `seed +
EVAL_SEED_OFFSET` (disjoint from the training stream); a finite source keeps its first
min(eval_size, len // 5) rows for evaluation and trains on the rest (`split_held_out`).

The default data folders (`default_data_dirs`), first one holding the file wins, never the current
directory: $HADW_SHARED_DATA; the user cache folder ($XDG_CACHE_HOME or ~/.cache)/hadw/data, where
`hadw data download` writes by default. Neither holds the file: the public Hub copy.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from hadw.data.files import BENCHMARK_LAYOUTS, BENCHMARKS, load_dataset_file
from hadw.data.hub import HUB_BENCHMARKS, hub_rows, parse_hub_spec
from hadw.data.layouts import (
    FieldError,
    FieldMap,
    check_answers,
    check_unique_ids,
    detect_layout,
    get_layout,
    row_to_problem,
    user_fields,
)
from hadw.data.problem import DatasetError, Problem
from hadw.data.tasks import make_task

EVAL_SEED_OFFSET = 99_991  # evaluation items of a built-in task come from a disjoint stream
HUB_FILE = "from_hub.jsonl"  # what `hadw data download NAME` writes in <dir>/<NAME>/ (the Hub's field names)


@dataclass(frozen=True)
class Recipe:
    """How a source is prompted and scored when the user names nothing: one home for train, eval and probe."""

    template: str  # hadw.data.TEMPLATES name
    reward: str  # registered reward name (hadw.rewards)
    max_new_tokens: int  # room for an answer (eval / probe; the trainer has rollout.max_new_tokens)


# A built-in task: bare "47+38=" prompts, exact match, a few tokens (what the tiny model is trained on).
TASK_RECIPE = Recipe("plain", "exact", 16)
# Any dataset: the paper's instruction (think step by step, \boxed{}), math-verify, room for a chain of thought.
DATASET_RECIPE = Recipe("paper", "math", 2048)


def default_recipe(spec: str) -> Recipe:
    """The default recipe of a source spec ("task:sums" -> TASK_RECIPE, anything else -> DATASET_RECIPE)."""
    return TASK_RECIPE if spec.startswith("task:") else DATASET_RECIPE


def user_data_dir() -> Path:
    """($XDG_CACHE_HOME or ~/.cache)/hadw/data: where downloads go by default."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "hadw" / "data"


def default_data_dirs() -> list[Path]:
    """The folders searched for benchmark files when none is given (module docstring), in order."""
    env = os.environ.get("HADW_SHARED_DATA")
    dirs = [Path(env)] if env else []
    dirs.append(user_data_dir())
    return list(dict.fromkeys(d.resolve() for d in dirs))


def default_data_dir() -> Path:
    """The first default data folder that exists (else the user cache folder)."""
    return next((d for d in default_data_dirs() if d.is_dir()), user_data_dir())


@dataclass(frozen=True)
class SourceSpec:
    """A parsed source spec: kind is task | benchmark | hf | file; name is the task / benchmark name, the
    "hf:..." spec, or the path."""

    kind: str
    name: str

    @classmethod
    def parse(cls, spec: str) -> SourceSpec:
        for kind in ("task", "benchmark", "hf"):
            if spec.startswith(kind + ":"):
                return cls(kind, spec if kind == "hf" else spec.split(":", 1)[1])
        if not Path(spec).exists():
            raise DatasetError(
                f"{spec!r} is neither task:<name>, benchmark:<name>, hf:<org>/<name>[:split] nor an existing "
                "file or folder"
            )
        return cls("file", spec)


def make_fields(
    layout: str | FieldMap = "auto",
    prompt: str | None = None,
    answer: str | None = None,
    level: str | None = None,
    uid: str | None = None,
) -> str | FieldMap:
    """The user's field names (dotted paths) as a FieldMap when any is given, else `layout` unchanged."""
    if not any((prompt, answer, level, uid)):
        return layout
    if not (prompt and answer):
        missing = "prompt" if not prompt else "answer"
        raise DatasetError(
            f"the {missing} field is not set (data.fields.{missing} / --{missing}-field); a field mapping "
            "needs both the prompt and the answer field"
        )
    return user_fields(prompt, answer, level, uid)


def problems_from_rows(
    rows: Iterable[tuple[str, Mapping[str, Any]]], fields: str | FieldMap, source: str, limit: int | None = None
) -> list[Problem]:
    """Problems from (location, row) pairs; a row that does not fit raises DatasetError naming its location."""
    problems: list[Problem] = []
    fieldmap: FieldMap | None = fields if isinstance(fields, FieldMap) else None
    if isinstance(fields, str) and fields != "auto":
        fieldmap = get_layout(fields).fields
    for index, (where, row) in enumerate(islice(rows, limit)):
        if fieldmap is None:
            fieldmap = detect_layout(row).fields
        try:
            problems.append(row_to_problem(row, fieldmap, source, index, where))
        except FieldError as e:
            raise DatasetError(f"{where}: {e}") from None
    if fieldmap is not None:
        check_answers(problems, fieldmap, source)
        check_unique_ids(problems, fieldmap, source)
    return problems


def find_benchmark(name: str, data_dir: str | Path | None = None) -> tuple[Path, FieldMap] | None:
    """The local file of a benchmark and its field map: <dir>/<BENCHMARKS path> (the curated file) or
    <dir>/<name>/from_hub.jsonl (written by `hadw data download`), in data_dir or the default folders."""
    if name not in BENCHMARKS:
        raise DatasetError(f"unknown benchmark {name!r}; allowed: {', '.join(BENCHMARKS)}")
    for folder in [Path(data_dir)] if data_dir else default_data_dirs():
        if (folder / BENCHMARKS[name]).exists():
            return folder / BENCHMARKS[name], get_layout(BENCHMARK_LAYOUTS[name]).fields
        if (folder / name / HUB_FILE).exists():
            return folder / name / HUB_FILE, HUB_BENCHMARKS[name].fields
    return None


def _benchmark(name: str, fields: str | FieldMap, data_dir: str | Path | None, limit: int | None) -> list[Problem]:
    found = find_benchmark(name, data_dir)
    if found is not None:
        path, own = found
        return load_dataset_file(path, own if fields == "auto" else fields, limit=limit, source=name)
    hub = HUB_BENCHMARKS[name]
    searched = str(data_dir) if data_dir else ", ".join(map(str, default_data_dirs()))
    way_out = (
        f"Not in the data folder(s) either ({searched}): on a machine that is online run "
        f"`hadw data download {name} --out DIR`, then copy DIR here and set HADW_SHARED_DATA=DIR (or --data-dir DIR)."
    )
    rows = hub_rows(hub.repo, hub.config, hub.split, way_out)
    return problems_from_rows(rows, hub.fields if fields == "auto" else fields, name, limit)


def _hub(spec: str, fields: str | FieldMap, limit: int | None) -> list[Problem]:
    repo, config, split = parse_hub_spec(spec)
    way_out = f"Online, `hadw data download {spec} --out DIR` saves it as a JSONL file to use offline."
    return problems_from_rows(hub_rows(repo, config, split, way_out), fields, repo.split("/")[-1], limit)


def load_problems(
    spec: str,
    fields: str | FieldMap = "auto",
    data_dir: str | Path | None = None,
    limit: int | None = None,
    levels: Sequence[int] | None = None,
    seed: int = 0,
    held_out: bool = False,
    split: str | None = None,
) -> Sequence[Problem]:
    """The problems of one source spec (module docstring).

    Built-in tasks: an infinite random-access stream, or `limit` items; held_out=True draws the
    evaluation stream. Every other source: a list of at most `limit` rows (held_out does not apply: use
    split_held_out). split: the split of a local HF dataset folder with several.
    """
    source = SourceSpec.parse(spec)
    if source.kind == "task":
        return make_task(source.name, levels, seed=seed + (EVAL_SEED_OFFSET if held_out else 0), size=limit)
    if source.kind == "benchmark":
        problems = _benchmark(source.name, fields, data_dir, limit)
    elif source.kind == "hf":
        problems = _hub(source.name, fields, limit)
    else:
        problems = load_dataset_file(source.name, layout=fields, limit=limit, split=split)
    if not problems:
        raise DatasetError(f"{spec}: has no rows")
    return problems


def split_held_out(problems: Sequence[Problem], eval_size: int) -> tuple[list[Problem], list[Problem]]:
    """(training, held-out): the first min(eval_size, len // 5) rows are held out for evaluation."""
    n = min(eval_size, len(problems) // 5)
    return list(problems[n:]), list(problems[:n])


def download(spec: str, out_dir: str | Path) -> tuple[Path, int]:
    """Save a benchmark's public Hub copy (or any hf: spec) as JSONL under out_dir; (path, rows).

    benchmark NAME -> out_dir/NAME/from_hub.jsonl, found by `benchmark:NAME` when out_dir is the data
    folder. hf:ORG/NAME[:split] -> out_dir/ORG__NAME/SPLIT.jsonl, a file to pass as the source.
    """
    if spec.startswith("benchmark:"):
        spec = spec.split(":", 1)[1]
    if spec.startswith("hf:"):
        repo, config, split = parse_hub_spec(spec)
        path = Path(out_dir) / repo.replace("/", "__") / f"{config + '.' if config else ''}{split}.jsonl"
    elif spec in HUB_BENCHMARKS:
        hub = HUB_BENCHMARKS[spec]
        repo, config, split = hub.repo, hub.config, hub.split
        path = Path(out_dir) / spec / HUB_FILE
    else:
        raise DatasetError(f"unknown benchmark {spec!r}; allowed: {', '.join(HUB_BENCHMARKS)}, or hf:ORG/NAME[:split]")
    rows = hub_rows(repo, config, split, "Check the name and that this machine is online.")
    lines = [json.dumps(dict(row), ensure_ascii=False, default=str) + "\n" for _, row in rows]  # fails before writing
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines), encoding="utf-8")
    return path, len(lines)
