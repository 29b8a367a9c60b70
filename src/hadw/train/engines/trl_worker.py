"""engine=trl's worker: one training process (one rank) of TRL's GRPOTrainer with HA-DW, writing hadw's run folder.

    python -m hadw.train.engines.trl_worker RUN_DIR [--resume-from CHECKPOINT]      (hadw train starts it, under
                                                                                   `accelerate launch` for n > 1)

`hadw train` (the parent, hadw.train.engines.trl_launch) has validated the config, claimed and locked RUN_DIR and
written its config.yaml; this process reads that config. Every rank trains; rank 0 writes what a native run writes:
metrics.jsonl (hadw's metric names, one row a rollout batch), samples.jsonl, reward_errors.jsonl, the periodic and
final held-out evaluation (hadw.train.held_out, the native trainer's), final_eval.json + final_eval_problems.jsonl
and final_model/. Checkpoints are TRL's checkpoint-<optimiser step> folders with the anchor (hadw_anchor.json).
A stop signal ends at the next rollout-batch boundary in a checkpoint, agreed by every rank.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from hadw import metrics as M
from hadw.errors import SignalStop, UserError
from hadw.metrics import TRL_ERROR_FILE as ERROR_FILE  # rank 0's one-line error: the parent shows it once
from hadw.metrics import TRL_STOPPED_FILE as STOPPED_FILE  # stopped by a signal, at a checkpoint
from hadw.safe_files import atomic_write_text, open_append

MODEL_CARD = "---\nlibrary_name"  # how TRL's model card (README.md, beside the checkpoints) begins


def is_main() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def start_model(cfg) -> str:
    """The model a run starts from: model.path, or the shipped warm start of a tiny run (no SFT under engine=trl)."""
    from hadw.train.config import ConfigError
    from hadw.train.model_defaults import shipped_warm_start

    if cfg.model.path:
        from hadw.rollout.names import is_hub_id

        path = Path(cfg.model.path)
        if not path.exists() and not is_hub_id(cfg.model.path):
            raise ConfigError(f"model.path={cfg.model.path}: no such folder")
        if path.exists() and not (path / "config.json").is_file():
            raise ConfigError(f"model.path={cfg.model.path}: not a model folder (no config.json)")
        return cfg.model.path
    shipped = shipped_warm_start(cfg)
    if shipped is None:
        raise ConfigError(
            "engine=trl needs model.path (a model folder or Hub id) or a shipped warm start of the tiny model; "
            "allowed: set model.path, e.g. to a `hadw sft` output, or train this tiny run with engine=native"
        )
    from hadw.train import warm_starts as W

    path, _ = W.resolve(shipped)
    return str(path)


class RunRewards:
    """hadw's rewards as TRL reward functions: one callable a reward.functions entry, named by it, each returning
    that reward's scores of the batch. The first of them scores the whole batch once through score_problems (the
    native trainer's call: timeouts, error counting, the row's columns) and records what the run folder shows."""

    def __init__(self, cfg, problems: list, stats: dict[str, Any], report):
        from hadw.rewards import RewardSpec, resolve_reward
        from hadw.rewards.base import FailureWatch

        self.cfg, self.problems, self.stats = cfg, problems, stats
        rw = cfg.reward
        weights = rw.weights or [1.0] * len(rw.functions)
        self.specs = [
            RewardSpec(name, w, resolve_reward(name, name in rw.isolated))
            for name, w in zip(rw.functions, weights, strict=True)
        ]
        self.watch = {name: FailureWatch(name, rw.max_failed_steps, report) for name in rw.functions}
        self.result = None
        self.step = 0  # the rollout batch being scored (0-based), set by the callback

    def functions(self) -> list:
        def make(name: str):
            def reward(prompts, completions, hadw_row, completion_ids=None, **_):
                if name == self.specs[0].name:
                    self._score(list(completions), [self.problems[i] for i in hadw_row], completion_ids)
                return self.result.per_reward[name].tolist()

            reward.__name__ = name  # TRL's reward_func_names (hadw_correctness_reward names one)
            return reward

        return [make(spec.name) for spec in self.specs]

    def _score(self, completions: list[str], rows: list, completion_ids) -> None:
        from accelerate.utils import gather_object

        from hadw.rewards import score_problems
        from hadw.rewards.loader import RewardState

        rw = self.cfg.reward
        r = score_problems(
            completions, rows, self.cfg.data.template, self.specs, rw.correctness, rw.timeout_s,
            rw.completion_format, completion_ids, RewardState(self.step, self.cfg.train.steps),
        )  # fmt: skip
        self.result = r
        levels = [(p.level, float(c)) for p, c in zip(rows, r.correctness.tolist(), strict=True)]
        mine = {
            "failed": (r.num_errors, r.num_timeouts),
            "errors": r.errors,
            "first": r.first_errors,
            "failed_all": r.failed_all,
            "levels": levels,
            "rows": [
                {"prompt": p.question, "answer": p.answer, "completion": c}
                for p, c in zip(rows, completions, strict=True)
            ],
        }
        every = gather_object([mine])  # one entry a rank, in rank order; every rank calls the rewards in step
        self.stats[M.REWARD_ERRORS] = float(sum(e["failed"][0] for e in every))
        self.stats[M.REWARD_TIMEOUTS] = float(sum(e["failed"][1] for e in every))
        by_level: dict[Any, list[float]] = {}
        for level, correct in (pair for e in every for pair in e["levels"]):
            if level is not None:
                by_level.setdefault(level, []).append(correct)
        for level, values in by_level.items():
            self.stats[M.score_level(level)] = sum(values) / len(values)
        for name, watch in self.watch.items():  # the same on every rank: a broken reward stops all of them
            kinds: dict[str, int] = {}
            for e in every:
                for kind, count in e["errors"].get(name, {}).items():
                    kinds[kind] = kinds.get(kind, 0) + count
            first = next((e["first"][name] for e in every if name in e["first"]), None)
            failed_all = all(name in e["failed_all"] for e in every)
            watch.see(kinds, first, failed_all, [row for e in every for row in e["rows"]])
        every_n = self.cfg.logging.sample_every
        if every_n and self.step % every_n == 0:
            count = self.cfg.logging.num_samples
            picked = list(zip(rows, completions, r.total.tolist(), r.correctness.tolist(), strict=True))[:count]
            self.stats["_samples"] = [
                {"question": p.question, "answer": p.answer, "response": c, "reward": float(t), "correct": float(k)}
                for p, c, t, k in picked
            ]


def _callback(cfg, run_dir: Path, layout: dict, rewards: RunRewards, stats: dict, logger, eval_problems: list):
    """The TrainerCallback that makes TRL's run hadw's: a metrics row a rollout batch, periodic evaluation, the stop."""
    from accelerate.utils import gather_object
    from transformers import TrainerCallback

    from hadw.train.engines.trl_args import TRL_METRICS

    k = layout["updates_per_step"]
    correctness_key = f"rewards/{cfg.reward.correctness}/mean"

    class RunFolder(TrainerCallback):
        def __init__(self):
            self.trainer: Any = None
            self.stop_signal: int | None = None
            self.last = time.perf_counter()
            self.pending: dict[str, float] = {}  # the periodic evaluation, for the step's metrics row

        def on_step_begin(self, args, state, control, **kw):
            rewards.step = state.global_step // k  # the rollout batch the next generation scores

        def on_step_end(self, args, state, control, **kw):
            if state.global_step % k:
                return
            step = state.global_step // k
            if cfg.train.eval_every and step % cfg.train.eval_every == 0 and step < cfg.train.steps:
                self.pending = self._evaluate()
            stopped = any(gather_object([self.stop_signal is not None]))  # every rank stops at the same step
            if stopped and step < cfg.train.steps:
                control.should_save = control.should_training_stop = True
                self.stop_signal = self.stop_signal or signal.SIGTERM
            if state.global_step == state.max_steps:
                control.should_save = True  # the last checkpoint, as the native trainer writes

        def _evaluate(self) -> dict[str, float]:
            from hadw.train.held_out import evaluate_held_out

            out: dict[str, float] = {}
            if is_main() and eval_problems:
                model = self.trainer.accelerator.unwrap_model(self.trainer.model)
                was_training = model.training
                model.eval()
                summary, _, _ = evaluate_held_out(model, self.trainer.processing_class, cfg, eval_problems)
                model.train(was_training)
                out = M.flatten_eval(summary)
            self.trainer.accelerator.wait_for_everyone()
            return out

        def on_log(self, args, state, control, logs=None, **kw):
            if not is_main() or logs is None or "train_runtime" in logs or state.global_step % k:
                return
            step = state.global_step // k
            row = {hadw: float(logs[trl]) for trl, hadw in TRL_METRICS.items() if trl in logs}
            if M.PG_LOSS not in row and "loss" in logs:
                row[M.PG_LOSS] = float(logs["loss"])
            if correctness_key in logs:
                row[M.SCORE_MEAN] = float(logs[correctness_key])
            row |= {key: float(v) for key, v in logs.items() if key.startswith(("hadw/", "critic/advantages/"))}
            now = time.perf_counter()
            row[M.TIME_STEP], self.last = now - self.last, now
            samples = stats.pop("_samples", None)
            row |= {key: v for key, v in stats.items() if not key.startswith("_")}
            row |= self.pending
            self.pending = {}
            logger.log(step, row)
            if samples:
                logger.log_samples(step, samples)

    return RunFolder()


def train(run_dir: Path, resume_from: str | None) -> int:
    import torch

    from hadw.data import render_prompt
    from hadw.integrations.trl import HADWGRPOConfig, HADWGRPOTrainer
    from hadw.rollout import load_model
    from hadw.train.config import load_config
    from hadw.train.engines.trl_args import batch_layout, grpo_kwargs
    from hadw.train.held_out import CHAT
    from hadw.train.metrics_log import MetricsLogger
    from hadw.train.prompts import PromptSource
    from hadw.train.watch import REWARD_ERRORS_FILE

    cfg = load_config(run_dir / "config.yaml")
    if cfg.train.num_threads > 0:
        torch.set_num_threads(cfg.train.num_threads)
    layout = batch_layout(cfg)
    source = PromptSource(cfg.data, cfg.train.seed)
    P = cfg.train.prompts_per_step
    problems = [p for step in range(cfg.train.steps) for p in source.batch(step, P)]  # the native prompt stream
    eval_problems = source.eval_problems()
    model, tokenizer = load_model(start_model(cfg), cfg.model.dtype, "cpu", cfg.model.trust_remote_code)
    from datasets import Dataset

    texts = [render_prompt(p, cfg.data.template, tokenizer, CHAT[cfg.data.chat_template]) for p in problems]
    dataset = Dataset.from_dict({"prompt": texts, "hadw_row": list(range(len(problems)))})

    def report(name: str, line: str, error, row: dict) -> None:  # a reward's first error: one line, one record
        if is_main():
            print(f"warning: {line} (later errors are counted in reward/errors, reward/timeouts)", file=sys.stderr)
            record = {"step": rewards.step + 1, "reward": name, "kind": error.kind, "message": error.message}
            with open_append(run_dir / REWARD_ERRORS_FILE) as f:  # never through a planted link
                f.write(M.dumps(record | {"row": row}) + "\n")

    stats: dict[str, Any] = {}
    rewards = RunRewards(cfg, problems, stats, report)
    kwargs = grpo_kwargs(cfg, run_dir)
    if not torch.cuda.is_available():
        kwargs["use_cpu"] = True
    args = HADWGRPOConfig(**kwargs)
    resume_step = int(Path(resume_from).name.rsplit("-", 1)[1]) // layout["updates_per_step"] if resume_from else None
    logger = None
    if is_main():
        logger = MetricsLogger(
            run_dir, cfg.logging.tensorboard, cfg.logging.wandb, cfg.logging.wandb_project, cfg.to_dict(), resume_step
        )
    callback = _callback(cfg, run_dir, layout, rewards, stats, logger, eval_problems)
    start = start_model(cfg)
    if cfg.model.lora.enabled:  # hadw's adapters (the native ones: the base's fingerprint is saved beside them)
        from hadw.rollout.lora import LoraSettings, add_lora

        lo = cfg.model.lora
        model = add_lora(model, LoraSettings(lo.rank, lo.alpha, lo.dropout, lo.target_modules), start)
    trainer = HADWGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=rewards.functions(),
        args=args,
        train_dataset=dataset,
        callbacks=[callback],
    )
    callback.trainer = trainer
    _native_schedule(trainer, cfg.optim.warmup_steps)

    def on_signal(signum, frame):
        callback.stop_signal = signum

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    try:
        trainer.train(resume_from_checkpoint=resume_from)
        if callback.stop_signal is not None:
            if is_main():
                atomic_write_text(run_dir / STOPPED_FILE, f"{callback.stop_signal}\n")
            return 128 + callback.stop_signal
        _finish(cfg, run_dir, trainer, tokenizer, logger, eval_problems)
    finally:
        if logger is not None:
            logger.close()
    return 0


def _native_schedule(trainer, warmup_steps: int) -> None:
    """The native trainer's learning-rate schedule (linear warm-up from 1/warmup_steps of lr, then constant) in place of
    transformers' constant_with_warmup, whose first step has lr 0: the two engines step alike from the first step."""
    import torch

    from hadw.train.policy_setup import warmup_lambda

    def create_scheduler(num_training_steps: int, optimizer=None):
        if trainer.lr_scheduler is None:
            optimizer = optimizer or trainer.optimizer
            trainer.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_lambda(warmup_steps))
        return trainer.lr_scheduler

    trainer.create_scheduler = create_scheduler


def _finish(cfg, run_dir: Path, trainer, tokenizer, logger, eval_problems: list) -> None:
    """final_model/ (gathered from every rank: ZeRO-3 included), then the final evaluation of exactly that folder
    (what `hadw eval RUN_DIR` reads): final_eval_problems.jsonl, and final_eval.json last (a run with it is done)."""
    tmp = run_dir / ".final_model.tmp"
    trainer.save_model(str(tmp))  # every rank: under ZeRO-3 the weights are gathered
    if is_main():
        from hadw.rollout.lora import write_base_record

        write_base_record(trainer.accelerator.unwrap_model(trainer.model), tmp)  # a LoRA adapter: its base
        for extra in ("training_args.bin", "README.md"):  # transformers' pickle of its arguments, TRL's model card:
            (tmp / extra).unlink(missing_ok=True)  # a model folder holds neither (nothing in one is unpickled)
        card = run_dir / "README.md"  # TRL's model card, written beside the checkpoints: a run folder has none
        if card.is_file() and not card.is_symlink() and card.read_text(errors="replace").startswith(MODEL_CARD):
            card.unlink()
        tokenizer.save_pretrained(str(tmp))
        final = run_dir / "final_model"
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        from hadw.rollout import load_model
        from hadw.train.held_out import evaluate_held_out

        summary, greedy, sampled = {}, None, None
        if eval_problems:
            model, tok = load_model(final, cfg.model.dtype, "cpu", cfg.model.trust_remote_code)
            summary, greedy, sampled = evaluate_held_out(model, tok, cfg, eval_problems)
        logger.log_final_eval(summary, greedy, sampled)
    trainer.accelerator.wait_for_everyone()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hadw.train.engines.trl_worker", description=__doc__)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--resume-from", default=None, help="a checkpoint-N folder of the run")
    a = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    run_dir = a.run_dir.absolute()
    try:
        return train(run_dir, a.resume_from)
    except SignalStop as err:
        return 128 + err.signum
    except UserError as err:  # one line, from rank 0 only (every rank meets the same error); the parent shows it
        line = " ".join(str(err).split()) or type(err).__name__
        if is_main():
            atomic_write_text(run_dir / ERROR_FILE, line + "\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
