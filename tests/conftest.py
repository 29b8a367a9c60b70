"""Shared test setup: everything offline, and a path to the benchmark files in ../shared/data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tiny models gain nothing from a second thread, and lose a lot when the verifier pool or a second
# process competes for the 2 cores.
torch.set_num_threads(1)

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    """The benchmark data folder: $HADW_SHARED_DATA, else ../shared/data beside the clone."""
    candidate = Path(os.environ.get("HADW_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
    return candidate if candidate.is_dir() else None


@pytest.fixture
def shared_data() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip(
            "benchmark data not found: set HADW_SHARED_DATA or place ../shared/data beside the clone "
            "(CI has it; a user's clone does not)"
        )
    return path
