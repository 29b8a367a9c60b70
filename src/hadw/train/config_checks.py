"""The validation rules of the training configuration: every enumerated and bounded field, checked after
loading; the message names the key and the allowed values (one line, exit 2)."""

from __future__ import annotations

import math
from typing import Any

from hadw.train.config_schema import Config, ConfigError, DataConfig


def _check_template(template: str) -> None:
    from hadw.data.templates import TEMPLATES, fill_template

    if template in TEMPLATES:
        return
    what = f"data.template={template!r} is neither a template name ({', '.join(TEMPLATES)}) nor a format string"
    if "{question}" not in template:
        raise ConfigError(f"{what} with {{question}}")
    try:
        fill_template("x", template)
    except (ValueError, KeyError, IndexError) as err:
        raise ConfigError(f"{what}: {type(err).__name__}: {err}; write literal braces as {{{{ }}}}") from None


def _choice(key: str, value: Any, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; allowed values: {', '.join(map(str, allowed))}")


def _range(key: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ConfigError(f"{key}={value} is out of range; allowed: [{low}, {high}]")


def _above(key: str, value: float, low: float) -> None:
    if not value > low:
        raise ConfigError(f"{key}={value} is not allowed; must be > {low:g}")


def _check_lora(cfg: Config) -> None:
    lora = cfg.model.lora
    _range("model.lora.rank", lora.rank, 1, 1 << 16)
    _above("model.lora.alpha", lora.alpha, 0.0)
    if not 0 <= lora.dropout < 1:
        raise ConfigError(f"model.lora.dropout={lora.dropout} is out of range; allowed: [0, 1)")
    if not lora.target_modules.strip(" ,"):
        raise ConfigError("model.lora.target_modules is empty; give 'all-linear' or module names like q_proj,v_proj")


def _progress_mode(value: Any) -> None:
    from hadw.progress import PROGRESS_MODES, normalize_mode

    if normalize_mode(value) is None:
        _choice("logging.progress", value, (*PROGRESS_MODES, "true", "false"))


def validate(cfg: Config) -> None:
    """Check every enumerated and bounded field; the message names the key and the allowed values."""
    from hadw.core import ADVANTAGE_ESTIMATORS, ANCHORS, LOSS_PRESETS, NORMALIZE
    from hadw.core.anchors import BASE_ANCHORS
    from hadw.core.losses import AGGREGATIONS, POLICY_LOSSES
    from hadw.rollout.names import COMPUTE_DTYPES, DECODERS

    a, r, t = cfg.algorithm, cfg.rollout, cfg.train
    _choice("engine", cfg.engine, ("native", "trl"))
    if cfg.model.dtype != "float32":
        raise ConfigError(
            f"model.dtype={cfg.model.dtype!r} would train {cfg.model.dtype} weights directly (AdamW updates below "
            "its resolution are lost); keep model.dtype=float32 and set model.compute_dtype=bfloat16 for "
            "mixed precision"
        )
    _choice("model.compute_dtype", cfg.model.compute_dtype, COMPUTE_DTYPES)
    _choice("model.device", cfg.model.device, ("auto", "cpu", "cuda"))
    _choice("model.tiny.arch", cfg.model.tiny.arch, ("qwen2", "llama"))
    _choice("algorithm.preset", a.preset, tuple(LOSS_PRESETS))
    _choice("algorithm.advantage", a.advantage, tuple(sorted(ADVANTAGE_ESTIMATORS)))
    _choice("algorithm.std", a.std, ("population", "sample"))
    if a.policy_loss is not None:
        _choice("algorithm.policy_loss", a.policy_loss, tuple(POLICY_LOSSES))
    if a.aggregation is not None:
        _choice("algorithm.aggregation", a.aggregation, AGGREGATIONS)
    _choice("algorithm.kl_estimator", a.kl_estimator, ("k1", "k2", "k3"))
    _choice("algorithm.overlong", a.overlong, ("none", "mask", "penalty"))
    _choice("hadw.anchor", cfg.hadw.anchor, tuple(ANCHORS))
    _choice("hadw.normalize", cfg.hadw.normalize, NORMALIZE)
    _choice("optim.name", cfg.optim.name, ("adamw", "sgd"))
    _range("algorithm.advantage_scale", a.advantage_scale, 1e-6, 1e6)
    _choice("data.chat_template", cfg.data.chat_template, ("auto", "always", "never"))
    _check_template(cfg.data.template)
    _check_data_fields(cfg.data)
    _choice("rollout.recompute_logprobs", r.recompute_logprobs, ("auto", "always", "never"))
    _choice("rollout.decoder", r.decoder, DECODERS)
    _range("rollout.group_size", r.group_size, 2, 1 << 16)
    if r.temperature == 0:  # issue 39: a short run ended before the no-signal warning (3 steps) could say so
        raise ConfigError(
            "rollout.temperature=0 is not allowed; allowed: (0, 10]. At 0 every response of a group is the same "
            "greedy one, so every group scores the same and there is no learning signal"
        )
    _range("rollout.temperature", r.temperature, 0.0, 10.0)
    _range("rollout.top_p", r.top_p, 1e-6, 1.0)
    _range("rollout.max_new_tokens", r.max_new_tokens, 1, 1 << 20)
    if r.memory_budget_gb is not None:
        _above("rollout.memory_budget_gb", r.memory_budget_gb, 0.0)
    _range("hadw.lam", cfg.hadw.lam, 1e-6, 100.0)
    _range("hadw.fixed_value", cfg.hadw.fixed_value, 0.0, 1.0)
    _range("hadw.ema_alpha", cfg.hadw.ema_alpha, 1e-6, 1.0)
    _range("hadw.window_k", cfg.hadw.window_k, 1, 1 << 20)
    _above("optim.lr", cfg.optim.lr, 0.0)
    _range("optim.lr", cfg.optim.lr, 0.0, 1.0)
    _range("optim.grad_clip", cfg.optim.grad_clip, 0.0, 1e9)
    _range("optim.eps", cfg.optim.eps, 0.0, 1.0)
    _range("optim.weight_decay", cfg.optim.weight_decay, 0.0, 1e9)
    _range("optim.warmup_steps", cfg.optim.warmup_steps, 0, 1 << 30)
    if len(cfg.optim.betas) != 2 or not all(0.0 <= b < 1.0 for b in cfg.optim.betas):
        raise ConfigError(f"optim.betas={list(cfg.optim.betas)} is not allowed; allowed: two numbers in [0, 1)")
    for key in ("clip_low", "clip_high"):
        if getattr(a, key) is not None:
            _range(f"algorithm.{key}", getattr(a, key), 0.0, 1e9)
    _range("algorithm.kl_coef", a.kl_coef, 0.0, 1e9)
    _range("algorithm.entropy_coef", a.entropy_coef, -1e9, 1e9)
    _range("algorithm.max_refill_rounds", a.max_refill_rounds, 0, 1 << 20)
    _range("algorithm.overlong_buffer", a.overlong_buffer, 0, 1 << 20)
    if a.norm_length is not None:
        _range("algorithm.norm_length", a.norm_length, 1, 1 << 24)
    _range("rollout.top_k", r.top_k, 0, 1 << 30)
    _range("hadw.kalman_m", cfg.hadw.kalman_m, 1, 1 << 20)
    _range("hadw.kalman_eta", cfg.hadw.kalman_eta, 0.0, 1e9)
    _range("hadw.kalman_eta_min", cfg.hadw.kalman_eta_min, 0.0, 1.0)
    _choice("hadw.anchor_base", cfg.hadw.anchor_base, tuple(BASE_ANCHORS))
    _range("hadw.prompt_visits", cfg.hadw.prompt_visits, 1, 1 << 20)
    _range("hadw.prompt_max", cfg.hadw.prompt_max, 1, 1 << 40)
    try:
        cfg.hadw.options()  # the anchor's own checks (hadw.core.HADWOptions)
    except ValueError as err:
        raise ConfigError(f"hadw.*: {err}") from None
    _range("checkpoint.every", cfg.checkpoint.every, 0, 1 << 30)
    _range("checkpoint.keep_last", cfg.checkpoint.keep_last, 1, 1 << 30)
    _range("train.eval_every", t.eval_every, 0, 1 << 30)
    _range("train.num_threads", t.num_threads, 0, 4096)
    _progress_mode(cfg.logging.progress)
    _check_lora(cfg)
    _range("logging.sample_every", cfg.logging.sample_every, 0, 1 << 30)
    _range("logging.num_samples", cfg.logging.num_samples, 0, 1 << 20)
    _range("data.eval_size", cfg.data.eval_size, 0, 1 << 30)
    _range("data.eval_samples", cfg.data.eval_samples, 0, 1 << 16)
    _range("data.max_prompt_tokens", cfg.data.max_prompt_tokens, 0, 1 << 30)
    if cfg.data.limit is not None:
        _range("data.limit", cfg.data.limit, 1, 1 << 40)
    _above("reward.timeout_s", cfg.reward.timeout_s, 0.0)
    _range("reward.timeout_s", cfg.reward.timeout_s, 0.0, 1e6)  # finite: inf would disable the bound
    _range("reward.max_failed_steps", cfg.reward.max_failed_steps, 0, 1 << 30)
    if cfg.reward.completion_format not in ("text", "messages"):
        raise ConfigError(f"reward.completion_format={cfg.reward.completion_format!r}; allowed: text, messages")
    _check_data(cfg.data)
    if not cfg.train.output_dir.strip():
        raise ConfigError("train.output_dir is empty; give the run folder, e.g. train.output_dir=runs/my_run")
    from hadw.safe_files import folder_name_problem

    problem = folder_name_problem(cfg.train.output_dir)
    if problem:
        raise ConfigError(f"train.output_dir={cfg.train.output_dir!r} {problem}")
    _range("train.steps", t.steps, 0, 1 << 30)
    _range("train.prompts_per_step", t.prompts_per_step, 1, 1 << 20)
    _range("train.mini_batch_prompts", t.mini_batch_prompts, 1, t.prompts_per_step)
    _range("train.ppo_epochs", t.ppo_epochs, 1, 100)
    _range("train.micro_batch_size", t.micro_batch_size, 0, 1 << 20)
    rw = cfg.reward
    if len(set(rw.functions)) != len(rw.functions):
        raise ConfigError(
            f"reward.functions={list(rw.functions)} names a reward twice; give each once (weigh it with reward.weights)"
        )
    if rw.weights is not None and not all(math.isfinite(w) for w in rw.weights):
        raise ConfigError(f"reward.weights={list(rw.weights)} is not allowed; allowed: finite numbers")
    if rw.weights is not None and len(rw.weights) != len(rw.functions):
        raise ConfigError(f"reward.weights has {len(rw.weights)} entries but reward.functions has {len(rw.functions)}")
    if rw.correctness not in rw.functions:
        raise ConfigError(f"reward.correctness={rw.correctness!r} must be one of reward.functions {rw.functions}")
    for name in rw.isolated:
        if name not in rw.functions or ":" not in name:
            raise ConfigError(
                f"reward.isolated: {name!r} must be an import path (module:function) in reward.functions {rw.functions}"
            )
    for i, name in enumerate(rw.functions):
        _check_reward(f"reward.functions[{i}]", name, name in rw.isolated)
    if cfg.engine == "trl":  # its own rules in the one table of TRL spellings (imports TRL only for trl.extra)
        from hadw.train.engines.trl_args import check_extra, check_trl

        check_trl(cfg)
        check_extra(cfg.trl.extra)


def _check_data(data: DataConfig) -> None:
    """Task names and levels are known before any model is loaded (templates: _check_template; layout and
    fields: _check_data_fields)."""
    from hadw.data import TASKS

    for key in ("source", "eval_source"):
        value = getattr(data, key)
        if not value and key == "eval_source":
            continue
        if not value.strip():
            raise ConfigError(f"data.{key} is empty; allowed: task:<name>, benchmark:<name>, or a file path")
        if value.startswith("task:"):
            name = value.split(":", 1)[1]
            _choice(f"data.{key}", value, tuple(f"task:{t}" for t in TASKS))
            if data.levels is not None:
                allowed = TASKS[name].levels
                bad = [level for level in data.levels if level not in allowed]
                if bad or not data.levels:
                    raise ConfigError(
                        f"data.levels={list(data.levels)} is not allowed for task {name!r}; allowed: {list(allowed)}"
                    )


def _check_data_fields(data: DataConfig) -> None:
    """data.layout: "auto", a known layout or (from Python) a FieldMap; data.fields: prompt and answer together."""
    from hadw.data import LAYOUTS, DatasetError, FieldMap, make_fields

    if isinstance(data.layout, FieldMap):
        if data.fields.prompt or data.fields.answer:
            raise ConfigError("data.layout is a FieldMap and data.fields is set too; give one of them")
        return
    _choice("data.layout", data.layout, ("auto", *LAYOUTS))
    f = data.fields
    try:
        make_fields(data.layout, f.prompt, f.answer, f.level, f.uid)
    except DatasetError as err:
        raise ConfigError(str(err)) from None


def _check_reward(key: str, name: str, isolated: bool) -> None:
    """A registered name, or an import path that imports (the user's module is imported now)."""
    from hadw.rewards import REWARDS, is_import_path, resolve_reward

    if not is_import_path(name):
        _choice(key, name, (*REWARDS, "or an import path module:function"))
        return
    try:
        resolve_reward(name, isolated)
    except ValueError as err:
        raise ConfigError(f"{key}={name!r}: {err}") from None
