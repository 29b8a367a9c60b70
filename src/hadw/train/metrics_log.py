"""Metrics out of a run: JSONL always (one object per step), TensorBoard and W&B when asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hadw.metrics import (
    FINAL_EVAL_FILE,
    FINAL_EVAL_PROBLEMS_FILE,
    METRICS_FILE,
    SAMPLES_FILE,
    MetricsFileError,
    dumps,
    eval_problem_rows,
    read_jsonl,
)
from hadw.safe_files import atomic_write_text, open_append

__all__ = ["METRICS_FILE", "SAMPLES_FILE", "MetricsFileError", "MetricsLogger", "read_jsonl"]
WANDB_ID_FILE = "wandb_id"  # the W&B run id, so that --resume continues the same W&B run


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
                kept = [r for r in read_jsonl(run_dir / name) if _step(r) <= resume_step]
                atomic_write_text(run_dir / name, "".join(dumps(r) + "\n" for r in kept))
            for name in (FINAL_EVAL_FILE, FINAL_EVAL_PROBLEMS_FILE):  # written again when the run finishes
                (run_dir / name).unlink(missing_ok=True)
        self._metrics = open_append(run_dir / METRICS_FILE)  # never through a planted link
        self._samples = open_append(run_dir / SAMPLES_FILE)
        self._tb = self._wandb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))
        if wandb:
            import wandb as wandb_module

            id_file = run_dir / WANDB_ID_FILE
            run_id = id_file.read_text().strip() if id_file.is_file() else wandb_module.util.generate_id()
            atomic_write_text(id_file, run_id + "\n")
            self._wandb = wandb_module.init(
                project=wandb_project, dir=str(run_dir), config=config or {}, id=run_id, resume="allow"
            )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._metrics.write(dumps({"step": step, **metrics}) + "\n")
        self._metrics.flush()
        numeric = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        if self._tb is not None:
            for key, value in numeric.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(numeric, step=step)

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        for sample in samples:
            self._samples.write(dumps({"step": step, **sample}) + "\n")
        self._samples.flush()

    def log_final_eval(self, summary: dict[str, dict[str, float]], report=None, sampled=None) -> None:
        """The final evaluation, {bucket: {metric: value}}, to final_eval.json (atomically) and the trackers.

        report: the greedy hadw.eval.evaluate.EvalReport it was made from (None: no held-out problems); sampled:
        the k-sample one (data.eval_samples), or None. Their per-problem scores go to final_eval_problems.jsonl
        (hadw.metrics.eval_problem_rows), written before final_eval.json so that a finished run (compare:
        final_eval.json) never lacks them."""
        problems = self.run_dir / FINAL_EVAL_PROBLEMS_FILE
        if report is not None:
            rows = eval_problem_rows(report.correct, report.problems, sampled.correct if sampled else None)
            atomic_write_text(problems, "".join(dumps(r, separators=(",", ":")) + "\n" for r in rows))
        else:  # a file left by an earlier evaluation must not pass for this one's
            problems.unlink(missing_ok=True)
        atomic_write_text(self.run_dir / FINAL_EVAL_FILE, dumps(summary, indent=1) + "\n")
        flat = {f"final/{bucket}/{name}": v for bucket, row in summary.items() for name, v in row.items()}
        if self._tb is not None:
            for key, value in flat.items():
                self._tb.add_scalar(key, value)
        if self._wandb is not None:
            self._wandb.summary.update(flat)

    def close(self) -> None:
        self._metrics.close()
        self._samples.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _step(row: dict) -> float:
    """A row's step; a hand-edited row without a numeric one sorts after every step (dropped on resume)."""
    step = row.get("step", 0)
    return step if isinstance(step, int | float) and not isinstance(step, bool) else float("inf")
