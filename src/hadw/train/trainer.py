"""The RLVR training loop: GRPO, GSPO or DAPO, with or without HA-DW.

One step, top to bottom (docs/method.md, "the product in one picture"):
    prompts → rollouts (G per prompt) → rewards → group advantages → HA-DW weights (anchor updated once,
    from every response of the batch) → [DAPO: keep non-degenerate groups] → PPO-style epochs over
    mini-batches with AdamW (optim.name=sgd: plain SGD) → metrics, samples, checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
import warnings
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hadw import metrics as M
from hadw.core import Anchor, anchor_from_state, apply_hadw, compute_advantages, policy_loss, scale_advantages
from hadw.core.anchors import ANCHOR_KEY_COLUMN
from hadw.core.shaping import overlong_penalty
from hadw.data import Problem, extract_answer, render_prompt
from hadw.data.templates import prompt_token_limit, prompt_too_long
from hadw.errors import SignalStop, UserError
from hadw.eval.evaluate import evaluate
from hadw.eval.memory import peak_memory_metrics
from hadw.processes import STOP_SIGNALS, detach_from_a_closed_terminal, take_pending_stop
from hadw.progress import Bar
from hadw.rewards import RewardSpec, resolve_reward, reward_inputs, score
from hadw.rewards.base import FailureWatch
from hadw.rewards.verifiers import canonical_int
from hadw.rollout import HFRolloutEngine, RolloutBatch, SamplingParams, build_tiny_model, compute_logprobs, load_model
from hadw.rollout.lora import is_lora, reference_policy
from hadw.rollout.models import is_hub_id, model_device, model_load_error
from hadw.safe_files import atomic_write_text, disk_full_is_one_line, open_append
from hadw.train.checkpoint import (
    CheckpointError,
    fsync_path,
    latest_checkpoint,
    load_checkpoint,
    read_state_json,
    replace_dir,
    resume_checkpoint,
    save_checkpoint,
    unreadable,
)
from hadw.train.config import Config, ConfigError, config_to_yaml, resolve_recipe
from hadw.train.dynamic_sampling import Rollout, concat_rollouts, select_groups, select_rows
from hadw.train.metrics_log import MetricsLogger
from hadw.train.prompts import PromptSource
from hadw.train.run_dir import (
    RunDirError,
    check_trained_parameters_kept,
    claim_run_dir,
    config_differences,
    holds_run,
    saved_config,
)

REWARD_ERRORS_FILE = "reward_errors.jsonl"  # each reward's first failed item (kind, message, row)


class NonFiniteLossError(RuntimeError):
    """The loss or gradient became NaN/inf; the run stops before the optimiser step corrupts the model."""


class Interrupted(SignalStop):
    """SIGINT / SIGTERM / SIGHUP stopped the run at a safe point; exit 128 + the signal's number (130, 143, 129)."""


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    final_eval: dict[str, dict[str, float]] | None


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


def _check_master_weights(model) -> None:
    """Refuse to train non-float32 weights: AdamW steps below bf16/fp16 resolution would be lost."""
    dtypes = {p.dtype for p in model.parameters() if p.requires_grad}
    if dtypes - {torch.float32}:
        raise ConfigError(
            f"the model's trainable weights are {sorted(map(str, dtypes))}; train float32 master weights "
            "(model.dtype=float32) with model.compute_dtype=bfloat16 for mixed precision"
        )


# Config keys whose change makes a saved anchor history incompatible.
ANCHOR_SETTINGS = ("hadw.anchor", "hadw.window_k", "hadw.kalman", "hadw.ema", "hadw.fixed", "hadw.prompt")


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


def make_optimizer(model, cfg: Config, device: torch.device) -> torch.optim.Optimizer:
    """optim.name's optimiser over the model's trainable parameters (every weight; with LoRA the adapters
    only, so a checkpoint holds their optimiser state alone): AdamW (the default, as before) or plain SGD."""
    o = cfg.optim
    params = [p for p in model.parameters() if p.requires_grad]
    fused = device.type in ("cpu", "cuda")  # one kernel, no per-step copies of every weight (as TRL)
    if o.name == "sgd":  # no momentum: the step is lr × gradient, so a factor on the advantages is a factor on it
        return torch.optim.SGD(params, lr=o.lr, weight_decay=o.weight_decay)
    betas = tuple(o.betas)
    return torch.optim.AdamW(params, lr=o.lr, betas=betas, eps=o.eps, weight_decay=o.weight_decay, fused=fused)


def warmup_lambda(warmup_steps: int):
    return lambda n: min(1.0, (n + 1) / warmup_steps) if warmup_steps > 0 else 1.0


def measured_no_signal_causes(metrics: dict[str, float], texts: list[str], cfg: Config) -> list[str]:
    """What this batch shows about why every group is degenerate: reward failures, every answer right,
    truncation, or no answer the verifier can read. Empty when none of these was measured."""
    causes = []
    failed = metrics.get(M.REWARD_ERRORS, 0.0) + metrics.get(M.REWARD_TIMEOUTS, 0.0)
    if failed:
        causes.append(f"the reward failed on {failed:.0f} of {len(texts)} responses (errors and timeouts score 0)")
    if texts and metrics.get(M.SCORE_MEAN, 0.0) >= 1.0:
        causes.append("every response was correct: the prompts are too easy for this model")
    clipped = metrics.get(M.RESPONSE_CLIP_RATIO, 0.0)
    if clipped >= 0.5:
        causes.append(f"{clipped:.0%} of responses were cut off at rollout.max_new_tokens={cfg.rollout.max_new_tokens}")
    readable = {  # what the built-in verifiers read: a \boxed{} or "#### N" answer; exact also a bare integer
        "math": lambda t: extract_answer(t) is not None,
        "exact": lambda t: extract_answer(t) is not None or canonical_int(t) is not None,
    }.get(cfg.reward.correctness)
    if texts and readable is not None and not any(map(readable, texts)):
        causes.append(f"no response had an answer reward {cfg.reward.correctness!r} can read")
    return causes


class Trainer:
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
        recompute, mixed = cfg.rollout.recompute_logprobs, cfg.model.compute_dtype != "float32"
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
        atomic_write_text(self.run_dir / "config.yaml", config_to_yaml(cfg))  # never through a planted link

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
        if state_json["step"] > self.cfg.train.steps:  # else the loop never runs and the run ends "done" (issue 39)
            raise RunDirError(
                f"--resume: {checkpoint} is at step {state_json['step']}, past train.steps={self.cfg.train.steps}; "
                f"allowed: train.steps >= {state_json['step']} to go on from it"
            )
        diffs = self._check_settings(state_json["config"], checkpoint, accept_changes)
        check_trained_parameters_kept(diffs, checkpoint)  # before loading blames the checkpoint (issue 39)
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

    def _check_settings(self, saved: dict, where: Path, accept_changes: bool) -> list[str]:
        """The settings that differ from the saved run's (config_differences); refused unless accepted."""
        diffs = config_differences(saved, self.cfg.to_dict(), Config().to_dict())
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

    def _skip_long_prompts(self) -> None:
        """Drop file rows whose prompt exceeds data.max_prompt_tokens (default: the model's context minus
        rollout.max_new_tokens), counting them; a huge row would otherwise blow up memory in generation."""
        if self.source.task is not None:
            return
        limit = self.cfg.data.max_prompt_tokens or prompt_token_limit(
            self.model.config, self.cfg.rollout.max_new_tokens
        )
        # never above the context: evaluate() refuses a longer held-out prompt, at the end of the run
        limit = min(limit, prompt_token_limit(self.model.config, 0))
        chat = {"auto": "auto", "always": True, "never": False}[self.cfg.data.chat_template]

        def fits(problem: Problem) -> bool:
            text = render_prompt(problem, self.cfg.data.template, self.tokenizer, chat)
            return prompt_too_long(text, self.tokenizer, limit) is None  # a huge row is never tokenized

        kept = [p for p in self.source.problems if fits(p)]
        held_out = [p for p in self.source._held_out if fits(p)]
        skipped = len(self.source.problems) + len(self.source._held_out) - len(kept) - len(held_out)
        self.source.num_skipped = skipped
        if skipped:
            print(
                f"data.source={self.cfg.data.source}: skipped {skipped} rows whose prompt is longer than "
                f"{limit} tokens (data.max_prompt_tokens)",
                file=sys.stderr,
            )
        if not kept:
            raise ConfigError(
                f"data.source={self.cfg.data.source!r}: every training row is longer than {limit} tokens "
                "(data.max_prompt_tokens)"
            )
        self.source._held_out = held_out
        self.source.problems = kept

    # ------------------------------------------------------------------------------------ setup
    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % (1 << 32))
        torch.manual_seed(seed)

    def _warm_start(self, init_dir: Path) -> Path:
        """SFT the freshly built tiny model on the training task until model.tiny.warm_start_accuracy: a random
        model never earns a reward, so every GRPO group would be degenerate (no gradient)."""
        from hadw.data.tasks import TINY_WARM_START_LEVEL_FLOOR
        from hadw.train.sft import SFTConfig, below_floor, sft_warm_start

        cfg, t = self.cfg, self.cfg.model.tiny
        if not cfg.data.source.startswith("task:"):
            warnings.warn("model.tiny.warm_start_accuracy applies to task: sources only; skipped", stacklevel=2)
            return init_dir
        model, tokenizer = load_model(init_dir)
        sft = SFTConfig(
            task=cfg.data.source.split(":", 1)[1],
            levels=cfg.data.levels,
            target_accuracy=t.warm_start_accuracy,
            max_steps=t.warm_start_max_steps,
            eval_every=50,
            seed=cfg.train.seed,
        )
        result = sft_warm_start(model, tokenizer, sft, progress=cfg.logging.progress)
        print(f"warm start: {result.steps} SFT steps, greedy accuracy {result.accuracy:.3f}", file=sys.stderr)
        low = below_floor(result.history[-1], TINY_WARM_START_LEVEL_FLOOR) if result.history else {}
        if low:  # said, not silent: RL gets all-wrong groups on these levels (the demo refuses such a start)
            levels = ", ".join(f"{k} {v:.3f}" for k, v in low.items())
            print(
                f"warning: the warm start is below greedy {TINY_WARM_START_LEVEL_FLOOR} on {levels}: RL learns little "
                "there; raise model.tiny.warm_start_max_steps or start from a stronger model.path",
                file=sys.stderr,
            )
        out = self.run_dir / "warm_start_model"
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        return out

    def _load_model(self):
        m = self.cfg.model
        path = m.path
        if path:
            model_dir = Path(path)
            if not model_dir.exists() and not is_hub_id(path):  # else load_model tries it as a Hub id
                raise ConfigError(f"model.path={path}: no such folder")
            if model_dir.exists() and (not model_dir.is_dir() or not (model_dir / "config.json").is_file()):
                raise ConfigError(f"model.path={path}: not a model folder (no config.json); give a saved model folder")
        else:
            t = m.tiny
            path = build_tiny_model(
                self.run_dir / "init_model",
                t.arch,
                t.hidden_size,
                t.num_layers,
                t.num_heads,
                t.num_kv_heads,
                t.intermediate_size,
                seed=self.cfg.train.seed,
            )
            if t.warm_start_accuracy > 0:
                path = self._warm_start(path)
        try:
            model, tokenizer = load_model(path, m.dtype, m.device, trust_remote_code=m.trust_remote_code)
        except UserError:  # e.g. offline and not cached: already one clear line
            raise
        except Exception as err:  # a damaged or mismatched folder, whatever transformers raises
            raise ConfigError(f"model.path={path}: cannot load the model: {model_load_error(err)}") from None
        if m.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        return model, tokenizer, path

    def _add_lora(self, model, base):
        """`model` with fresh LoRA adapters (model.lora.*); the base weights stay frozen."""
        try:
            from hadw.rollout.lora import LoraSettings, add_lora

            lora = self.cfg.model.lora
            settings = LoraSettings(lora.rank, lora.alpha, lora.dropout, lora.target_modules)
            model = add_lora(model, settings, base or getattr(model, "name_or_path", None))
        except ImportError as err:
            from hadw.errors import missing_extra

            raise missing_extra(err, "model.lora.enabled=true", "lora") or err from None
        except ValueError as err:  # e.g. target modules the model does not have
            raise ConfigError(f"model.lora: {' '.join(str(err).split())[:300]}") from None
        if self.cfg.model.gradient_checkpointing:  # checkpointed blocks need an input that requires grad
            model.enable_input_require_grads()
        return model

    def autocast(self) -> AbstractContextManager:
        """Forward passes in model.compute_dtype (mixed precision); a no-op in float32."""
        dtype = self.cfg.model.compute_dtype
        if dtype == "float32":
            return nullcontext()
        return torch.autocast(self.device.type, dtype=getattr(torch, dtype))

    def _load_reference(self):
        import copy

        ref = copy.deepcopy(self.model).eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref

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
        self.model.eval()
        with self.autocast():
            batch = self.engine.generate(self._prompt_ids(problems), params)
        t1 = time.perf_counter()
        rows = [problems[i] for i in batch.prompt_index.tolist()]
        answers = [p.answer for p in rows]
        prompts, columns = reward_inputs(rows, cfg.data.template)  # for rewards with TRL's signature
        rw = cfg.reward
        rewards = score(
            batch.response_texts,
            answers,
            self.reward_specs,
            rw.correctness,
            rw.timeout_s,
            prompts,
            columns,
            rw.completion_format,
        )
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
        final = scale_advantages(hadw.advantages, a.advantage_scale)
        metrics |= {M.ADV_MEAN: float(final.mean()), M.ADV_MAX: float(final.max()), M.ADV_MIN: float(final.min())}
        return final, metrics

    def update(self, batch: RolloutBatch, advantages: torch.Tensor, step: int) -> dict[str, float]:
        """PPO-style epochs over group-aligned mini-batches of the rollout batch; returns averaged metrics.

        batch: N = P·G rows, each prompt's G responses contiguous; advantages: [N].
        """
        data = self._minibatch_source(batch, advantages)
        group_size, per_step = self.cfg.rollout.group_size, self.cfg.train.mini_batch_prompts
        num_groups = len(data) // group_size
        generator = torch.Generator().manual_seed(_step_seed(self.cfg.train.seed, step, 1 << 20))
        self.model.train()
        history: list[dict[str, float]] = []
        for _epoch in range(self.cfg.train.ppo_epochs):
            order = torch.randperm(num_groups, generator=generator)
            for start in range(0, num_groups, per_step):
                groups = order[start : start + per_step]
                rows = (groups[:, None] * group_size + torch.arange(group_size)).flatten().to(self.device)
                history.append(self._optimiser_step(data[rows], step))
        return {k: sum(h[k] for h in history) / len(history) for k in history[0]}

    def _minibatch_source(self, batch: RolloutBatch, advantages: torch.Tensor) -> MiniBatch:
        """The whole rollout batch on the training device, with the log-probs the loss compares against."""
        response_mask = batch.response_mask.clone()
        if self.cfg.algorithm.overlong == "mask":  # truncated responses carry no learning signal
            response_mask[torch.tensor([f == "length" for f in batch.finish_reasons])] = 0
        data = MiniBatch(
            input_ids=batch.input_ids.to(self.device),
            attention_mask=batch.attention_mask.to(self.device),
            response_mask=response_mask.to(self.device),
            old_logprobs=batch.logprobs.to(self.device),
            advantages=advantages.to(self.device),
        )
        if self._recompute_logprobs:  # sampled log-probs carry the cached decoder's numerics: re-score
            data.old_logprobs = self._score(self.model, data)
        if self.ref_model is not None:
            data.ref_logprobs = self._score(self.ref_model, data)
        elif self._kl:  # LoRA: the base model is the reference
            with reference_policy(self.model) as base:
                data.ref_logprobs = self._score(base, data)
        return data

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

    def _optimiser_step(self, mb: MiniBatch, step: int) -> dict[str, float]:
        """One optimiser step on one mini-batch, accumulating gradients over micro-batches.

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
        for start in range(0, len(mb), size):
            micro = mb[start : start + size]
            with self.autocast():
                logprobs, entropy = self._logprobs(self.model, micro, with_entropy=True)
            loss, micro_metrics = policy_loss(
                logprobs,
                micro.old_logprobs,
                micro.advantages,
                micro.response_mask,
                self.loss_spec,
                ref_logprobs=micro.ref_logprobs,
                entropy=entropy,
            )
            weight = share(micro) / total
            (loss * weight).backward()  # a non-finite loss is caught below, before the optimiser step
            metrics["_loss"] = metrics.get("_loss", 0.0) + weight * loss.detach()  # non-finite if any part is
            for key, value in micro_metrics.items():
                metrics[key] = metrics.get(key, 0.0) + weight * value
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
        self.optimizer.step()
        self.scheduler.step()
        values[M.LR] = self.scheduler.get_last_lr()[0]
        return values

    def _report_reward_error(self, name: str, line: str, error, row: dict) -> None:
        """A reward's first error: one line on stderr, and a record in <run>/reward_errors.jsonl."""
        print(f"warning: {line} (later errors are counted in reward/errors, reward/timeouts)", file=sys.stderr)
        record = {"step": self._step + 1, "reward": name, "kind": error.kind, "message": error.message, "row": row}
        with open_append(self.run_dir / REWARD_ERRORS_FILE) as f:
            f.write(M.dumps(record) + "\n")

    def _watch_rewards(self, rollout: Rollout) -> None:
        """Count the step's failed reward items, report each reward's first one, and stop the run
        (RewardFailure) when a reward failed on every item for reward.max_failed_steps steps in a row."""
        r = rollout.rewards
        self._reward_failures += r.num_errors + r.num_timeouts
        rows = [
            {"prompt": p.question, "answer": p.answer, "completion": c}
            for p, c in zip(rollout.problems, rollout.batch.response_texts, strict=True)
        ]
        for name, watch in self._reward_watch.items():
            watch.see(r.errors.get(name, {}), r.first_errors.get(name), name in r.failed_all, rows)

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
        if len(batch) > 0:
            metrics |= self.update(batch, advantages, step)
        t_update = time.perf_counter() - t0
        metrics |= rollout.metrics()
        metrics[M.TIME_UPDATE] = t_update
        metrics[M.TIME_STEP] = rollout.generate_s + rollout.reward_s + t_update
        metrics[M.THROUGHPUT] = float(rollout.batch.response_mask.sum()) / max(metrics[M.TIME_STEP], 1e-9)
        metrics |= peak_memory_metrics()
        metrics[M.SKIPPED_PROMPTS] = getattr(self.source, "num_skipped", 0)  # rows over data.max_prompt_tokens
        self._warn_if_no_signal(step, metrics, rollout.batch.response_texts)
        return metrics

    NO_SIGNAL_STEPS = 3  # consecutive all-degenerate steps before the warning (one such step happens by chance)

    def _warn_if_no_signal(self, step: int, metrics: dict[str, float], texts: list[str]) -> None:
        """Say so, once, when NO_SIGNAL_STEPS steps in a row had only degenerate groups (no gradient at all),
        naming the cause the trainer measured on this batch when it knows one."""
        self._no_signal_streak = self._no_signal_streak + 1 if metrics[M.DEGENERATE_FRAC] >= 1.0 else 0
        if self._no_signal_streak != self.NO_SIGNAL_STEPS or self._warned_no_signal:
            return
        self._warned_no_signal = True
        cfg = self.cfg
        causes = measured_no_signal_causes(metrics, texts, cfg)
        likely = (
            "Measured on the last batch: " + "; ".join(causes)
            if causes
            else (
                "Likely causes: the model never produces an answer the reward can read (a random or base model: SFT "
                "first; a prompt template it does not follow: data.template / data.chat_template), answers cut off "
                f"by rollout.max_new_tokens={cfg.rollout.max_new_tokens}, or a reward that cannot match "
                f"(reward.functions={list(cfg.reward.functions)})"
            )
        )
        message = (
            f"warning: steps {step + 2 - self.NO_SIGNAL_STEPS}-{step + 1}: every group is degenerate (all "
            f"{cfg.rollout.group_size} responses of each prompt scored the same), so there is no learning signal. "
            f"{likely}. Look at the completions (the run's own data, template and reward): "
            f"hadw eval {self.run_dir} --limit 20 --samples eval_samples.jsonl"
        )
        self.no_signal_warning = message
        with contextlib.suppress(OSError):  # a closed terminal (EIO, before SIGHUP arrives) must not end the run
            print(message, file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------------------ loop
    def evaluate(self) -> dict[str, dict[str, float]]:
        """Greedy accuracy on the fixed evaluation prompts (never touches the anchor); {} when there are
        none (data.eval_size=0, or a file too small to hold any out)."""
        chat = {"auto": "auto", "always": True, "never": False}[self.cfg.data.chat_template]
        problems = self.source.eval_problems()
        if not problems:
            return {}
        with self.autocast():
            report = evaluate(
                self.model,
                self.tokenizer,
                problems,
                self.cfg.data.template,
                self.cfg.reward.correctness,
                temperature=0.0,
                max_new_tokens=self.cfg.rollout.max_new_tokens,
                engine=self.engine,
                use_chat_template=chat,
            )
        return report.summary

    def checkpoint(self, step: int) -> Path:
        state: dict[str, Any] = {
            "anchor": self.anchor.state_dict(),
            "data_position": step,
            "config": self.cfg.to_dict(),
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
        bar = Bar(cfg.train.steps, desc, initial=self.start_step, mode=show, unit="step")
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
            final_eval = self.evaluate()
            self.logger.log_final_eval(final_eval)
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
            with contextlib.suppress(OSError):
                bar.close()
            self.logger.close()
            self._lock.release()
        return TrainResult(self.run_dir, cfg.train.steps, final_eval)

    # ------------------------------------------------------------------------------------ stopping
    def _install_signal_handlers(self) -> dict[int, Any]:
        """SIGINT / SIGTERM / SIGHUP (a closed terminal or ssh session) set a flag; the loop stops after the
        current step (a second SIGINT abandons it). Only the main thread can install handlers; elsewhere the
        defaults stay."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}

        def handler(signum, frame):
            if self._stop_signal is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self._stop_signal = signum
            if signum == signal.SIGHUP:
                detach_from_a_closed_terminal()
            # os.write, not print: the handler may run inside a write to sys.stderr (a progress line), where print
            # raises "reentrant call" and the stop would be lost with the step. After SIGHUP the terminal may be gone.
            line = f"\n{signal.Signals(signum).name}: finishing the current step, then saving\n"
            with contextlib.suppress(OSError):
                os.write(2, line.encode("utf-8", "replace"))

        for signum in STOP_SIGNALS:
            previous[signum] = signal.signal(signum, handler)
        pending = take_pending_stop()  # a stop asked for during start-up (e.g. an early preemption signal)
        if pending is not None:
            self._stop_signal = pending
        return previous

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, Any]) -> None:
        for signum, old in previous.items():
            signal.signal(signum, old)

    def _stop(self, done: int) -> None:
        self.checkpoint(done)
        raise self._interrupted(self._stop_signal or signal.SIGINT)

    def _interrupted(self, signum: int) -> Interrupted:
        last = latest_checkpoint(self.run_dir)
        import shlex

        if len(sys.argv) > 1 and "hadw" in sys.argv[0] and sys.argv[1] == "train":  # the user's own command line
            argv = shlex.join(sys.argv[1:])
            command = f"hadw {argv}" if "--resume" in argv else f"hadw {argv} --resume"
        else:  # a run started by `hadw demo`, `hadw compare` or Python: its saved config resumes it
            command = f"hadw train {shlex.quote(str(self.run_dir / 'config.yaml'))} --resume"
        where = f"last checkpoint {last}" if last else "no checkpoint yet (a resume restarts from step 0)"
        return Interrupted(f"{signal.Signals(signum).name}: stopped; {where}; resume with: {command}", signum)

    def _save_final_model(self) -> None:
        """final_model/ is written under a temporary name, fsynced and renamed: never half there."""
        final, tmp = self.run_dir / "final_model", self.run_dir / f".final_model.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            with disk_full_is_one_line(str(final), self._after_full_disk()):
                self.model.save_pretrained(tmp)
                self.tokenizer.save_pretrained(tmp)
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
