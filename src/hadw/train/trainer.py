"""The RLVR training loop: GRPO, GSPO or DAPO, with or without HA-DW.

One step, top to bottom (method.md, "the product in one picture"):
    prompts → rollouts (G per prompt) → rewards → group advantages → HA-DW weights (anchor updated once,
    from every response of the batch) → [DAPO: keep non-degenerate groups] → PPO-style epochs over
    mini-batches with AdamW → metrics, samples, checkpoint.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hadw.core import Anchor, anchor_from_state, apply_hadw, compute_advantages, make_anchor, policy_loss
from hadw.core.shaping import overlong_penalty
from hadw.data import Problem, render_prompt
from hadw.eval.evaluate import evaluate
from hadw.rewards import RewardSpec, score
from hadw.rollout import RolloutBatch, SamplingParams, build_tiny_model, compute_logprobs, load_model, make_engine
from hadw.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from hadw.train.config import Config, config_to_yaml
from hadw.train.dynamic_sampling import Rollout, concat_rollouts, select_groups, select_rows
from hadw.train.metrics_log import MetricsLogger
from hadw.train.prompts import PromptSource


class NonFiniteLossError(RuntimeError):
    """The loss or gradient became NaN/inf; the run stops before the optimiser step corrupts the model."""


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    final_eval: dict[str, dict[str, float]] | None


def _step_seed(seed: int, step: int, salt: int = 0) -> int:
    return (seed * 1_000_003 + step * 7_919 + salt) % (1 << 62)


def warmup_lambda(warmup_steps: int):
    return lambda n: min(1.0, (n + 1) / warmup_steps) if warmup_steps > 0 else 1.0


class Trainer:
    def __init__(self, cfg: Config, model=None, tokenizer=None, resume: bool = False):
        self.cfg = cfg
        self.run_dir = Path(cfg.train.output_dir)
        if cfg.train.num_threads > 0:
            torch.set_num_threads(cfg.train.num_threads)
        self._seed_everything(cfg.train.seed)
        if model is None:
            model, tokenizer = self._load_model()
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device
        self.ref_model = self._load_reference() if cfg.algorithm.kl_coef > 0 else None
        engine_options = {"max_batch_size": cfg.rollout.max_batch_size} if cfg.rollout.engine == "hf" else {}
        self.engine = make_engine(cfg.rollout.engine, model, tokenizer, **engine_options)
        self.source = PromptSource(cfg.data, cfg.train.seed)
        self.loss_spec = cfg.algorithm.loss_spec()
        self.reward_specs = [
            RewardSpec(name, w)
            for name, w in zip(
                cfg.reward.functions, cfg.reward.weights or [1.0] * len(cfg.reward.functions), strict=True
            )
        ]
        self.anchor: Anchor = make_anchor(cfg.hadw.anchor, **cfg.hadw.anchor_options())
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.optim.lr, betas=tuple(cfg.optim.betas), weight_decay=cfg.optim.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_lambda(cfg.optim.warmup_steps))
        self.start_step = 0
        checkpoint = latest_checkpoint(self.run_dir) if resume else None
        if resume and checkpoint is None:
            raise FileNotFoundError(f"--resume: no checkpoint in {self.run_dir} (looked for {self.run_dir}/latest)")
        if checkpoint is not None:
            state = load_checkpoint(checkpoint, self.model, self.optimizer, self.scheduler)
            self.anchor = anchor_from_state(state["anchor"])
            self.start_step = state["step"]
        self.logger = MetricsLogger(
            self.run_dir,
            cfg.logging.tensorboard,
            cfg.logging.wandb,
            cfg.logging.wandb_project,
            cfg.to_dict(),
            resume_step=self.start_step if checkpoint is not None else None,
        )
        (self.run_dir / "config.yaml").write_text(config_to_yaml(cfg), encoding="utf-8")

    # ------------------------------------------------------------------------------------ setup
    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % (1 << 32))
        torch.manual_seed(seed)

    def _load_model(self):
        m = self.cfg.model
        path = m.path
        if not path:
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
        model, tokenizer = load_model(path, m.dtype, m.device)
        if m.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        return model, tokenizer

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
        batch = self.engine.generate(self._prompt_ids(problems), params)
        t1 = time.perf_counter()
        answers = [problems[i].answer for i in batch.prompt_index.tolist()]
        rewards = score(
            batch.response_texts, answers, self.reward_specs, self.cfg.reward.correctness, self.cfg.reward.timeout_s
        )
        group_ids = batch.prompt_index + round_ * cfg.train.prompts_per_step
        rows = [problems[i] for i in batch.prompt_index.tolist()]
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
        options = {"std": a.std} if a.advantage != "drgrpo" else {}
        adv = compute_advantages(total, rollout.group_ids, a.advantage, **options)
        hadw = apply_hadw(
            adv.advantages,
            rollout.rewards.correctness,
            adv.groups,
            self.anchor,
            self.cfg.hadw.lam,
            enabled=self.cfg.hadw.enabled,
        )
        metrics = dict(hadw.metrics)
        metrics["batch/degenerate_frac"] = float(adv.degenerate.float().mean())
        metrics["batch/adv_abs_mean"] = float(hadw.advantages.abs().mean())
        return hadw.advantages, metrics

    def update(self, batch: RolloutBatch, advantages: torch.Tensor, step: int) -> dict[str, float]:
        """PPO-style epochs over group-aligned mini-batches; returns averaged loss metrics."""
        cfg = self.cfg
        response_mask = batch.response_mask.clone()
        if cfg.algorithm.overlong == "mask":  # truncated responses carry no learning signal
            response_mask[torch.tensor([f == "length" for f in batch.finish_reasons])] = 0
        input_ids, attention_mask = batch.input_ids.to(self.device), batch.attention_mask.to(self.device)
        response_mask, advantages = response_mask.to(self.device), advantages.to(self.device)
        temperature = cfg.rollout.temperature
        old_logprobs = batch.logprobs.to(self.device)
        if cfg.rollout.engine != "hf":  # another engine's numerics (vLLM, bf16 kernels): re-score exactly
            old_logprobs = self._score(self.model, input_ids, attention_mask, response_mask, temperature)
        ref_logprobs = None
        if self.ref_model is not None:
            ref_logprobs = self._score(self.ref_model, input_ids, attention_mask, response_mask, temperature)

        group_size = cfg.rollout.group_size
        num_groups = len(batch) // group_size
        generator = torch.Generator().manual_seed(_step_seed(cfg.train.seed, step, 1 << 20))
        self.model.train()
        history: list[dict[str, float]] = []
        for _ in range(cfg.train.ppo_epochs):
            order = torch.randperm(num_groups, generator=generator)
            for start in range(0, num_groups, cfg.train.mini_batch_prompts):
                groups = order[start : start + cfg.train.mini_batch_prompts]
                rows = (groups[:, None] * group_size + torch.arange(group_size)).flatten().to(self.device)
                history.append(
                    self._optimiser_step(
                        input_ids[rows],
                        attention_mask[rows],
                        response_mask[rows],
                        old_logprobs[rows],
                        advantages[rows],
                        None if ref_logprobs is None else ref_logprobs[rows],
                        temperature,
                        step,
                    )
                )
        if hasattr(self.engine, "sync_weights"):  # engines holding their own copy of the weights
            self.engine.sync_weights(self.model)
        return {k: sum(h[k] for h in history) / len(history) for k in history[0]}

    def _score(self, model, ids, mask, response_mask, temperature) -> torch.Tensor:
        """Log-probs [N, R] under `model` without a graph, in micro-batches."""
        size = self.cfg.train.micro_batch_size or len(ids)
        with torch.no_grad():
            return torch.cat(
                [
                    compute_logprobs(
                        model, ids[i : i + size], mask[i : i + size], response_mask[i : i + size], temperature
                    )
                    for i in range(0, len(ids), size)
                ]
            )

    def _optimiser_step(self, ids, mask, response_mask, old_logprobs, advantages, ref_logprobs, temperature, step):
        """One optimiser step on one mini-batch, accumulating gradients over micro-batches.

        Each micro-batch's loss is weighted by its share of the mini-batch (tokens for token-mean, responses
        otherwise), so the accumulated gradient is that of the unsplit mini-batch loss. Metrics are averaged
        with the same weights.
        """
        size = self.cfg.train.micro_batch_size or len(ids)
        token_level = self.loss_spec.aggregation == "token-mean"
        share = lambda sl: float(response_mask[sl].sum()) if token_level else float(len(ids[sl]))
        total = max(share(slice(None)), 1.0)
        self.optimizer.zero_grad(set_to_none=True)
        metrics: dict[str, torch.Tensor] = {}  # 0-dim tensors: read once, below (one host sync per step)
        for start in range(0, len(ids), size):
            sl = slice(start, start + size)
            logprobs, entropy = compute_logprobs(
                self.model, ids[sl], mask[sl], response_mask[sl], temperature, return_entropy=True
            )
            loss, micro_metrics = policy_loss(
                logprobs,
                old_logprobs[sl],
                advantages[sl],
                response_mask[sl],
                self.loss_spec,
                ref_logprobs=None if ref_logprobs is None else ref_logprobs[sl],
                entropy=entropy.detach(),
            )
            weight = share(sl) / total
            (loss * weight).backward()  # a non-finite loss is caught below, before the optimiser step
            metrics["_loss"] = metrics.get("_loss", 0.0) + weight * loss.detach()  # non-finite if any part is
            for key, value in micro_metrics.items():
                metrics[key] = metrics.get(key, 0.0) + weight * value
        metrics["actor/grad_norm"] = torch.nn.utils.clip_grad_norm_(
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
        grad_norm = values["actor/grad_norm"]
        if not math.isfinite(grad_norm):
            raise NonFiniteLossError(f"step {step}: gradient norm is {grad_norm}; stopping before the update")
        self.optimizer.step()
        self.scheduler.step()
        values["actor/lr"] = self.scheduler.get_last_lr()[0]
        return values

    def train_step(self, step: int) -> dict[str, float]:
        rollout, refills = self.collect(step)
        every = self.cfg.logging.sample_every
        if every and step % every == 0:
            self.logger.log_samples(step + 1, rollout.samples(self.cfg.logging.num_samples))
        advantages, metrics = self.advantages(rollout)
        batch = rollout.batch
        if self.cfg.algorithm.dynamic_sampling:
            keep = select_groups(rollout, self.cfg.train.prompts_per_step, self.cfg.rollout.group_size)
            batch, advantages = select_rows(batch, keep), advantages[keep]
            metrics["batch/kept_groups"] = len(keep) // self.cfg.rollout.group_size
            metrics["batch/refill_rounds"] = refills
        t0 = time.perf_counter()
        if len(batch) > 0:
            metrics |= self.update(batch, advantages, step)
        t_update = time.perf_counter() - t0
        metrics |= rollout.metrics()
        metrics["time/update"] = t_update
        metrics["time/step"] = rollout.generate_s + rollout.reward_s + t_update
        metrics["perf/tokens_per_s"] = float(rollout.batch.response_mask.sum()) / max(metrics["time/step"], 1e-9)
        return metrics

    # ------------------------------------------------------------------------------------ loop
    def evaluate(self) -> dict[str, dict[str, float]]:
        """Greedy accuracy on the fixed evaluation prompts (never touches the anchor)."""
        chat = {"auto": "auto", "always": True, "never": False}[self.cfg.data.chat_template]
        report = evaluate(
            self.model,
            self.tokenizer,
            self.source.eval_problems(),
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

    def train(self, progress: bool | None = None) -> TrainResult:
        cfg = self.cfg
        show = cfg.logging.progress if progress is None else progress
        from tqdm.auto import tqdm

        bar = tqdm(
            range(self.start_step, cfg.train.steps),
            initial=self.start_step,
            total=cfg.train.steps,
            desc=f"{cfg.algorithm.preset}{'+hadw' if cfg.hadw.enabled else ''}",
            disable=not show,
            dynamic_ncols=True,
        )
        try:
            for step in bar:
                metrics = self.train_step(step)
                done = step + 1
                if cfg.train.eval_every and done % cfg.train.eval_every == 0 and done < cfg.train.steps:
                    metrics |= _flatten_eval(self.evaluate())
                self.logger.log(done, metrics)
                bar.set_postfix(
                    reward=f"{metrics['reward/mean']:.3f}",
                    acc=f"{metrics['reward/accuracy']:.3f}",
                    C=f"{metrics['hadw/anchor']:.2f}",
                )
                if cfg.checkpoint.every and done % cfg.checkpoint.every == 0 and done < cfg.train.steps:
                    self.checkpoint(done)
            final_eval = self.evaluate()
            self.logger.log(cfg.train.steps, {"final": 1.0, **_flatten_eval(final_eval)})
            if cfg.train.steps > self.start_step:
                self.checkpoint(cfg.train.steps)
            self.model.save_pretrained(self.run_dir / "final_model")
            self.tokenizer.save_pretrained(self.run_dir / "final_model")
        finally:
            bar.close()
            self.logger.close()
        return TrainResult(self.run_dir, cfg.train.steps, final_eval)


def _flatten_eval(summary: dict[str, dict[str, float]]) -> dict[str, float]:
    return {f"eval/{key}/{name}": value for key, row in summary.items() for name, value in row.items()}
