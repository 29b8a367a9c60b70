"""Two default recipes: the tiny built-in model's, and a real model's (any `model.path`).

The schema's defaults (hadw.train.config) are the tiny model's CPU regime: 6-token answers to `sums`, lr 1e-4, 200
steps of 16 prompts. A real model given by `model.path` (a Hub id, or a folder whose vocabulary is not the tiny
model's character tokenizer) gets instead, for every key the user did not set (in the
config file or as key=value), the defaults below: a chat model needs room to answer, a smaller learning rate, and
batches that fit a CPU. They are written into the run's config.yaml like every other value, so a run says what it
ran and a resume is the same run.

Why each value (TRL's GRPOConfig and the paper, scaled to a laptop's CPU; docs/train.md "Defaults"):
    rollout.max_new_tokens  128    half TRL's max_completion_length (256), for a CPU: a short chain of thought and
                                   its \boxed{} answer; a built-in task: its recipe's 16 (hadw.data.sources).
                                   The paper's 4096 is for long chains of thought on GPUs
    optim.lr                1e-5   TRL's and the paper's 1e-6 are for batches of 256+ responses over hundreds of
                                   steps; 32 responses a step over tens of steps moved SmolLM2-135M at 1e-5
                                   (benchmarks/studies/real_model_rl/real_model_rl.md) and barely at 1e-6
    train.prompts_per_step  4      × G = 8: 32 responses a step (a CPU step of a 135M model: about a minute)
    train.mini_batch_prompts 2     2 optimiser steps per rollout batch (the paper: 16 per batch)
    train.steps             100    TRL's epochs over a small dataset; stop and --resume any time
    data.eval_size          100    greedy held-out problems at the end: enough for a ±0.1 interval
    checkpoint.every        10     a step takes minutes: a stop loses at most 10 of them
On a GPU raise train.prompts_per_step (the paper: 256 prompts) and rollout.max_new_tokens.

No import of the schema here (it imports this module when it loads a config): keys are dotted paths.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

REAL_MODEL_DEFAULTS: dict[str, Any] = {
    "rollout.max_new_tokens": 128,
    "optim.lr": 1e-5,
    "train.prompts_per_step": 4,
    "train.mini_batch_prompts": 2,
    "train.steps": 100,
    "data.eval_size": 100,
    "checkpoint.every": 10,
}

TINY = "tiny"
REAL = "real-model"


TINY_VOCAB_MAX = 1000  # hadw's character tokenizer has 260 tokens; every real model's has tens of thousands


def is_tiny_folder(model_path: str) -> bool:
    """True when model.path is a folder holding hadw's tiny model (`hadw sft`'s output, a shipped warm start, a run's
    final_model): its config.json's vocabulary is the character tokenizer's. Such a run keeps the tiny recipe."""
    import json
    from pathlib import Path

    config = Path(model_path) / "config.json"
    try:
        if not config.is_file() or config.stat().st_size > 1 << 20:
            return False
        vocab = json.loads(config.read_text(encoding="utf-8")).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return False  # unreadable or not a model folder: the trainer says so in one line when it loads it
    return isinstance(vocab, int) and 0 < vocab < TINY_VOCAB_MAX


def recipe_name(model_path: str) -> str:
    """Which default recipe a config with this model.path gets."""
    return REAL if model_path and not is_tiny_folder(model_path) else TINY


def given_keys(tree: Any, prefix: str = "") -> set[str]:
    """Every dotted key set in a config mapping (a YAML file's or an override's), sections included."""
    keys: set[str] = set()
    if hasattr(tree, "items"):
        for key, value in tree.items():
            name = f"{prefix}{key}"
            keys.add(name)
            keys |= given_keys(value, f"{name}.")
    return keys


def with_model_defaults(cfg: Any, given: set[str]) -> Any:
    """cfg (a hadw Config) with REAL_MODEL_DEFAULTS for the keys not in `given`, when model.path names a real model;
    unchanged for the tiny model."""
    if recipe_name(cfg.model.path) == TINY:
        return cfg
    from hadw.data import default_recipe

    for key, value in REAL_MODEL_DEFAULTS.items():
        section, name = key.split(".")
        if key in given:
            continue
        if key == "rollout.max_new_tokens" and cfg.data.source.startswith("task:"):
            value = default_recipe(cfg.data.source).max_new_tokens  # short answers: what `hadw eval` gives a task
        cfg = replace(cfg, **{section: replace(getattr(cfg, section), **{name: value})})
    return cfg


SFT_SECONDS_PER_STEP = 0.8  # the tiny model's SFT step (64 problems) on one CPU core: what the first line quotes


def shipped_warm_start(cfg: Any) -> str | None:
    """The shipped warm start (hadw.train.warm_starts) made for exactly this tiny run, or None: its task and levels,
    the default tiny shape, SFT target model.tiny.warm_start_accuracy and SFT seed train.seed."""
    from hadw.train import warm_starts as W

    t = cfg.model.tiny
    if cfg.model.path or t.warm_start_accuracy <= 0 or t.warm_start == "sft":
        return None
    if t.warm_start != "auto":
        return t.warm_start  # a name: checked (and refused in one line) when it is loaded
    shape = {k: v for k, v in vars(t).items() if not k.startswith("warm_start")}
    default_shape = {k: v for k, v in vars(type(t)()).items() if not k.startswith("warm_start")}
    if shape != default_shape:
        return None
    for name, start in W.shipped().items():
        fits = (
            cfg.data.source == f"task:{start.task}"
            and list(cfg.data.levels or []) == list(start.levels)
            and t.warm_start_accuracy == start.target
            and cfg.train.seed == start.sft_seed
        )
        if fits:
            return name
    return None


def start_line(cfg: Any) -> str:
    """The first line of `hadw train`: the model, the default recipe, and the warm start it loads or builds with
    how long that takes, said before anything slow happens."""
    r, t = cfg.rollout, cfg.train
    shape = f"{t.steps} steps x {t.prompts_per_step} prompts x G={r.group_size}, {r.max_new_tokens} new tokens, "
    shape += f"lr {cfg.optim.lr:g}"
    if cfg.model.path:
        recipe = recipe_name(cfg.model.path)
        return f"hadw train: model {cfg.model.path} ({recipe} recipe: {shape}; docs/train.md, Defaults)"
    tiny = cfg.model.tiny
    line = f"hadw train: the tiny built-in model ({tiny.arch}, {tiny.num_layers} layers x {tiny.hidden_size}; {TINY} "
    line += f"recipe: {shape}); "
    shipped = shipped_warm_start(cfg)
    if tiny.warm_start_accuracy <= 0:
        return line + "no warm start (model.tiny.warm_start_accuracy=0)"
    if shipped is not None:
        return line + f"warm start: the shipped {shipped} (no SFT)"
    minutes = tiny.warm_start_max_steps * SFT_SECONDS_PER_STEP / 60
    return line + (
        f"warm start: SFT here to greedy {tiny.warm_start_accuracy:g}, at most {tiny.warm_start_max_steps} steps "
        f"(up to ~{minutes:.0f} min on a CPU core; no shipped start fits this task, levels, shape and seed)"
    )
