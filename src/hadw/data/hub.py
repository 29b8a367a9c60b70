"""Datasets on the Hugging Face Hub: the public copies of the benchmarks, and any `hf:ORG/NAME[:split]`.

A benchmark is read from the local data folder when the file is there (see sources.py); otherwise from
the public dataset named below, whose field names differ from the local files' (amc23 has `question`
where the local file has `problem`, ...), so each entry carries its own FieldMap. Loading goes through
`datasets.load_dataset`, which caches the download; offline and not cached, the error names
HF_HUB_OFFLINE and `hadw data download`, the way to get the file onto an offline machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hadw.data.layouts import FieldMap, get_layout, user_fields
from hadw.data.problem import DatasetError


@dataclass(frozen=True)
class HubDataset:
    """One public dataset on the Hub: repo id, config (subset) name, split, and how to read its rows."""

    repo: str
    split: str
    fields: FieldMap
    config: str | None = None


# The public copies of the benchmarks in BENCHMARKS (same problems as the local files; docs/data.md).
HUB_BENCHMARKS: dict[str, HubDataset] = {
    "math500": HubDataset("HuggingFaceH4/MATH-500", "test", get_layout("math500").fields),
    "aime25": HubDataset("math-ai/aime25", "test", user_fields("problem", "answer", uid="id")),
    "amc23": HubDataset("math-ai/amc23", "test", user_fields("question", "answer", uid="id")),
    "minerva_math": HubDataset("math-ai/minervamath", "test", user_fields("question", "answer")),
    "olympiadbench": HubDataset(
        "Hothan/OlympiadBench", "train", get_layout("olympiadbench").fields, config="OE_TO_maths_en_COMP"
    ),
    "gsm8k": HubDataset("openai/gsm8k", "test", get_layout("gsm8k").fields, config="main"),
    "math_train": HubDataset("DigitalLearningGmbH/MATH-lighteval", "train", get_layout("math").fields),
}


def parse_hub_spec(spec: str) -> tuple[str, str | None, str]:
    """hf:ORG/NAME[:SPLIT] or hf:ORG/NAME:CONFIG:SPLIT -> (repo, config, split); the split defaults to train."""
    parts = spec.removeprefix("hf:").split(":")
    if not parts[0] or "/" not in parts[0] or len(parts) > 3:
        raise DatasetError(f"{spec!r}: expected hf:ORG/NAME, hf:ORG/NAME:SPLIT or hf:ORG/NAME:CONFIG:SPLIT")
    repo = parts[0]
    config = parts[1] if len(parts) == 3 else None
    split = parts[-1] if len(parts) > 1 else "train"
    return repo, config, split


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on") or os.environ.get(
        "HF_DATASETS_OFFLINE", "0"
    ).lower() in ("1", "true", "yes", "on")


def hub_rows(repo: str, config: str | None, split: str, way_out: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(location, row) pairs of one split of a Hub dataset (downloaded and cached by `datasets`).

    way_out: what the user can do when the dataset cannot be had (offline and not cached, no such repo).
    """
    import datasets

    where = f"hf:{repo}" + (f":{config}" if config else "") + f":{split}"
    try:
        data = datasets.load_dataset(repo, config, split=split)
    except Exception as e:  # offline, no such repo / split, no network: one line with the way out
        reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        if offline():
            reason = f"HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set and it is not in the cache ({reason})"
        raise DatasetError(f"{where}: cannot load it from the Hugging Face Hub: {reason}. {way_out}") from None
    for index, row in enumerate(data):
        yield f"{where}: row {index} (0-based)", row
