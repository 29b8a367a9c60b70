"""Shared test setup: everything offline, and the curated benchmark files ($HADW_SHARED_DATA, which
scripts/offline_env.sh sets when the development machine has them)."""

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



def shared_data_dir() -> Path | None:
    """The benchmark data folder: $HADW_SHARED_DATA when it names a folder, else None (tests skip)."""
    env = os.environ.get("HADW_SHARED_DATA")
    return Path(env) if env and Path(env).is_dir() else None


@pytest.fixture
def shared_data() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip(
            "benchmark data not found: set HADW_SHARED_DATA to a folder of the curated benchmark files "
            "(CI has it; a user's clone does not)"
        )
    return path
