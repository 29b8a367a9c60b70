"""`engine: trl`: hadw's config as TRL's GRPOConfig, in one table. The one place a hadw key meets its TRL spelling.

Batch arithmetic (P = train.prompts_per_step, m = train.mini_batch_prompts, G = rollout.group_size, n =
trl.num_processes, µ = train.micro_batch_size or m·G / n):

    completions per rollout batch  = P·G = per_device_train_batch_size · n · steps_per_generation
    completions per optimiser step = m·G = per_device_train_batch_size · n · gradient_accumulation_steps
    per_device_train_batch_size    = µ  (responses per forward / backward on each process)
    optimiser steps per rollout batch  k = (P / m) · train.ppo_epochs   (TRL: steps_per_generation / grad. acc.
                                                                           · num_iterations)
    max_steps = train.steps · k;  logging_steps = k (one metrics.jsonl row a rollout batch, as the native trainer)

The dataset is the native trainer's prompt stream in its order (PromptSource.batch(step) for every step, TRL's
shuffle off), so both engines train on the same prompts at every step. Â is hadw's estimator on TRL's weighted
total reward (HADWGRPOConfig.hadw_advantage), then Φ: the same maths as the native trainer.

A key whose behaviour TRL does not have (the native sampler's decoder, DAPO's dynamic sampling, ...) is refused
when it is not at its default, in one line naming it: never silently ignored.
"""

from __future__ import annotations

import difflib
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from hadw import metrics as M
from hadw.train.config_schema import Config, ConfigError

if TYPE_CHECKING:
    from pathlib import Path

VLLM_MODES = ("none", "colocate", "server")
# accelerate configs TRL ships (trl/accelerate_configs/<name>.yaml), as `trl grpo --accelerate_config NAME` takes
SHIPPED_ACCELERATE_CONFIGS = ("multi_gpu", "single_gpu", "zero1", "zero2", "zero3", "fsdp1", "fsdp2")

# key -> (the only value engine=trl accepts, why). Checked against the value the config holds.
NATIVE_ONLY: dict[str, tuple[Any, str]] = {
    "rollout.decoder": ("auto", "TRL samples with transformers' generate or vLLM (trl.vllm)"),
    "rollout.recompute_logprobs": ("auto", "TRL re-scores π_old itself when its steps do not align"),
    "rollout.max_batch_size": (None, "TRL generates each process's slice at once"),
    "rollout.memory_budget_gb": (None, "TRL generates each process's slice at once"),
    "algorithm.dynamic_sampling": (False, "TRL has no DAPO dynamic sampling"),
    "algorithm.advantage_scale": (1.0, "TRL has no advantage scale"),
    "algorithm.entropy_coef": (0.0, "hadw's entropy bonus is the native trainer's"),
    "optim.name": ("adamw", "TRL trains with AdamW (optim=adamw_torch)"),
    "model.lora.save_merged": (False, "merge the adapter of final_model/ with peft afterwards"),
}
# metrics.jsonl: TRL's logged name -> hadw's (hadw.metrics). hadw/* names come from the adapter as they are.
TRL_METRICS = {
    "policy_loss": M.PG_LOSS,
    "grad_norm": M.GRAD_NORM,
    "learning_rate": M.LR,
    "entropy": M.ENTROPY,
    "kl": M.KL_LOSS,
    "clip_ratio/high_mean": M.PG_CLIPFRAC,
    "clip_ratio/low_mean": M.PG_CLIPFRAC_LOWER,
    "reward": M.REWARDS_MEAN,
    "completions/mean_length": M.RESPONSE_LENGTH_MEAN,
    "completions/clipped_ratio": M.RESPONSE_CLIP_RATIO,
    "frac_reward_zero_std": M.DEGENERATE_FRAC,
}
# aggregation -> TRL's loss_type (how token losses are averaged)
LOSS_TYPES = {"seq-mean-token-mean": "grpo", "token-mean": "dapo", "seq-mean-token-sum-norm": "dr_grpo"}


def check_trl(cfg: Config) -> None:
    """Every engine=trl rule that needs no import of TRL: the trl section's values, the native-only keys, the
    batch arithmetic. Raises ConfigError (one line)."""
    t = cfg.trl
    if t.num_processes < 1:
        raise ConfigError(f"trl.num_processes={t.num_processes}: allowed: an integer >= 1")
    if t.vllm not in VLLM_MODES:
        raise ConfigError(f"trl.vllm={t.vllm!r} is not allowed; allowed values: {', '.join(VLLM_MODES)}")
    if not 0 < t.vllm_gpu_memory_utilization <= 1:
        raise ConfigError(f"trl.vllm_gpu_memory_utilization={t.vllm_gpu_memory_utilization}: allowed: (0, 1]")
    if t.accelerate_config and t.accelerate_config not in SHIPPED_ACCELERATE_CONFIGS:
        from pathlib import Path

        if not Path(t.accelerate_config).is_file():
            allowed = ", ".join(SHIPPED_ACCELERATE_CONFIGS)
            raise ConfigError(
                f"trl.accelerate_config={t.accelerate_config!r}: no such file; allowed: a YAML file or one of {allowed}"
            )
    if t.accelerate_config == "zero3" and cfg.train.eval_every:  # ZeRO-3 shards the weights rank 0 would sample with
        raise ConfigError(
            "train.eval_every with trl.accelerate_config=zero3: the periodic evaluation samples on rank 0 alone; "
            "allowed: train.eval_every=0 (the final evaluation reads the gathered final_model/)"
        )
    if cfg.train.steps < 1:  # transformers' Trainer raises on max_steps=0 in every rank (a traceback each)
        raise ConfigError(
            f"train.steps={cfg.train.steps} with engine=trl: TRL trains at least one step; allowed: train.steps >= 1 "
            "(hadw eval MODEL evaluates a model without training it)"
        )
    if not all(isinstance(a, str) for a in t.launch_args):
        raise ConfigError(f"trl.launch_args={t.launch_args!r}: allowed: a list of strings (accelerate launch flags)")
    for key, (allowed, why) in NATIVE_ONLY.items():
        section, *rest = key.split(".")
        value = getattr(cfg, section)
        for name in rest:
            value = getattr(value, name)
        if value != allowed:
            raise ConfigError(f"{key}={value!r} is not supported with engine=trl ({why}); allowed: {allowed!r}")
    a = cfg.algorithm
    if a.overlong == "penalty":
        raise ConfigError("algorithm.overlong='penalty' is not supported with engine=trl; allowed: none, mask")
    if a.kl_coef > 0 and a.kl_estimator != "k3":
        raise ConfigError(f"algorithm.kl_estimator={a.kl_estimator!r} with engine=trl: TRL's KL is k3; allowed: k3")
    spec = a.loss_spec(cfg.rollout.max_new_tokens)
    if spec.aggregation == "seq-mean-token-sum-norm" and spec.norm_length != cfg.rollout.max_new_tokens:
        raise ConfigError(
            f"algorithm.norm_length={a.norm_length} with engine=trl: TRL's dr_grpo divides by max_completion_length; "
            f"allowed: {cfg.rollout.max_new_tokens} (rollout.max_new_tokens) or unset"
        )
    batch_layout(cfg)


def batch_layout(cfg: Config) -> dict[str, int]:
    """The batch arithmetic of the module docstring: per_device_train_batch_size, gradient_accumulation_steps,
    steps_per_generation, num_iterations, updates per rollout batch, max_steps. ConfigError when it does not divide."""
    t, n, g = cfg.train, cfg.trl.num_processes, cfg.rollout.group_size
    per_batch, per_step = t.prompts_per_step * g, t.mini_batch_prompts * g
    micro = t.micro_batch_size or per_step // n
    if per_step % n or micro < 1 or per_step % (micro * n) or t.prompts_per_step % t.mini_batch_prompts:
        raise ConfigError(
            f"engine=trl: train.mini_batch_prompts × rollout.group_size = {per_step} completions an optimiser step "
            f"must split evenly over trl.num_processes={n} × train.micro_batch_size={t.micro_batch_size or micro} "
            f"(and train.prompts_per_step={t.prompts_per_step} be a multiple of train.mini_batch_prompts); allowed: "
            "values where these divide"
        )
    accumulation = per_step // (micro * n)
    updates = (t.prompts_per_step // t.mini_batch_prompts) * t.ppo_epochs
    return {
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accumulation,
        "steps_per_generation": per_batch // (micro * n),
        "num_iterations": t.ppo_epochs,
        "updates_per_step": updates,
        "max_steps": t.steps * updates,
    }


def grpo_kwargs(cfg: Config, run_dir: Path) -> dict[str, Any]:
    """HADWGRPOConfig's keyword arguments for cfg: every shared key's TRL spelling, then trl.extra."""
    layout = batch_layout(cfg)
    m, r, a, h, o, t = cfg.model, cfg.rollout, cfg.algorithm, cfg.hadw, cfg.optim, cfg.train
    spec = a.loss_spec(r.max_new_tokens)
    every = cfg.checkpoint.every * layout["updates_per_step"]
    kwargs: dict[str, Any] = {
        "output_dir": str(run_dir),
        "seed": t.seed,
        "data_seed": t.seed,
        "max_steps": layout["max_steps"],
        **{k: layout[k] for k in ("per_device_train_batch_size", "gradient_accumulation_steps")},
        **{k: layout[k] for k in ("steps_per_generation", "num_iterations")},
        "shuffle_dataset": False,  # the dataset is already the native trainer's prompt stream, step by step
        "num_generations": r.group_size,
        "max_completion_length": r.max_new_tokens,
        "temperature": r.temperature,
        "top_p": r.top_p,
        "top_k": r.top_k,
        "learning_rate": o.lr,
        # linear warm-up, then constant; the worker puts the native trainer's own in (its first step is not at lr 0)
        "lr_scheduler_type": "constant_with_warmup",
        "warmup_steps": o.warmup_steps,
        "weight_decay": o.weight_decay,
        "adam_beta1": o.betas[0],
        "adam_beta2": o.betas[1],
        "adam_epsilon": o.eps,
        "optim": "adamw_torch",
        "max_grad_norm": o.grad_clip,
        "beta": a.kl_coef,
        "loss_type": LOSS_TYPES[spec.aggregation],
        "importance_sampling_level": "sequence" if spec.policy_loss == "sequence_clip" else "token",
        "epsilon": spec.clip_low,
        "epsilon_high": spec.clip_high,
        "mask_truncated_completions": a.overlong == "mask",
        "reward_weights": list(cfg.reward.weights) if cfg.reward.weights else None,  # None: 1.0 each
        "multi_objective_aggregation": "sum_then_normalize",  # Σ w·r, as the native total
        "bf16": m.compute_dtype == "bfloat16",  # autocast over float32 master weights, as model.compute_dtype
        "use_cpu": m.device == "cpu",  # auto: accelerate's choice (a GPU when there is one)
        **({"gradient_checkpointing": True} if m.gradient_checkpointing else {}),  # unset: no deprecation warning
        # LoRA leaves the base's parameters out of the graph; a full fine-tune uses them all (no extra DDP traversal)
        "ddp_find_unused_parameters": m.lora.enabled,
        "model_init_kwargs": {"trust_remote_code": True} if m.trust_remote_code else None,
        "use_vllm": cfg.trl.vllm != "none",
        "vllm_mode": cfg.trl.vllm if cfg.trl.vllm != "none" else "colocate",
        "vllm_gpu_memory_utilization": cfg.trl.vllm_gpu_memory_utilization,
        "logging_steps": layout["updates_per_step"],
        "save_strategy": "steps",
        "save_steps": every or layout["max_steps"],  # 0: one checkpoint, at the end (as the native trainer)
        "save_total_limit": cfg.checkpoint.keep_last,
        "report_to": [],  # hadw's MetricsLogger writes metrics.jsonl, TensorBoard and W&B under hadw's names
        "disable_tqdm": cfg.logging.progress == "off",
        "remove_unused_columns": False,  # the reward reads the row's columns (hadw_row, answer, ...)
        # HA-DW (hadw.core.HADWOptions), and hadw's advantage estimator on TRL's total reward
        "hadw_enabled": h.enabled,
        "hadw_lambda": h.lam,
        "hadw_anchor": h.anchor,
        "hadw_normalize": h.normalize,
        "hadw_advantage": a.advantage,
        "hadw_advantage_std": a.std,
        "hadw_correctness_reward": cfg.reward.correctness,
        **{f"hadw_anchor_{name}": value for name, value in _anchor_fields(cfg).items()},
    }
    overlap = sorted(set(cfg.trl.extra) & set(kwargs))
    if overlap:
        raise ConfigError(f"trl.extra.{overlap[0]} is set by hadw from its own key; set that key instead")
    return kwargs | dict(cfg.trl.extra)


def _anchor_fields(cfg: Config) -> dict[str, Any]:
    """The hadw.* anchor options under HADWGRPOConfig's hadw_anchor_<name> names."""
    h = cfg.hadw
    return {
        "k": h.window_k,
        "eta": h.kalman_eta,
        "m": h.kalman_m,
        "eta_min": h.kalman_eta_min,
        "alpha": h.ema_alpha,
        "value": h.fixed_value,
        "base": h.anchor_base,
        "visits": h.prompt_visits,
        "max_prompts": h.prompt_max,
    }


def check_extra(extra: dict[str, Any]) -> None:
    """trl.extra's names against GRPOConfig's fields (imports TRL): an unknown one is one line with a suggestion."""
    if not extra:
        return
    from trl import GRPOConfig

    known = [f.name for f in fields(GRPOConfig)]
    for name in extra:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"trl.extra.{name}: not a field of TRL's GRPOConfig{hint}")


def show(cfg: Config, run_dir: Path) -> str:
    """`hadw train --show-config` under engine=trl: the GRPOConfig fields hadw sets, one a line."""
    kwargs = grpo_kwargs(cfg, run_dir)
    layout = batch_layout(cfg)
    lines = [
        "# engine=trl: TRL's GRPOConfig as hadw sets it (hadw.train.engines.trl_args); launched with "
        f"{cfg.trl.num_processes} process(es), {layout['updates_per_step']} optimiser step(s) a rollout batch",
        *(f"{key}: {value!r}" for key, value in kwargs.items()),
    ]
    return "\n".join(lines) + "\n"
