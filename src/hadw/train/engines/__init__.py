"""Who trains a run: the config's `engine` key. native = hadw's Trainer in this process; trl = TRL's GRPOTrainer with
HA-DW under accelerate (hadw.train.engines.trl_launch). Either way the run folder, its evaluation and every command
that reads it are hadw's. `hadw train` and `hadw compare` start every run here."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hadw.train.config import Config
    from hadw.train.result import TrainResult

ENGINES = ("native", "trl")


def train_run(
    cfg: Config,
    resume: bool = False,
    overwrite: bool = False,
    accept_changes: bool = False,
    progress: bool | str | None = None,
) -> TrainResult:
    """Train `cfg` with its engine; see hadw.train.trainer.Trainer for the arguments (progress: a hadw.progress mode
    overriding logging.progress; the TRL engine shows TRL's own bar unless it is off)."""
    if cfg.engine == "trl":
        from dataclasses import replace

        from hadw.train.engines.trl_launch import train_trl

        if progress is not None and progress in (False, "off"):
            cfg = replace(cfg, logging=replace(cfg.logging, progress="off"))
        return train_trl(cfg, resume=resume, overwrite=overwrite, accept_changes=accept_changes)
    from hadw.train.trainer import Trainer

    trainer = Trainer(cfg, resume=resume, overwrite=overwrite, accept_changes=accept_changes)
    return trainer.train(progress)
