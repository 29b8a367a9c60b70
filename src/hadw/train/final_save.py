"""The run's last files: final_model/ (and merged_model/ for a LoRA run), written under a temporary name, fsynced and
renamed: never half there.

A part of hadw.train.trainer.Trainer (a mixin: its methods use the trainer's fields).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hadw.rollout import load_model
from hadw.rollout.lora import is_lora, write_base_record
from hadw.safe_files import disk_full_is_one_line
from hadw.train.checkpoint import (
    fsync_path,
    replace_dir,
)


class FinalSaves:
    """The run's last files: final_model/ and merged_model/, written whole or not at all."""

    def _save_final_model(self) -> None:
        """final_model/ is written under a temporary name, fsynced and renamed: never half there."""
        final, tmp = self.run_dir / "final_model", self.run_dir / f".final_model.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            with disk_full_is_one_line(str(final), self._after_full_disk()):
                self.model.save_pretrained(tmp)
                self.tokenizer.save_pretrained(tmp)
                write_base_record(self.model, tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # a half-written model never stays on a full disk
            raise
        replace_dir(tmp, final)
        fsync_path(self.run_dir)
        if is_lora(self.model) and self.cfg.model.lora.save_merged:
            self._save_merged_model(final)

    def _save_merged_model(self, adapter_dir: Path) -> None:
        """merged_model/: the base with final_model/'s adapter merged in, a normal model folder. Built from the
        saved files on the CPU, so the training device never holds a second copy of the weights."""
        merged_dir = self.run_dir / "merged_model"
        tmp = self.run_dir / f".final_model.tmp-merged{os.getpid()}"  # _clean_leftovers' pattern
        shutil.rmtree(tmp, ignore_errors=True)
        merged, tokenizer = load_model(adapter_dir, self.cfg.model.dtype, "cpu")
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        replace_dir(tmp, merged_dir)
        fsync_path(self.run_dir)
