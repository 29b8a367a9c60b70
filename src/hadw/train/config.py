"""The training configuration: one dataclass tree, loaded from YAML with dotted command-line overrides.

    cfg = load_config("examples/grpo_hadw.yaml", ["hadw.enabled=true", "train.steps=50"])

Every field has a default and a reason (the comments beside it: hadw.train.config_docs, `hadw train
--show-config`). `algorithm.preset` (grpo | gspo | dapo) fills the loss fields left at None with the paper's
Table 8 values; `hadw.enabled` switches HA-DW on.

The top of three floors: the schema (hadw.train.config_schema: the dataclasses and ConfigError) at the bottom,
the strict YAML loader (hadw.train.config_yaml: files and `key=value` overrides) and the validation rules
(hadw.train.config_checks) above it, and here `load_config`, which puts them together, and the config's YAML
form. The floors below never import this module (no import circle: tests/test_layers.py), so it re-exports
their public names: `from hadw.train.config import Config, ConfigError, load_config, validate, ...`.
"""

from __future__ import annotations

import difflib
from dataclasses import fields, is_dataclass, replace
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ConfigTypeError, ValidationError

from hadw.train.config_checks import validate
from hadw.train.config_schema import (
    AlgorithmConfig,
    CheckpointConfig,
    Config,
    ConfigError,
    DataConfig,
    FieldsConfig,
    HADWConfig,
    LoggingConfig,
    LoraConfig,
    ModelConfig,
    OptimConfig,
    RewardConfig,
    RolloutConfig,
    TinyModelConfig,
    TrainConfig,
    TRLEngineConfig,
    _serialisable,
)
from hadw.train.config_yaml import _expected, _load_yaml, _override, _value_at, parse_yaml

__all__ = [
    "REMOVED_KEYS",
    "AlgorithmConfig",
    "CheckpointConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "FieldsConfig",
    "HADWConfig",
    "LoggingConfig",
    "LoraConfig",
    "ModelConfig",
    "OptimConfig",
    "RewardConfig",
    "RolloutConfig",
    "TRLEngineConfig",
    "TinyModelConfig",
    "TrainConfig",
    "config_to_yaml",
    "inert_keys",
    "load_config",
    "parse_yaml",
    "resolve_recipe",
    "validate",
]


def _known_keys(cls: type, prefix: str = "") -> list[str]:
    keys = []
    for f in fields(cls):
        name = f"{prefix}{f.name}"
        keys.append(name)
        default = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        if is_dataclass(default):
            keys += _known_keys(type(default), f"{name}.")
    return keys


# Keys that existed once: say what replaced them instead of "unknown key".
REMOVED_KEYS = {
    "rollout.engine": "the native trainer samples with transformers (CPU / one GPU); for vLLM rollouts train with "
    "engine=trl trl.vllm=colocate (docs/trl.md) or the verl scripts in examples/verl/",
    "train.eval_greedy": "evaluation during training is always greedy; drop the key",
}


def _unknown_key_error(key: str) -> ConfigError:
    if key in REMOVED_KEYS:
        return ConfigError(f"config key {key!r} was removed: {REMOVED_KEYS[key]}")
    keys = _known_keys(Config)
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    if not close:  # a typo in the last part only: compare against the section's keys
        section = key.rsplit(".", 1)[0]
        close = difflib.get_close_matches(key, [k for k in keys if k.startswith(section + ".")], n=1, cutoff=0.4)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(f"unknown config key {key!r}{hint}")


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    interpolate: bool = False,
    resume: bool = False,
) -> Config:
    """Defaults, then the YAML file, then `key=value` overrides; validated. Raises ConfigError (RunDirError when
    `resume` finds no run to continue).

    interpolate: resolve OmegaConf interpolations (${train.seed}, ${oc.env:VAR}) in the file and the
    overrides. Off by default: a `${...}` in a value is literal text (a template, a path), and the
    environment never leaks into config.yaml or folder names unless asked for.
    resume: for `hadw train --resume`: the run to continue is checked before any reward module is imported, the
    config file is a run's (data: its import-path rewards must be trusted), and nothing is remembered as trusted."""
    from hadw.rewards import trust
    from hadw.train.model_defaults import given_keys, with_model_defaults

    merged = OmegaConf.structured(Config)
    sources = []
    if path:
        sources.append((f"config file {path}", _load_yaml(Path(path), interpolate)))
    for item in overrides or []:
        sources.append((f"override {item!r}", _override(item, interpolate)))
    for where, source in sources:
        try:
            merged = OmegaConf.merge(merged, source)
        except ConfigKeyError as err:
            raise ConfigError(f"{where}: {_unknown_key_error(str(err.full_key))}") from None
        except (ValidationError, ConfigTypeError) as err:
            key = err.full_key or "?"
            message = (err.msg or str(err) or type(err).__name__).splitlines()[0]
            if "is not a ListConfig" in message or "is not a DictConfig" in message or "is not a subclass" in message:
                expected = _expected(key)
                message = f"expected {expected}, got {_value_at(source, key)!r}"
            raise ConfigError(f"{where}: invalid value for {key!r}: {message}") from None
    try:
        cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except Exception as err:  # an interpolation that cannot resolve (only with interpolate=True)
        raise ConfigError(f"cannot resolve the config: {' '.join(str(err).split())[:300]}") from None
    given = set().union(*(given_keys(source) for _, source in sources))
    typed = set().union(*(given_keys(source) for where, source in sources if where.startswith("override")))
    config_file = Path(path) if path else None
    run_config = config_file is not None and trust.is_run_config(config_file)
    if run_config:  # its paths are relative to the run folder
        cfg = _run_paths(cfg, config_file.absolute().parent, typed)  # type: ignore[union-attr]
    cfg = resolve_recipe(with_model_defaults(_normalized(cfg), given))  # a real model's defaults where not given
    if resume:  # before any import: a received folder with a config and a module but no run fails here
        from hadw.train.run_dir import check_resume_target

        check_resume_target(cfg.train.output_dir, config_file, run_config, "train.output_dir" in typed)
    # A config is a run's (data, wherever it sits) when it is resumed or trains into its own folder, not only when
    # the folder already holds run files: `cd RECV && hadw train config.yaml --resume` imported RECV/myrw.py.
    own = config_file is not None and (run_config or _trains_in_own_folder(cfg, config_file))
    as_run = own or (config_file is not None and resume)
    # the run folder, never imported from: the config's own one, or the one a recipe elsewhere resumes (a recipe
    # beside your reward module resumes as long as the module is the one you ran: check_saved's hash)
    run_dir = config_file.absolute().parent if own else Path(cfg.train.output_dir)  # type: ignore[union-attr]
    try:  # a run folder's config is data: checked before any reward module is imported
        trust.guard_config(cfg.reward, config_file, typed, as_run, run_dir)
    except trust.RewardTrustError as err:
        raise ConfigError(str(err)) from None
    validate(cfg)
    if not resume:  # a resume names nothing new: trusting its rewards now would vouch for a received config later
        trust.remember_named(cfg.reward, config_file, typed, as_run)
    return cfg


def _trains_in_own_folder(cfg: Config, config_file: Path) -> bool:
    return Path(cfg.train.output_dir).absolute().resolve() == config_file.absolute().parent.resolve()


def _run_paths(cfg: Config, run_dir: Path, typed: set[str]) -> Config:
    """A run config with its path keys (not given on the command line) resolved against the run folder, where the
    run recorded them relative to itself (hadw.eval.run_recipe.portable_path)."""
    from hadw.eval.run_recipe import RUN_PATH_KEYS, resolve_run_path

    for key in RUN_PATH_KEYS:
        section, name = key.split(".")
        part = getattr(cfg, section)
        if key not in typed and isinstance(getattr(part, name), str):
            resolved = resolve_run_path(getattr(part, name), run_dir, key)
            cfg = replace(cfg, **{section: replace(part, **{name: resolved})})
    return cfg


def _normalized(cfg: Config) -> Config:
    """cfg with the spellings a field accepts written its one way: logging.progress true/false (a YAML boolean,
    read as the text "True") as auto/off, so config.yaml says which mode ran."""
    from hadw.progress import normalize_mode

    mode = normalize_mode(cfg.logging.progress)
    return replace(cfg, logging=replace(cfg.logging, progress=mode)) if mode else cfg


def resolve_recipe(cfg: Config) -> Config:
    """cfg with its "auto" prompt recipe made explicit, once, so the run's config.yaml says what ran and
    `hadw eval RUN_DIR` scores the same way: data.template, reward.functions and reward.correctness."""
    from hadw.data import default_recipe

    recipe = default_recipe(cfg.data.source)
    data = replace(cfg.data, template=recipe.template) if cfg.data.template == "auto" else cfg.data
    functions = list(cfg.reward.functions) or [recipe.reward]
    correctness = cfg.reward.correctness or functions[0]
    return replace(cfg, data=data, reward=replace(cfg.reward, functions=functions, correctness=correctness))


def config_to_yaml(cfg: Config) -> str:
    """The run's config.yaml: every setting that applies to this run (tiny-model keys are left out of a run
    from a model.path, data.levels out of a run on a dataset: they would do nothing there)."""
    tree = OmegaConf.to_container(OmegaConf.structured(_serialisable(cfg)))
    for key in inert_keys(cfg):
        section, name = key.split(".")
        tree[section].pop(name, None)
    if cfg.engine == "native":  # a native run's config.yaml reads as before the engine key (and hashes the same)
        tree.pop("engine")
        tree.pop("trl")
    return OmegaConf.to_yaml(tree)


def inert_keys(cfg: Config) -> list[str]:
    """Settings that cannot affect this run (tiny-model settings with a model.path; levels without a task)."""
    keys = ["model.tiny"] if cfg.model.path else []
    if not any(s.startswith("task:") for s in (cfg.data.source, cfg.data.eval_source)):
        keys.append("data.levels")
    return keys
