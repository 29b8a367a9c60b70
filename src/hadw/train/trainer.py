"""The RLVR training loop: GRPO, GSPO or DAPO, with or without HA-DW.

One step, top to bottom (docs/method.md, "the product in one picture"):
    prompts → rollouts (G per prompt) → rewards → group advantages → HA-DW weights (anchor updated once,
    from every response of the batch) → [DAPO: keep non-degenerate groups] → PPO-style epochs over
    mini-batches with AdamW (optim.name=sgd: plain SGD) → metrics, samples, checkpoint.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import signal
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from hadw import metrics as M
from hadw.core import Anchor, apply_hadw, compute_advantages, policy_loss, scale_advantages
from hadw.core.anchors import ANCHOR_KEY_COLUMN
from hadw.core.shaping import overlong_penalty
from hadw.data import Problem, render_prompt
from hadw.errors import UserError
from hadw.eval.memory import peak_memory_metrics
from hadw.eval.run_recipe import RUN_PATH_KEYS, write_run_paths
from hadw.progress import Bar
from hadw.rewards import RewardSpec, resolve_reward, score_problems
from hadw.rewards.base import FailureWatch
from hadw.rewards.loader import RewardState
from hadw.rollout import HFRolloutEngine, RolloutBatch, SamplingParams, compute_logprobs
from hadw.rollout.batch import completion_ids
from hadw.rollout.lora import is_lora, reference_policy
from hadw.rollout.models import model_device
from hadw.rollout.precision import resolve_compute_dtype
from hadw.safe_files import atomic_write_text, disk_full_is_one_line
from hadw.train.checkpoint import (
    latest_checkpoint,
    save_checkpoint,
)
from hadw.train.config import Config, ConfigError, config_to_yaml, resolve_recipe
from hadw.train.dynamic_sampling import Rollout, concat_rollouts, level_metrics, select_groups, select_rows
from hadw.train.final_save import FinalSaves
from hadw.train.held_out import evaluate_held_out
from hadw.train.metrics_log import MetricsLogger
from hadw.train.policy_setup import PolicySetup, _check_master_weights, make_optimizer, warmup_lambda
from hadw.train.prompts import PromptSource
from hadw.train.result import NonFiniteLossError, TrainResult
from hadw.train.resume import ResumeChecks
from hadw.train.run_dir import claim_run_dir
from hadw.train.stopping import Interrupted, SignalStops  # noqa: F401  (Interrupted: hadw.train.trainer's, as before)
from hadw.train.watch import REWARD_ERRORS_FILE, RunWatch, measured_no_signal_causes  # noqa: F401  (as before)


@dataclass
class MiniBatch:
    """Rows of a rollout batch on the training device; slicing or indexing it selects rows of every field.

    input_ids, attention_mask: [B, P + R] (prompt left-padded, response right-padded);
    response_mask, old_logprobs, ref_logprobs: [B, R]; advantages: [B] (Â·Φ, one per response).
    ref_logprobs is None without a KL term.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    ref_logprobs: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, rows) -> MiniBatch:
        return MiniBatch(**{f.name: _take(getattr(self, f.name), rows) for f in fields(self)})


def _take(tensor: torch.Tensor | None, rows) -> torch.Tensor | None:
    return None if tensor is None else tensor[rows]


def anchor_keys(anchor: Anchor, rows: list[Problem]) -> list[Any] | None:
    """Each response's level / source / prompt uid for the keyed anchors (None for the others); a data
    source without that column cannot be weighed per level: one line, exit 2."""
    if not anchor.needs_keys:
        return None
    column = ANCHOR_KEY_COLUMN[anchor.kind]
    keys = [getattr(p, column) for p in rows]
    if any(k is None for k in keys):
        raise UserError(f"hadw.anchor={anchor.kind} needs a {column} for every prompt; this data source has none")
    return keys


def _step_seed(seed: int, step: int, salt: int = 0) -> int:
    return (seed * 1_000_003 + step * 7_919 + salt) % (1 << 62)


class Trainer(PolicySetup, ResumeChecks, SignalStops, FinalSaves, RunWatch):
    def __init__(
        self,
        cfg: Config,
        model=None,
        tokenizer=None,
        resume: bool = False,
        overwrite: bool = False,
        accept_changes: bool = False,
    ):
        """resume: continue from run_dir's latest checkpoint. overwrite: move a run already in run_dir
        aside. accept_changes: let a resumed run use settings that differ from the saved ones (else a
        difference raises RunDirError listing them)."""
        self.cfg = cfg = resolve_recipe(cfg)  # a Config built in Python may still say "auto"
        # Absolute: a reward that changes the working directory (a sandbox) must not send checkpoints elsewhere.
        self.run_dir = Path(cfg.train.output_dir).absolute()
        # Lock and check the folder before anything is written to it (init_model, logs).
        self._lock, aside = claim_run_dir(self.run_dir, resume, overwrite)
        if aside is not None:
            print(f"moved the previous run in {self.run_dir} to {aside}", file=sys.stderr)
        self._stop_signal: int | None = None
        try:
            self._setup(model, tokenizer, resume, accept_changes)
        except BaseException:
            self._lock.release()
            raise

    def _setup(self, model, tokenizer, resume: bool, accept_changes: bool) -> None:
        cfg = self.cfg
        if cfg.train.num_threads > 0:
            torch.set_num_threads(cfg.train.num_threads)
        self._seed_everything(cfg.train.seed)
        try:  # before the model: a bad data file fails in a second, not after loading a large model
            self.source = PromptSource(cfg.data, cfg.train.seed)
        except ValueError as err:
            if isinstance(err, UserError):
                raise
            raise ConfigError(f"data.source={cfg.data.source!r}: {err}") from None
        base = cfg.model.path or None
        if model is None:
            model, tokenizer, base = self._load_model()
        if cfg.model.lora.enabled and not is_lora(model):
            model = self._add_lora(model, base)
        _check_master_weights(model)
        self.model, self.tokenizer = model, tokenizer
        self.device = model_device(model)
        self._kl = cfg.algorithm.kl_coef > 0
        # The KL reference: a frozen copy of the start weights; with LoRA the base itself, adapters switched off
        self.ref_model = self._load_reference() if self._kl and not is_lora(model) else None
        self.engine = HFRolloutEngine(
            model,
            tokenizer,
            max_batch_size=cfg.rollout.max_batch_size,
            decoder=cfg.rollout.decoder,
            memory_budget_gb=cfg.rollout.memory_budget_gb,
        )
        # Sampled log-probs equal a teacher-forced re-scoring to ~1e-6 in float32 (tests/test_rollout.py);
        # under bf16 autocast the cached decoder rounds differently, so the ratio would not start at 1.
        self.compute_dtype = resolve_compute_dtype(cfg.model.compute_dtype, self.device)  # "auto" for this device
        recompute, mixed = cfg.rollout.recompute_logprobs, self.compute_dtype != "float32"
        self._recompute_logprobs = recompute == "always" or (recompute == "auto" and mixed)
        self._skip_long_prompts()
        self._no_signal_streak, self._warned_no_signal = 0, False
        self.no_signal_warning: str | None = None
        self.loss_spec = cfg.algorithm.loss_spec(cfg.rollout.max_new_tokens)
        self.reward_specs = [
            RewardSpec(name, w, resolve_reward(name, name in cfg.reward.isolated))
            for name, w in zip(
                cfg.reward.functions, cfg.reward.weights or [1.0] * len(cfg.reward.functions), strict=True
            )
        ]
        # Each reward's errors made visible: first one shown once and saved, counted, a broken reward stops
        self._reward_watch = {
            name: FailureWatch(name, cfg.reward.max_failed_steps, self._report_reward_error)
            for name in dict.fromkeys([*cfg.reward.functions, cfg.reward.correctness])
        }
        self._reward_failures, self._step = 0, 0  # failed reward items so far (the progress line's err=)
        self._phase_s: dict[str, float] = {}  # this step's update phases (M.UPDATE_PHASES), seconds
        self._bar = Bar(None, "", mode="off")  # train()'s progress display (what _phase names)
        self.eval_failure: str | None = None  # the last evaluation's reward failed on every completion
        self.hadw = cfg.hadw.options()  # the one HA-DW schema (hadw.core.HADWOptions)
        self.anchor: Anchor = self.hadw.make_anchor()
        self.optimizer = make_optimizer(model, cfg, self.device)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_lambda(cfg.optim.warmup_steps))
        self.start_step = 0
        # `latest`, else the newest complete checkpoint folder; a folder whose checkpoints are all unusable
        # is refused (CheckpointError), so a resume never starts over beside checkpoints it cannot read.
        checkpoint, restart = self._resume(accept_changes) if resume else (None, False)
        self._clean_leftovers()
        self.logger = MetricsLogger(
            self.run_dir,
            cfg.logging.tensorboard,
            cfg.logging.wandb,
            cfg.logging.wandb_project,
            cfg.to_dict(),
            resume_step=self.start_step if (checkpoint is not None or restart) else None,
        )
        # never through a planted link; paths relative to the run folder (a moved project resumes with no edit)
        atomic_write_text(self.run_dir / "config.yaml", config_to_yaml(self.portable_config()))
        paths = {key: getattr(getattr(cfg, key.split(".")[0]), key.split(".")[1]) for key in RUN_PATH_KEYS}
        write_run_paths(self.run_dir, paths)

    # ------------------------------------------------------------------------------------ setup

    def autocast(self) -> AbstractContextManager:
        """Forward passes in model.compute_dtype (mixed precision); a no-op in float32."""
        dtype = self.compute_dtype
        if dtype == "float32":
            return nullcontext()
        return torch.autocast(self.device.type, dtype=getattr(torch, dtype))

    # ------------------------------------------------------------------------------------ rollout
    def _prompt_ids(self, problems: list[Problem]) -> list[list[int]]:
        chat = {"auto": "auto", "always": True, "never": False}[self.cfg.data.chat_template]
        texts = [render_prompt(p, self.cfg.data.template, self.tokenizer, chat) for p in problems]
        return [self.tokenizer(t, add_special_tokens=False).input_ids for t in texts]

    def _sample_round(self, step: int, round_: int) -> Rollout:
        cfg, r = self.cfg, self.cfg.rollout
        problems = self.source.batch(step, cfg.train.prompts_per_step, round_)
        params = SamplingParams(
            n=r.group_size,
            temperature=r.temperature,
            top_p=r.top_p,
            top_k=r.top_k,
            max_new_tokens=r.max_new_tokens,
            seed=_step_seed(cfg.train.seed, step, round_),
        )
        t0 = time.perf_counter()
        self._phase("generating")
        self.model.eval()
        with self.autocast():
            batch = self.engine.generate(self._prompt_ids(problems), params)
        t1 = time.perf_counter()
        self._phase("scoring")
        rows = [problems[i] for i in batch.prompt_index.tolist()]
        rw = cfg.reward
        state = RewardState(step, cfg.train.steps)  # TRL's trainer_state: the step being scored
        rewards = score_problems(
            batch.response_texts, rows, cfg.data.template, self.reward_specs, rw.correctness, rw.timeout_s,
            rw.completion_format, completion_ids(batch), state,
        )  # fmt: skip
        group_ids = batch.prompt_index + round_ * cfg.train.prompts_per_step
        return Rollout(batch, rewards, group_ids, rows, t1 - t0, time.perf_counter() - t1)

    def collect(self, step: int) -> tuple[Rollout, int]:
        """Sample the step's rollout batch; with dynamic sampling, refill until enough groups are informative."""
        rounds = [self._sample_round(step, 0)]
        if self.cfg.algorithm.dynamic_sampling:
            while len(rounds) <= self.cfg.algorithm.max_refill_rounds:
                informative = sum(int((~r.degenerate_groups()).sum()) for r in rounds)
                if informative >= self.cfg.train.prompts_per_step:
                    break
                rounds.append(self._sample_round(step, len(rounds)))
        return concat_rollouts(rounds, self.tokenizer.pad_token_id), len(rounds) - 1

    # ------------------------------------------------------------------------------------ one step
    def advantages(self, rollout: Rollout) -> tuple[torch.Tensor, dict[str, float]]:
        """Â·Φ for every response of the batch; the anchor sees the batch's accuracy exactly once."""
        a, batch = self.cfg.algorithm, rollout.batch
        total = rollout.rewards.total.clone()
        if a.overlong == "penalty":
            total += overlong_penalty(
                batch.response_lengths, self.cfg.rollout.max_new_tokens, a.overlong_buffer, a.overlong_penalty
            )
        adv = compute_advantages(total, rollout.group_ids, a.advantage, std=a.std)
        hadw = apply_hadw(
            adv.advantages,
            rollout.rewards.correctness,
            adv.groups,
            self.anchor,
            self.hadw.lam,
            enabled=self.hadw.enabled,
            keys=anchor_keys(self.anchor, rollout.problems),
            normalize=self.hadw.normalize,
        )
        metrics = dict(hadw.metrics)
        metrics[M.DEGENERATE_FRAC] = float(adv.degenerate.float().mean())
        levels = [p.level for p in rollout.problems]
        metrics |= level_metrics(levels, adv.degenerate, hadw.weights, rollout.rewards.correctness)
        final = scale_advantages(hadw.advantages, a.advantage_scale)
        metrics |= {M.ADV_MEAN: float(final.mean()), M.ADV_MAX: float(final.max()), M.ADV_MIN: float(final.min())}
        return final, metrics

    def update(self, batch: RolloutBatch, advantages: torch.Tensor, step: int) -> dict[str, float]:
        """PPO-style epochs over group-aligned mini-batches of the rollout batch; returns averaged metrics.

        batch: N = P·G rows, each prompt's G responses contiguous; advantages: [N].
        """
        group_size, per_step = self.cfg.rollout.group_size, self.cfg.train.mini_batch_prompts
        num_groups = len(batch) // group_size
        generator = torch.Generator().manual_seed(_step_seed(self.cfg.train.seed, step, 1 << 20))
        orders = [torch.randperm(num_groups, generator=generator) for _ in range(self.cfg.train.ppo_epochs)]
        rows_of = lambda groups: (groups[:, None] * group_size + torch.arange(group_size)).flatten().to(self.device)
        # The first mini-batch is on-policy: its π_old is its own forward's log-probs, detached (TRL's shortcut
        # when generation and optimiser steps align), so a re-score is needed only for the rows after it.
        first = rows_of(orders[0][:per_step]) if self._recompute_logprobs else None
        data = self._minibatch_source(batch, advantages, on_policy_rows=first)
        self.model.train()
        history: list[dict[str, float]] = []
        for epoch, order in enumerate(orders):
            for start in range(0, num_groups, per_step):
                rows = rows_of(order[start : start + per_step])
                on_policy = first is not None and epoch == 0 and start == 0
                values, logprobs = self._optimiser_step(data[rows], step, on_policy)
                if on_policy:  # the π_old of these rows in later epochs
                    data.old_logprobs[rows] = logprobs
                history.append(values)
        return {k: sum(h[k] for h in history) / len(history) for k in history[0]}

    def _minibatch_source(
        self, batch: RolloutBatch, advantages: torch.Tensor, on_policy_rows: torch.Tensor | None = None
    ) -> MiniBatch:
        """The whole rollout batch on the training device, with the log-probs the loss compares against.

        With a π_old re-score, rows in on_policy_rows (the first mini-batch, [n] row indices) are left out of
        it: their π_old comes from their own forward in `_optimiser_step`."""
        response_mask = batch.response_mask.clone()
        if self.cfg.algorithm.overlong == "mask":  # truncated responses carry no learning signal
            response_mask[torch.tensor([f == "length" for f in batch.finish_reasons])] = 0
        data = MiniBatch(
            input_ids=batch.input_ids.to(self.device),
            attention_mask=batch.attention_mask.to(self.device),
            response_mask=response_mask.to(self.device),
            old_logprobs=batch.logprobs.to(self.device, copy=True),  # written in place below
            advantages=advantages.to(self.device),
        )
        if self._recompute_logprobs:  # sampled log-probs carry the cached decoder's numerics: re-score
            rest = torch.ones(len(data), dtype=torch.bool, device=self.device)
            if on_policy_rows is not None:
                rest[on_policy_rows] = False
            if bool(rest.any()):
                with self._timed(M.TIME_OLD_LOGPROB):
                    data.old_logprobs[rest] = self._score(self.model, data[rest])
        with self._timed(M.TIME_REF):
            if self.ref_model is not None:
                data.ref_logprobs = self._score(self.ref_model, data)
            elif self._kl:  # LoRA: the base model is the reference
                with reference_policy(self.model) as base:
                    data.ref_logprobs = self._score(base, data)
        return data

    @contextlib.contextmanager
    def _timed(self, key: str):
        """Adds the block's wall seconds to this step's `key` (M.UPDATE_PHASES). On a GPU the block's queued
        kernels are waited for, so a phase is not billed for the one before it."""
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self._phase_s[key] = self._phase_s.get(key, 0.0) + time.perf_counter() - start

    def _score(self, model, data: MiniBatch) -> torch.Tensor:
        """Log-probs [N, R] of the responses under `model`, without a graph, in micro-batches."""
        size = self.cfg.train.micro_batch_size or len(data)
        with torch.no_grad(), self.autocast():
            return torch.cat([self._logprobs(model, data[i : i + size]) for i in range(0, len(data), size)])

    def _logprobs(self, model, mb: MiniBatch, with_entropy: bool = False):
        """logprobs [B, R] of mb's responses at the sampling temperature; with_entropy: (logprobs, entropy [B, R])."""
        return compute_logprobs(
            model,
            mb.input_ids,
            mb.attention_mask,
            mb.response_mask,
            self.cfg.rollout.temperature,
            return_entropy=with_entropy,
            entropy_grad=bool(self.loss_spec.entropy_coef),  # an entropy bonus needs its gradient; a metric does not
            share_prompts=True,  # a group's G rows share one prompt forward (mini-batches keep groups together)
        )

    def _optimiser_step(
        self, mb: MiniBatch, step: int, on_policy: bool = False
    ) -> tuple[dict[str, float], torch.Tensor | None]:
        """One optimiser step on one mini-batch, accumulating gradients over micro-batches; returns its metrics
        and, when on_policy (the weights mb was sampled with: π_old is each forward's own log-probs,
        detached), those log-probs [B, R].

        Each micro-batch's loss is weighted by its share of the mini-batch (tokens for token-mean, responses
        otherwise), so the accumulated gradient is that of the unsplit mini-batch loss. Metrics are averaged
        with the same weights. The forward runs under autocast (model.compute_dtype); weights, gradients
        and AdamW state stay in the storage dtype (float32 master weights).
        """
        size = self.cfg.train.micro_batch_size or len(mb)
        token_level = self.loss_spec.aggregation == "token-mean"
        share = lambda micro: float(micro.response_mask.sum()) if token_level else float(len(micro))
        total = max(share(mb), 1.0)
        self.optimizer.zero_grad(set_to_none=True)
        metrics: dict[str, torch.Tensor] = {}  # 0-dim tensors: read once, below (one host sync per step)
        own: list[torch.Tensor] = []  # on_policy: each micro-batch's log-probs, detached
        for start in range(0, len(mb), size):
            micro = mb[start : start + size]
            with self._timed(M.TIME_FORWARD):
                with self.autocast():
                    logprobs, entropy = self._logprobs(self.model, micro, with_entropy=True)
                if on_policy:
                    own.append(logprobs.detach())
                loss, micro_metrics = policy_loss(
                    logprobs,
                    own[-1] if on_policy else micro.old_logprobs,
                    micro.advantages,
                    micro.response_mask,
                    self.loss_spec,
                    ref_logprobs=micro.ref_logprobs,
                    entropy=entropy,
                )
            weight = share(micro) / total
            with self._timed(M.TIME_BACKWARD):
                (loss * weight).backward()  # a non-finite loss is caught below, before the optimiser step
            metrics["_loss"] = metrics.get("_loss", 0.0) + weight * loss.detach()  # non-finite if any part is
            for key, value in micro_metrics.items():
                metrics[key] = metrics.get(key, 0.0) + weight * value
        with self._timed(M.TIME_OPTIMIZER):
            metrics[M.GRAD_NORM] = torch.nn.utils.clip_grad_norm_(
                self.model.parameters(), self.cfg.optim.grad_clip or math.inf
            )
            values = dict(zip(metrics, torch.stack([v.float() for v in metrics.values()]).tolist(), strict=True))
        loss_value = values.pop("_loss")
        if not math.isfinite(loss_value):
            raise NonFiniteLossError(
                f"step {step}: loss is {loss_value}; stopping before the optimiser step. The last "
                f"good checkpoint ({latest_checkpoint(self.run_dir) or 'none written yet'}) is intact; lower "
                "optim.lr or check the rewards."
            )
        grad_norm = values[M.GRAD_NORM]
        if not math.isfinite(grad_norm):
            raise NonFiniteLossError(f"step {step}: gradient norm is {grad_norm}; stopping before the update")
        with self._timed(M.TIME_OPTIMIZER):
            self.optimizer.step()
            self.scheduler.step()
        values[M.LR] = self.scheduler.get_last_lr()[0]
        return values, torch.cat(own) if on_policy else None

    def train_step(self, step: int) -> dict[str, float]:
        self._step = step
        rollout, refills = self.collect(step)
        self._watch_rewards(rollout)
        every = self.cfg.logging.sample_every
        if every and step % every == 0:
            self.logger.log_samples(step + 1, rollout.samples(self.cfg.logging.num_samples))
        advantages, metrics = self.advantages(rollout)
        batch = rollout.batch
        if self.cfg.algorithm.dynamic_sampling:
            keep = select_groups(rollout, self.cfg.train.prompts_per_step, self.cfg.rollout.group_size)
            batch, advantages = select_rows(batch, keep), advantages[keep]
            metrics[M.KEPT_GROUPS] = len(keep) // self.cfg.rollout.group_size
            metrics[M.REFILL_ROUNDS] = refills
        t0 = time.perf_counter()
        self._phase("updating")
        self._phase_s = dict.fromkeys(M.UPDATE_PHASES, 0.0)
        if len(batch) > 0:
            metrics |= self.update(batch, advantages, step)
        t_update = time.perf_counter() - t0
        metrics |= rollout.metrics()
        metrics[M.TIME_UPDATE] = t_update
        metrics |= self._phase_s
        metrics[M.TIME_STEP] = rollout.generate_s + rollout.reward_s + t_update
        metrics[M.THROUGHPUT] = float(rollout.batch.response_mask.sum()) / max(metrics[M.TIME_STEP], 1e-9)
        metrics |= peak_memory_metrics()
        metrics[M.SKIPPED_PROMPTS] = getattr(self.source, "num_skipped", 0)  # rows over data.max_prompt_tokens
        self._warn_if_no_signal(step, metrics, rollout.batch.response_texts)
        return metrics

    # ------------------------------------------------------------------------------------ loop
    def evaluate(self, final: bool = False) -> dict[str, dict[str, float]]:
        """Greedy accuracy on the fixed evaluation prompts (never touches the anchor), and avg@k / pass@k of k sampled
        answers a problem when data.eval_samples = k; {} when there are none (data.eval_size=0, or a file too small
        to hold any out). final: the last one, with a progress counter of its own (problems), since it can take as
        long as several steps."""
        problems = self.source.eval_problems()
        self.last_eval_reports = (None, None)  # greedy, sampled EvalReports: their per-problem scores (log_final_eval)
        if not problems:
            return {}
        self._phase("evaluating")
        passes = 2 if self.cfg.data.eval_samples else 1
        show = self.cfg.logging.progress
        counter = Bar(passes * len(problems), "final evaluation", mode=show, unit="problem") if final else None
        summary, greedy, sampled = evaluate_held_out(
            self.model,
            self.tokenizer,
            self.cfg,
            problems,
            self.engine,
            self.autocast,
            counter.update if counter is not None else None,
        )
        if counter is not None:
            counter.close()
        self.last_eval_reports = (greedy, sampled)
        self.eval_failure = greedy.reward_failure or (sampled.reward_failure if sampled else None)
        return summary

    def _phase(self, phase: str) -> None:
        """Name what the step is doing on the progress line (generating, scoring, updating, evaluating, saving)."""
        with contextlib.suppress(OSError):  # a closed terminal must not cost the step
            self._bar.set_phase(phase)

    def checkpoint(self, step: int) -> Path:
        self._phase("saving")
        state: dict[str, Any] = {
            "anchor": self.anchor.state_dict(),
            "data_position": step,
            "config": self.portable_config().to_dict(),
        }
        with disk_full_is_one_line(f"{self.run_dir}/checkpoint-{step:06d}", self._after_full_disk()):
            return save_checkpoint(
                self.run_dir,
                step,
                self.model,
                self.tokenizer,
                self.optimizer,
                self.scheduler,
                state,
                self.cfg.checkpoint.keep_last,
            )

    def _after_full_disk(self) -> str:
        """What a full disk leaves and how to go on (the end of its one line)."""
        last = latest_checkpoint(self.run_dir)
        kept = f"the last complete checkpoint {last} is kept" if last else "no checkpoint was complete yet"
        return f"{kept}; free space, then resume with --resume"

    def train(self, progress: bool | str | None = None) -> TrainResult:
        """Train to cfg.train.steps. progress: a hadw.progress mode (auto | bar | lines | off, or a bool) that
        overrides cfg.logging.progress; None keeps it."""
        cfg = self.cfg
        show = cfg.logging.progress if progress is None else progress
        desc = f"{cfg.algorithm.preset}{'+hadw' if cfg.hadw.enabled else ''}"
        bar = self._bar = Bar(cfg.train.steps, desc, initial=self.start_step, mode=show, unit="step")
        previous = self._install_signal_handlers()
        try:
            for step in range(self.start_step, cfg.train.steps):
                self._lock.check()  # the folder is still this run's (not removed, not taken over)
                metrics = self.train_step(step)
                self._lock.check()  # before this step's records and checkpoint are written
                done = step + 1
                if cfg.train.eval_every and done % cfg.train.eval_every == 0 and done < cfg.train.steps:
                    metrics |= M.flatten_eval(self.evaluate())
                self.logger.log(done, metrics)
                info = {"reward": f"{metrics[M.REWARDS_MEAN]:.3f}", "acc": f"{metrics[M.SCORE_MEAN]:.3f}"}
                if self._reward_failures:  # failed reward items so far (details: reward_errors.jsonl)
                    info["err"] = str(self._reward_failures)
                with contextlib.suppress(OSError):  # a closed terminal (SIGHUP) must not cost the step's checkpoint
                    bar.update(1, **info, C=f"{metrics[M.ANCHOR]:.2f}")
                if self._stop_signal is not None and done < cfg.train.steps:
                    self._stop(done)  # a safe point: the step is complete; save it, then exit
                if cfg.checkpoint.every and done % cfg.checkpoint.every == 0 and done < cfg.train.steps:
                    self.checkpoint(done)
            final_eval = self.evaluate(final=True)
            self.logger.log_final_eval(final_eval, *self.last_eval_reports)
            self._lock.check()
            if cfg.train.steps > self.start_step:
                self.checkpoint(cfg.train.steps)
            self._save_final_model()
        except KeyboardInterrupt:  # a second Ctrl-C: abandon the step; the last checkpoint stays intact
            raise self._interrupted(signal.SIGINT) from None
        finally:
            self._restore_signal_handlers(previous)
            for tmp in self.run_dir.glob(".tmp-checkpoint-*"):  # never leave a half-written checkpoint
                shutil.rmtree(tmp, ignore_errors=True)
            self._phase("")  # the last line is the plain count: the work is over
            with contextlib.suppress(OSError):
                bar.close()
            self.logger.close()
            self._lock.release()
        return TrainResult(self.run_dir, cfg.train.steps, final_eval, self.eval_failure)

    # ------------------------------------------------------------------------------------ stopping
