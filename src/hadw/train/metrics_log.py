"""Metrics out of a run: JSONL always (one object per step), TensorBoard and W&B when asked."""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

from hadw.errors import UserError

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"


class MetricsFileError(UserError, ValueError):
    """A metrics / samples log with a corrupt line that is not the last one."""


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; keep them visible as strings
    return value


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL log. A last line cut short (full disk, kill -9 mid-write) is dropped with a
    warning; a bad line elsewhere raises ValueError naming the file and line."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            if any(rest.strip() for rest in lines[number:]):
                raise MetricsFileError(f"{path}:{number}: not a JSON record ({err.msg})") from None
            warnings.warn(f"{path}:{number}: dropped an unfinished last line (the run was cut off)", stacklevel=2)
    return records


class MetricsLogger:
    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool = False,
        wandb: bool = False,
        wandb_project: str = "hadw",
        config: dict | None = None,
        resume_step: int | None = None,
    ):
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:  # drop what the interrupted run logged after its checkpoint
            for name in (METRICS_FILE, SAMPLES_FILE):
                kept = [r for r in read_jsonl(run_dir / name) if r.get("step", 0) <= resume_step and not r.get("final")]
                tmp = run_dir / f".{name}.tmp"
                with tmp.open("w", encoding="utf-8") as f:
                    f.write("".join(json.dumps(r) + "\n" for r in kept))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, run_dir / name)
        self._metrics = (run_dir / METRICS_FILE).open("a", encoding="utf-8")
        self._samples = (run_dir / SAMPLES_FILE).open("a", encoding="utf-8")
        self._tb = self._wandb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))
        if wandb:
            import wandb as wandb_module

            self._wandb = wandb_module.init(project=wandb_project, dir=str(run_dir), config=config or {})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        self._metrics.write(json.dumps(record) + "\n")
        self._metrics.flush()
        numeric = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        if self._tb is not None:
            for key, value in numeric.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(numeric, step=step)

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        for sample in samples:
            self._samples.write(json.dumps({"step": step, **sample}) + "\n")
        self._samples.flush()

    def close(self) -> None:
        self._metrics.close()
        self._samples.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
