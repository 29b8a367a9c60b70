"""Load Problems from files: JSONL, parquet, or a local Hugging Face `datasets` directory.

Every row goes through a FieldMap (see layouts.py). A row that does not fit raises DatasetError naming
the file, the line (JSONL, 1-based) or row (parquet / HF, 0-based) and what is wrong with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from itertools import islice
from pathlib import Path
from typing import Any

from hadw.data.layouts import (
    FieldError,
    FieldMap,
    Layout,
    SourceFloat,
    check_answers,
    check_unique_ids,
    detect_layout,
    get_layout,
    row_to_problem,
)
from hadw.data.problem import DatasetError, Problem

# Benchmark name -> file path under a data folder (the layout of the Qwen2.5-Math evaluation harness).
BENCHMARKS: dict[str, str] = {
    "math500": "math500/test.jsonl",
    "aime25": "aime25/test.jsonl",
    "amc23": "amc23/test.jsonl",
    "minerva_math": "minerva_math/test.jsonl",
    "olympiadbench": "olympiadbench/test.jsonl",
    "gsm8k": "gsm8k/test.jsonl",
    "math_train": "math_train/train.parquet",
}
# The layout of each benchmark file (the file name alone does not say it).
BENCHMARK_LAYOUTS: dict[str, str] = {name: name for name in BENCHMARKS} | {"math_train": "verl"}


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key given twice: json.loads would silently keep the last value."""
    row = dict(pairs)
    if len(row) != len(pairs):  # rare: find which key came twice
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return row


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            try:  # a UTF-8 BOM at the start of the file is accepted
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DatasetError(
                    f"{where}: not UTF-8 text (byte {raw[e.start]:#x} at column {e.start + 1}); save the file as UTF-8"
                ) from None
            if not line.strip():
                continue
            try:
                # floats keep their text: an answer of more digits than a float holds is refused, not changed
                row = json.loads(line.rstrip("\r\n"), object_pairs_hook=_unique_keys, parse_float=SourceFloat)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{where}: bad JSON: {e.msg} (column {e.colno})") from None
            except _DuplicateKey as e:
                raise DatasetError(
                    f"{where}: duplicate key {e.key!r}; allowed: each key once per object (JSON would silently "
                    "keep the last value)"
                ) from None
            except RecursionError:
                raise DatasetError(f"{where}: nested too deeply to be a data row") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{where}: expected a JSON object, got {type(row).__name__}")
            yield where, row


def _parquet_rows(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DatasetError(f"{path}: not a parquet file ({first})") from None
    _check_unique_columns(path, parquet.schema_arrow)
    index = 0
    for batch in parquet.iter_batches(batch_size=1024):
        for row in batch.to_pylist():
            yield f"{path}: row {index} (0-based)", row
            index += 1


def _check_unique_columns(path: Path, schema: Any, prefix: str = "") -> None:
    """DatasetError for a column (or struct field) name given twice: a row dict would keep only the last one."""
    import pyarrow as pa

    seen: set[str] = set()
    for field in schema:
        if field.name in seen:
            raise DatasetError(
                f"{path}: duplicate column {prefix + field.name!r}; allowed: each column name once (a row would "
                "silently keep the last one)"
            )
        seen.add(field.name)
        if pa.types.is_struct(field.type):
            _check_unique_columns(path, field.type, f"{prefix}{field.name}.")


def _hf_rows(path: Path, split: str | None) -> Iterator[tuple[str, Mapping[str, Any]]]:
    import datasets

    if not any(path.iterdir()):
        raise DatasetError(f"{path}: empty folder; allowed: a .jsonl / .parquet file or a saved HF dataset folder")
    scripts = sorted(p.name for p in path.glob("*.py"))
    if scripts:  # code, never run (datasets 4 refuses it too, with a traceback)
        raise DatasetError(
            f"{path}: holds a dataset loading script ({', '.join(scripts)}), which is code; hadw never runs one. "
            "Allowed: a folder of data files (.jsonl / .parquet / .csv) or a save_to_disk() folder"
        )
    try:
        if (path / "dataset_dict.json").exists() or (path / "dataset_info.json").exists():
            data = datasets.load_from_disk(str(path))  # a save_to_disk() directory
        else:
            data = datasets.load_dataset(str(path))  # a local dataset folder of data files
    except (FileNotFoundError, ValueError, OSError, RuntimeError, datasets.exceptions.DatasetNotFoundError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DatasetError(f"{path}: not a dataset folder Hugging Face datasets can read ({first})") from None
    if isinstance(data, datasets.DatasetDict):
        if split is None:
            if len(data) != 1:
                raise DatasetError(f"{path}: holds splits {list(data)}; pass split= one of them")
            split = next(iter(data))
        if split not in data:
            raise DatasetError(f"{path}: no split {split!r}; allowed: {', '.join(data)}")
        data = data[split]
    for index, row in enumerate(data):
        yield f"{path}: row {index} (0-based)", row


def iter_rows(path: str | Path, split: str | None = None) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(location, row) pairs from a .jsonl / .json-lines, .parquet file or a HF datasets directory."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such file or directory")
    if path.is_dir():
        return _hf_rows(path, split)
    if not path.is_file():  # a FIFO, a device, a socket: reading it could block forever or never end
        raise DatasetError(f"{path}: not a regular file; allowed: a .jsonl / .json / .parquet file or a folder")
    if path.suffix in (".jsonl", ".json"):
        return _jsonl_rows(path)
    if path.suffix == ".parquet":
        return _parquet_rows(path)
    raise DatasetError(f"{path}: unknown file type {path.suffix!r}; allowed: .jsonl, .json, .parquet, a directory")


def _resolve_layout(path: Path, layout: str | FieldMap, first_row: Mapping[str, Any]) -> tuple[FieldMap, str]:
    """(field map, source name). "auto" trusts a benchmark folder name first, then the row's keys. The
    source is named after the benchmark folder, else the file (a detected layout names only the fields:
    my_quiz.jsonl with problem/answer fields is "my_quiz", not "aime25")."""
    own_name = path.stem if path.is_file() else path.name
    if isinstance(layout, FieldMap):
        return layout, own_name
    if layout == "auto":
        folder = path.parent.name if path.is_file() else path.name
        if folder in BENCHMARKS and path.name == Path(BENCHMARKS[folder]).name:
            return get_layout(BENCHMARK_LAYOUTS[folder]).fields, folder
        found: Layout = detect_layout(first_row)
        return found.fields, own_name
    return get_layout(layout).fields, own_name


def load_dataset_file(
    path: str | Path,
    layout: str | FieldMap = "auto",
    limit: int | None = None,
    source: str | None = None,
    split: str | None = None,
) -> list[Problem]:
    """Problems from one file or HF directory.

    layout: "auto", a name in LAYOUTS, or a FieldMap. source: the Problem.source / uid prefix (default:
    the benchmark folder name, the layout name, or the file stem for a FieldMap). limit: first N rows.
    split: for a HF directory with several splits.
    """
    if not isinstance(layout, FieldMap) and layout != "auto":
        get_layout(layout)  # fail on an unknown name before reading anything
    path = Path(path)
    rows = iter_rows(path, split)
    problems: list[Problem] = []
    fields: FieldMap | None = None
    for index, (where, row) in enumerate(islice(rows, limit)):
        if fields is None:
            fields, default_source = _resolve_layout(path, layout, row)
            source = source or default_source
        try:
            problems.append(row_to_problem(row, fields, source, index, where))
        except FieldError as e:
            raise DatasetError(f"{where}: {e}") from None
    if fields is not None:
        check_answers(problems, fields, str(path))
        check_unique_ids(problems, fields, str(path))
    return problems


def load_benchmark(name: str, data_dir: str | Path, limit: int | None = None) -> list[Problem]:
    """A benchmark by name from the shared data dir: math500, aime25, amc23, minerva_math,
    olympiadbench, gsm8k, math_train."""
    if name not in BENCHMARKS:
        raise DatasetError(f"unknown benchmark {name!r}; allowed: {', '.join(BENCHMARKS)}")
    path = Path(data_dir) / BENCHMARKS[name]
    return load_dataset_file(path, layout=BENCHMARK_LAYOUTS[name], limit=limit, source=name)
