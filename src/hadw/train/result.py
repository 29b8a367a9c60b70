"""What a training run returns and the one error it stops with, whichever engine trained it: light (no torch), so that
`hadw train engine=trl`'s parent, which only launches the workers, never imports the native trainer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hadw.eval.run_recipe import RUN_PATH_KEYS, portable_path


class NonFiniteLossError(RuntimeError):
    """The loss or gradient became NaN/inf; the run stops before the optimiser step corrupts the model."""


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    final_eval: dict[str, dict[str, float]] | None
    # the reward failed on every completion of the final evaluation ("kind: message"): final_eval has no accuracy
    eval_failure: str | None = None


def with_paths(cfg, convert):
    """cfg (a hadw Config) with convert(value) applied to every path key (RUN_PATH_KEYS)."""
    from dataclasses import replace

    for key in RUN_PATH_KEYS:
        section, name = key.split(".")
        part = getattr(cfg, section)
        cfg = replace(cfg, **{section: replace(part, **{name: convert(getattr(part, name))})})
    return cfg


def portable(cfg, run_dir: Path):
    """The config as a run in `run_dir` records it (config.yaml, checkpoints): local paths relative to the run."""
    return with_paths(cfg, lambda value: portable_path(value, run_dir))
