"""Checkpoint the driver's HA-DW anchor beside verl's checkpoints.

verl ≥ 0.9 (v1 trainer): set `trainer.checkpoint_callback_class=hadw.integrations.verl.HADWCheckpointCallback`.
Its `on_save` writes `global_step_N/hadw_anchor.json`; it is built on the driver at trainer start-up,
before the first step, and restores the anchor from the checkpoint folder the trainer will resume from
(the same rule as verl's `_load_checkpoint`: trainer.resume_mode auto / resume_path / disable).
Older verl or a custom trainer: call `save_anchor(step_dir)` / `load_anchor(step_dir)` yourself.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from hadw.integrations.verl.estimator import STORE, check_setup

logger = logging.getLogger(__name__)

ANCHOR_STATE_NAME = "hadw_anchor.json"

try:
    from verl.trainer.ppo.checkpoint_callback import CheckpointCallback
except ImportError:  # verl < 0.9: no callback hook; the class still works as a plain object

    class CheckpointCallback:
        def __init__(self, config=None):
            self.config = config


def save_anchor(step_dir: str | os.PathLike) -> str | None:
    """Write the anchor state to step_dir/hadw_anchor.json; None (nothing written) before the first step."""
    state = STORE.state_dict()
    if state is None:
        return None
    os.makedirs(step_dir, exist_ok=True)
    path = os.path.join(step_dir, ANCHOR_STATE_NAME)
    with open(path, "w") as f:
        json.dump(state, f)
    return path


def load_anchor(step_dir: str | os.PathLike) -> bool:
    """Restore the anchor from step_dir/hadw_anchor.json if present; returns whether it was."""
    path = os.path.join(step_dir, ANCHOR_STATE_NAME)
    if not os.path.exists(path):
        logger.warning("%s not found: the HA-DW anchor starts afresh", path)
        return False
    with open(path) as f:
        STORE.load_state_dict(json.load(f))
    return True


def resume_folder(config: Any) -> str | None:
    """The global_step_N folder verl's trainer will resume from, or None (mirrors its _load_checkpoint)."""
    trainer = config.trainer
    mode = trainer.get("resume_mode", "auto")
    if mode == "disable":
        return None
    if mode == "resume_path":
        folder = trainer.resume_from_path
    elif mode == "auto":
        base = os.path.abspath(trainer.default_local_dir)
        tracker = os.path.join(base, "latest_checkpointed_iteration.txt")
        if not os.path.exists(tracker):
            return None
        with open(tracker) as f:
            folder = os.path.join(base, f"global_step_{int(f.read().strip())}")
    else:
        raise ValueError(f"trainer.resume_mode={mode!r}; allowed: auto, resume_path, disable")
    return os.path.abspath(folder) if folder else None


class HADWCheckpointCallback(CheckpointCallback):
    """verl v1 `trainer.checkpoint_callback_class`: saves the anchor with each checkpoint, restores on resume."""

    def __init__(self, config=None):
        super().__init__(config=config)
        if config is not None:  # the one start-up hook that sees the whole trainer config
            check_setup(config)
            STORE.checked = True
        folder = resume_folder(config) if config is not None else None
        if folder is not None:
            load_anchor(folder)

    def on_save(self, trainer, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs) -> None:
        save_anchor(checkpoint_dir)
