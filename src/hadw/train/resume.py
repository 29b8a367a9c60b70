"""--resume: which checkpoint, whether its settings may change, and the run folder's paths in their portable form.

A part of hadw.train.trainer.Trainer (a mixin: its methods use the trainer's fields).
"""

from __future__ import annotations

import errno
import shutil
import sys
import warnings
from pathlib import Path

from hadw.core import anchor_from_state
from hadw.eval.run_recipe import RUN_PATH_KEYS, portable_path, resolve_run_path
from hadw.train.checkpoint import (
    CheckpointError,
    load_checkpoint,
    read_state_json,
    resume_checkpoint,
    unreadable,
)
from hadw.train.config import Config
from hadw.train.policy_setup import warmup_lambda
from hadw.train.result import portable, with_paths  # noqa: F401  (hadw.train.resume's, as before)
from hadw.train.run_dir import RunDirError, check_trained_parameters_kept, config_differences, holds_run, saved_config

# Config keys whose change makes a saved anchor history incompatible.
ANCHOR_SETTINGS = ("hadw.anchor", "hadw.window_k", "hadw.kalman", "hadw.ema", "hadw.fixed", "hadw.prompt")


class ResumeChecks:
    """--resume: which checkpoint, whether its settings may change, the run's paths in their portable form."""

    def _resume(self, accept_changes: bool) -> tuple[Path | None, bool]:
        """--resume: (the checkpoint loaded, or None when the run restarts from step 0; whether it restarts)."""
        notes: list[str] = []  # a fallback from an unusable `latest`: said once the checkpoint is accepted
        try:
            checkpoint = resume_checkpoint(self.run_dir, notes.append)
            if checkpoint is None:
                if not holds_run(self.run_dir):
                    raise RunDirError(
                        f"--resume: no checkpoint in train.output_dir={self.run_dir} (no {self.run_dir}/latest); "
                        "run without --resume to start it"
                    )
                # stopped before its first checkpoint (no checkpoint folder at all): from step 0
                self._check_settings(saved_config(self.run_dir), self.run_dir / "config.yaml", accept_changes)
                print(f"--resume: {self.run_dir} has no checkpoint yet; restarting it from step 0", file=sys.stderr)
                return None, True
            self._resume_from(checkpoint, accept_changes)
        except OSError as err:  # a file of the run this process may not read, or failing storage: one line naming it
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise unreadable(err.filename or self.run_dir, err) from None
        for note in notes:
            print(note, file=sys.stderr)
        return checkpoint, False

    def _resume_from(self, checkpoint: Path, accept_changes: bool) -> None:
        """Load a checkpoint; settings that differ from the saved run's are refused unless accepted, and
        then really applied (lr, betas, weight decay, anchor), so config.yaml says what actually runs."""
        state_json = read_state_json(checkpoint)  # its fields checked first (CheckpointError)
        if state_json["step"] > self.cfg.train.steps:  # else the loop never runs and the run ends "done"
            raise RunDirError(
                f"--resume: {checkpoint} is at step {state_json['step']}, past train.steps={self.cfg.train.steps}; "
                f"allowed: train.steps >= {state_json['step']} to go on from it"
            )
        diffs = self._check_settings(state_json["config"], checkpoint, accept_changes)
        check_trained_parameters_kept(diffs, checkpoint)  # before loading blames the checkpoint
        state = load_checkpoint(checkpoint, self.model, self.optimizer, self.scheduler)
        self.start_step = state["step"]
        anchor_keys = [d for d in diffs if d.startswith(ANCHOR_SETTINGS)]
        if anchor_keys:
            warnings.warn(
                f"--accept-changes: the anchor setting changed ({'; '.join(anchor_keys)}); the anchor starts "
                "empty instead of from the saved history",
                stacklevel=2,
            )
        else:
            try:
                self.anchor = anchor_from_state(state["anchor"])
            except (ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
                raise CheckpointError(
                    f"{checkpoint / 'state.json'}: field 'anchor' cannot be loaded ({type(err).__name__}: {err})"
                ) from None
        if diffs:  # accepted: the saved optimiser must not silently keep the old lr / betas / decay
            o, schedule = self.cfg.optim, warmup_lambda(self.cfg.optim.warmup_steps)
            lr = o.lr * schedule(self.scheduler.last_epoch)
            for group in self.optimizer.param_groups:
                group.update(lr=lr, initial_lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
            self.scheduler.base_lrs = [o.lr for _ in self.optimizer.param_groups]
            self.scheduler._last_lr = [lr for _ in self.optimizer.param_groups]
            print(f"--resume --accept-changes: applied {'; '.join(diffs)}", file=sys.stderr)

    def portable_config(self) -> Config:
        """The config as the run's files record it: local paths relative to the run folder (RUN_PATH_KEYS)."""
        return portable(self.cfg, self.run_dir)

    def _check_settings(self, saved: dict, where: Path, accept_changes: bool) -> list[str]:
        """The settings that differ from the saved run's (config_differences); refused unless accepted. Paths are
        compared in the run-relative form both ways (an older run recorded them as typed)."""
        for key in RUN_PATH_KEYS:
            section, name = key.split(".")
            value = (saved.get(section) or {}).get(name)
            if isinstance(value, str) and value:
                saved[section][name] = portable_path(resolve_run_path(value, self.run_dir, key), self.run_dir)
        diffs = config_differences(saved, self.portable_config().to_dict(), Config().to_dict())
        if diffs and not accept_changes:
            raise RunDirError(
                f"--resume: the settings differ from the saved run in {where} ({'; '.join(diffs)}); "
                "pass the saved values, or --accept-changes to apply the new ones"
            )
        return diffs

    def _clean_leftovers(self) -> None:
        """Drop half-written checkpoint and final-model folders (temporary names only). Checkpoints are never
        deleted here: one newer than the resumed step is replaced when the run reaches that step again."""
        for tmp in [*self.run_dir.glob(".tmp-checkpoint-*"), *self.run_dir.glob(".final_model.tmp*")]:
            if tmp.is_symlink():
                tmp.unlink()
            shutil.rmtree(tmp, ignore_errors=True)
