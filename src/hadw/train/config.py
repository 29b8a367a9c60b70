"""The training configuration: one dataclass tree, loaded from YAML with dotted command-line overrides.

    cfg = load_config("examples/grpo_hadw.yaml", ["hadw.enabled=true", "train.steps=50"])

Every field has a default and a reason. `algorithm.preset` (grpo | gspo | dapo) fills the loss fields
left at None with the paper's Table 8 values; `hadw.enabled` switches HA-DW on.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ConfigTypeError, ValidationError

from hadw.core import ADVANTAGE_ESTIMATORS, ANCHORS, LOSS_PRESETS, NORMALIZE, HADWOptions, LossSpec
from hadw.core.anchors import BASE_ANCHORS
from hadw.core.losses import AGGREGATIONS, POLICY_LOSSES
from hadw.data.tasks import TINY_LEVELS, TINY_TASK, TINY_WARM_START_ACCURACY
from hadw.errors import UserError
from hadw.rollout import DECODERS


class ConfigError(UserError, ValueError):
    """A configuration value or key is invalid; the message names the key and what is allowed."""


@dataclass
class TinyModelConfig:
    """Shape of the offline tiny model built when `model.path` is empty (CPU experiments, the demo)."""

    arch: str = "qwen2"  # qwen2 | llama: the two architectures most RLVR work starts from
    hidden_size: int = 128  # model width
    num_layers: int = 4  # decoder layers
    num_heads: int = 4  # attention heads (query)
    num_kv_heads: int = 2  # grouped-query attention, as in Qwen2/Llama-3
    intermediate_size: int = 384  # MLP width
    # SFT warm start of the freshly built tiny model on the training task until this greedy accuracy
    # (0 = none): a random model never earns a reward, so every group would be degenerate (no gradient).
    warm_start_accuracy: float = TINY_WARM_START_ACCURACY
    warm_start_max_steps: int = 1500  # SFT steps at most (batches of 64 problems)


@dataclass
class ModelConfig:
    # A checkpoint folder (any HF causal LM) or a Hub id such as "Qwen/Qwen2.5-0.5B-Instruct" (downloaded
    # with a progress bar when online, read from the cache offline); empty = build the tiny model.
    path: str = ""
    # Storage dtype of the trained weights, gradients and AdamW state. Only float32: AdamW steps of
    # lr ~1e-6 are below bfloat16's resolution, so bf16 weights would barely move (issue 10).
    dtype: str = "float32"
    # Dtype of the forward/backward passes (mixed precision via torch.autocast): float32 | bfloat16.
    # bfloat16 is TRL's `bf16=True` and verl's default on GPU; on CPU it is slower and only worth it
    # to check a GPU recipe. Master weights stay float32 either way.
    compute_dtype: str = "float32"
    device: str = "auto"  # auto | cpu | cuda
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    gradient_checkpointing: bool = False  # trade compute for memory on real models
    trust_remote_code: bool = False  # run the model repository's own Python code; only for repos you trust


@dataclass
class FieldsConfig:
    """Your dataset's field names (dotted paths into nested rows, e.g. "meta.difficulty"). Set prompt and
    answer to map any JSONL / parquet / HF dataset; empty = use `data.layout`."""

    prompt: str = ""  # the question text (the template adds the instruction)
    answer: str = ""  # the gold answer: a string, a number, or a one-item list
    level: str = ""  # optional difficulty level ("Level 3" -> 3); empty = none
    uid: str = ""  # optional stable id; empty = the row's index


@dataclass
class DataConfig:
    # "task:<name>" for a built-in task, "benchmark:<name>" (the data folder's file, else the public Hub
    # copy), "hf:ORG/NAME[:split]" for any Hub dataset, or a file path (JSONL, parquet, HF dataset folder).
    source: str = f"task:{TINY_TASK}"
    # Built-in tasks: the levels to train on (None = all). The default is the tiny CPU regime
    # (hadw.data.tasks.TINY_*): levels whose steps are gentle enough for the tiny model to learn each with RL.
    levels: list[int] | None = field(default_factory=lambda: list(TINY_LEVELS))
    layout: str = "auto"  # file sources: a known layout (see hadw.data.LAYOUTS) when `fields` is unset
    fields: FieldsConfig = field(default_factory=FieldsConfig)  # your field names (overrides `layout`)
    # Where benchmark files live; empty = $HADW_SHARED_DATA, then
    # ~/.cache/hadw/data (never the current directory).
    data_dir: str = ""
    # Prompt template name (see hadw.data.TEMPLATES) or a format string with {question}. auto = the source's
    # default, the same one `hadw eval` / `hadw probe` use: plain for task: sources, paper for every dataset.
    template: str = "auto"
    chat_template: str = "auto"  # auto (the tokenizer's when it has one, not with "plain") | always | never
    limit: int | None = None  # use only the first N rows of a file source
    eval_source: str = ""  # evaluation prompts; empty = held-out items of `source`
    eval_size: int = 200  # evaluation prompts per periodic evaluation (0 = no evaluation)
    # Longest prompt (in tokens) a file row may have; longer rows are skipped and counted, so one huge
    # row cannot blow up memory. 0 = the model's context (max_position_embeddings) - rollout.max_new_tokens.
    max_prompt_tokens: int = 0


@dataclass
class RewardConfig:
    # Weighted reward functions: registered names (math, math_any, exact, format; see hadw.rewards) or
    # import paths "my_pkg.rewards:accuracy" with TRL's signature f(prompts, completions, **columns).
    # The total reward drives the advantages.
    # Empty = the source's default verifier, as `hadw eval` scores it: exact for task: sources, math else.
    functions: list[str] = field(default_factory=list)
    weights: list[float] | None = None  # None = all 1.0
    # Which function is the 0/1 correctness signal HA-DW reads; empty = the first of `functions` (as TRL).
    correctness: str = ""
    timeout_s: float = 5.0  # per-item timeout of every reward (> 0); a hang scores 0 and is counted
    # Import paths in `functions` that are per-item f(completion, answer) -> float instead: they run in
    # the verifier pool, so `timeout_s` bounds each item (a user function that can hang belongs here).
    isolated: list[str] = field(default_factory=list)
    # What import-path rewards receive as `completions`: text (the response strings, as TRL passes for a standard
    # dataset) | messages ([{"role": "assistant", "content": text}] each, as TRL passes for a conversational one:
    # what trl.rewards.accuracy_reward reads).
    completion_format: str = "text"
    # Stop the run (one line naming the reward and its error) when every item of a reward failed (raised,
    # timed out, returned NaN / None / garbage) for this many consecutive steps; 0 = train on regardless.
    max_failed_steps: int = 3


@dataclass
class RolloutConfig:
    # Re-score the sampled responses under the policy before the update (the old log-probs of the
    # ratio): auto = only when model.compute_dtype is not float32 (in float32 the sampler's log-probs
    # equal a teacher-forced re-scoring to ~1e-6, so recomputing would cost a forward for nothing)
    # | always | never. TRL and verl always recompute with a vLLM rollout.
    recompute_logprobs: str = "auto"
    group_size: int = 8  # G responses per prompt; the paper uses 8
    temperature: float = 1.0  # sampling temperature; 1.0 samples the policy itself (what the ratio assumes)
    top_p: float = 1.0  # nucleus sampling mass (1.0 = off: truncation makes samples off-policy)
    top_k: int = 0  # sample from the k most likely tokens only (0 = off)
    max_new_tokens: int = 6  # the tiny tasks' answers fit in 6 tokens; the paper: 4096 on real models
    max_batch_size: int | None = None  # split generation into chunks of at most this many rows
    # Memory one generation chunk may use for its K/V cache and logits (hadw.rollout.memory); None = half the
    # memory free when a rollout starts. Rows are split further when max_batch_size rows would not fit.
    memory_budget_gb: float | None = None
    # How the prompt and the tokens after it run: auto (hadw's fused loop for float32 Llama / Qwen2 on a CPU,
    # where per-op overhead bounds speed; transformers' forward elsewhere) | fused | graph (the fused step with
    # static shapes, one CUDA graph replay per token on a GPU, where kernel launches bound speed; opt-in, not
    # yet measured on a GPU: benchmarks/rollout_gpu.py) | hf (transformers' forward). Same samples either way
    # up to float rounding (log-probs agree to ~1e-6 in float32); benchmarks/roofline.py.
    decoder: str = "auto"


@dataclass
class AlgorithmConfig:
    preset: str = "grpo"  # grpo | gspo | dapo: fills the None fields below with the paper's values
    advantage: str = "grpo"  # estimator name (see hadw.core.ADVANTAGE_ESTIMATORS)
    std: str = "population"  # population (paper Fig. 1b) | sample (TRL / verl default)
    policy_loss: str | None = None  # token_clip | sequence_clip
    clip_low: float | None = None  # ε_low of the clipped ratio (None = the preset's; TRL `epsilon`)
    clip_high: float | None = None  # ε_high (None = the preset's; DAPO's clip-higher; TRL `epsilon_high`)
    aggregation: str | None = None  # token-mean | seq-mean-token-mean | seq-mean-token-sum-norm
    kl_coef: float = 0.0  # β of the KL to the reference model; the paper trains without KL
    kl_estimator: str = "k3"  # k1 | k2 | k3 (Schulman's estimators; k3 = verl's low_var_kl, TRL's)
    entropy_coef: float = 0.0  # weight of an entropy bonus (0 = none, as in the paper)
    # DAPO extras. Dynamic sampling refills the batch with non-degenerate groups; the paper ran DAPO
    # with it off. Overlong: "mask" drops truncated responses from the loss, "penalty" is DAPO's soft
    # length penalty over the last `overlong_buffer` tokens.
    dynamic_sampling: bool = False
    max_refill_rounds: int = 3  # dynamic sampling: extra rollout rounds at most per step
    overlong: str = "none"  # none | mask | penalty
    overlong_buffer: int = 4  # "penalty": the last N tokens before max_new_tokens where the penalty ramps up
    overlong_penalty: float = 1.0  # "penalty": the penalty at the length limit
    # L of aggregation=seq-mean-token-sum-norm (Dr. GRPO): a constant, so a response's weight does not
    # change with each batch's longest response; None = rollout.max_new_tokens (verl's loss_scale_factor).
    norm_length: int | None = None
    # Every advantage (after HA-DW's Φ) times this: the step-size control for λ. 1 = unchanged. Under SGD a
    # factor c is a c-times larger step; under AdamW with no KL / entropy term it cancels (Adam is scale-free).
    advantage_scale: float = 1.0

    def loss_spec(self, max_new_tokens: int | None = None) -> LossSpec:
        """The loss of `preset` with the fields set here; norm_length defaults to max_new_tokens."""
        base = LOSS_PRESETS[self.preset]
        pick = lambda value, default: default if value is None else value
        return LossSpec(
            policy_loss=pick(self.policy_loss, base.policy_loss),
            clip_low=pick(self.clip_low, base.clip_low),
            clip_high=pick(self.clip_high, base.clip_high),
            aggregation=pick(self.aggregation, base.aggregation),
            kl_coef=self.kl_coef,
            kl_estimator=self.kl_estimator,
            entropy_coef=self.entropy_coef,
            norm_length=self.norm_length or max_new_tokens,
        )


@dataclass
class HADWConfig:
    """HA-DW (docs/method.md §3); the same options as TRL's `hadw_*` and verl's `algorithm.hadw.*` (docs/train.md)."""

    enabled: bool = False  # rescale each response's advantage by Φ; false = the base algorithm alone
    lam: float = 1.3  # λ_scale: paper Table 7's best (the authors' code uses 1.5)
    # window (the authors' code: mean of the last k batch accuracies, the current one included) | kalman
    # (the paper's eqs. 8-12; weights use the prior belief) | ema (weights use the prior) | fixed | beyond the
    # paper (docs/method.md §3.4): per_level / per_source (one history of kind anchor_base per difficulty level
    # / data source) | per_prompt (a prompt's pooled success over its last prompt_visits visits replaces p̂)
    anchor: str = "window"
    anchor_base: str = "window"  # per_level / per_source / per_prompt: the kind (and timing) of each history
    prompt_visits: int = 4  # per_prompt: visits pooled into a prompt's success rate, the current one included
    prompt_max: int = 100_000  # per_prompt: prompts remembered (the least recently seen forgotten first)
    window_k: int = 10  # window: batch accuracies averaged (the authors' released code)
    kalman_eta: float = 1.0  # kalman: base gain η (η_t = η·σ_t, σ_t the std of the last m beliefs)
    kalman_m: int = 10  # kalman: beliefs in σ_t's window, and batches of running-mean warm-up
    kalman_eta_min: float = 0.2  # kalman: floor of the gain η_t, so the anchor tracks (0 = the paper as printed)
    ema_alpha: float = 0.2  # ema: weight of the newest batch accuracy
    fixed_value: float = 0.5  # fixed: the constant anchor (0.5 = the theory's pivot, where the bias changes sign)
    # none (the paper: Φ = λ·exp(D·M)) | batch (Φ rescaled to mean 1 over the batch's informative responses:
    # HA-DW as pure re-weighting, so neither λ nor the batch's mean Φ changes the step size)
    normalize: str = "none"

    def anchor_options(self) -> dict[str, Any]:
        """The chosen anchor kind's options, from the fields above."""
        base = {
            "window": {"k": self.window_k},
            "kalman": {"eta": self.kalman_eta, "m": self.kalman_m, "eta_min": self.kalman_eta_min},
            "ema": {"alpha": self.ema_alpha},
            "fixed": {"value": self.fixed_value},
        }
        if self.anchor in base:
            return base[self.anchor]
        if self.anchor_base not in base:
            allowed = ", ".join(base)
            raise ConfigError(f"hadw.anchor_base={self.anchor_base!r} is not allowed; allowed values: {allowed}")
        # keyed kinds take every base option (one flat schema); only anchor_base's own are used
        options = {"base": self.anchor_base, **{k: v for kind in base.values() for k, v in kind.items()}}
        if self.anchor == "per_prompt":
            options |= {"visits": self.prompt_visits, "max_prompts": self.prompt_max}
        return options

    def options(self) -> HADWOptions:
        """The one HA-DW schema of hadw.core (validated)."""
        return HADWOptions(self.enabled, self.lam, self.anchor, self.anchor_options(), normalize=self.normalize)


@dataclass
class OptimConfig:
    # adamw (the paper's; scale-free, so a constant factor on every advantage cancels) | sgd (plain SGD, no
    # momentum: the step is proportional to the gradient, so λ and advantage_scale act as learning rates).
    # betas apply to adamw only; weight_decay to both (SGD's is coupled: added to the gradient).
    name: str = "adamw"
    lr: float = 1e-4  # the tiny CPU setting; the paper (examples/math_grpo_hadw.yaml) uses 1e-6
    weight_decay: float = 0.0  # AdamW's decoupled weight decay (the paper: 0.1)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW's (β1, β2), each in [0, 1)
    # AdamW's ε in m̂/(√v̂ + ε) (torch's default). It is what breaks Adam's scale invariance: a gradient scaled by
    # λ gives the same step up to ε, so a constant factor on the advantages only matters where √v̂ is near ε.
    eps: float = 1e-8
    warmup_steps: int = 5  # optimiser steps of linear warm-up (the paper: 10)
    grad_clip: float = 1.0  # clip the global gradient norm to this (0 = off; paper: 1.0)


@dataclass
class TrainConfig:
    steps: int = 200  # rollout batches (training steps); the tiny regime: 100 moved `sums` L3 by only +0.06
    prompts_per_step: int = 16  # P prompts × G responses per rollout batch (paper: 256)
    mini_batch_prompts: int = 4  # prompts per optimiser step (paper: 16 of 256 -> 16 updates per batch)
    ppo_epochs: int = 1  # passes over each rollout batch
    # Responses per forward/backward (0 = the whole mini-batch). Gradients accumulate and each piece is
    # weighted by its share, so the update equals the unsplit one; lower it when a mini-batch does not fit.
    micro_batch_size: int = 0
    seed: int = 0  # seeds the model init, prompt order and sampling; a run is a function of its seed
    output_dir: str = "runs/default"  # the run folder (refused when it holds another run; see --resume/--overwrite)
    eval_every: int = 0  # steps between evaluations (0 = only at the end)
    num_threads: int = 0  # torch CPU threads (0 = torch's default); 1 per process when runs share cores


@dataclass
class LoggingConfig:
    progress: bool = True  # a progress bar with live reward / accuracy
    tensorboard: bool = False  # also write the metrics to <output_dir>/tensorboard (needs the tensorboard extra)
    wandb: bool = False  # also log to Weights & Biases (needs wandb and a login); --resume continues the W&B run
    wandb_project: str = "hadw"  # the W&B project of the run
    sample_every: int = 10  # log a few completions every N steps (0 = never)
    num_samples: int = 4  # completions written to samples.jsonl each time


@dataclass
class CheckpointConfig:
    every: int = 0  # steps between checkpoints (0 = only at the end)
    keep_last: int = 2  # older checkpoints are deleted; >= 1 (the latest is what --resume needs)


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    hadw: HADWConfig = field(default_factory=HADWConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(_serialisable(self))


def _serialisable(cfg: Config) -> Config:
    """cfg with a FieldMap set from Python in `data.layout` written as its field names (data.fields.*), so
    the run's config.yaml and metrics can hold it; its conversion functions are code and are not saved."""
    from hadw.data import FieldMap

    fm = cfg.data.layout
    if not isinstance(fm, FieldMap):
        return cfg
    names = FieldsConfig(fm.question, fm.answer, fm.level or "", fm.uid or "")
    return replace(cfg, data=replace(cfg.data, layout="auto", fields=names))


# ---------------------------------------------------------------------------------------------------
# Loading and validation


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
    "rollout.engine": "the native trainer samples with transformers (CPU / one GPU); for vLLM rollouts use the "
    "TRL script examples/trl/math_grpo_hadw.py (use_vllm, colocate) or the verl scripts in examples/verl/",
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
    path: str | Path | None = None, overrides: list[str] | None = None, interpolate: bool = False
) -> Config:
    """Defaults, then the YAML file, then `key=value` overrides; validated. Raises ConfigError.

    interpolate: resolve OmegaConf interpolations (${train.seed}, ${oc.env:VAR}) in the file and the
    overrides. Off by default: a `${...}` in a value is literal text (a template, a path), and the
    environment never leaks into config.yaml or folder names unless asked for."""
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
    cfg = resolve_recipe(cfg)
    validate(cfg)
    return cfg


def resolve_recipe(cfg: Config) -> Config:
    """cfg with its "auto" prompt recipe made explicit, once, so the run's config.yaml says what ran and
    `hadw eval RUN_DIR` scores the same way: data.template, reward.functions and reward.correctness."""
    from hadw.data import default_recipe

    recipe = default_recipe(cfg.data.source)
    data = replace(cfg.data, template=recipe.template) if cfg.data.template == "auto" else cfg.data
    functions = list(cfg.reward.functions) or [recipe.reward]
    correctness = cfg.reward.correctness or functions[0]
    return replace(cfg, data=data, reward=replace(cfg.reward, functions=functions, correctness=correctness))


# A real config holds a few hundred values; far more is a YAML alias bomb ("billion laughs").
MAX_YAML_VALUES = 100_000
MAX_CONFIG_BYTES = 1 << 20
_DOTTED_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class _DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: object, line: int, first: int):
        super().__init__(f"duplicate key {key!r} (first at line {first})")
        self.key, self.line, self.first = key, line, first


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader (no Python tags: a !!python/object never runs) that refuses a key given twice in
    one mapping, where YAML would silently keep the last."""

    def construct_mapping(self, node, deep=False):
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                continue
            if first != key_node.start_mark.line + 1:
                raise _DuplicateKeyError(key, key_node.start_mark.line + 1, first)
        return super().construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _StrictLoader.construct_mapping)
# YAML 1.2 floats (1e-6 without a dot), as OmegaConf's own loader reads them
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
        r"|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def parse_yaml(text: str, where: str) -> Any:
    """YAML text -> Python data, safely: no Python tags, no duplicate keys, no alias bomb, no stack overflow.
    Raises ConfigError naming `where` (a file, an override) and the line."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader
    except _DuplicateKeyError as err:
        raise ConfigError(
            f"{where}:{err.line}: duplicate key {err.key!r} (first at line {err.first}); give each "
            "key once (YAML would silently keep the last)"
        ) from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply to be a config") from None
    _check_size(data, where)
    return data


def _check_size(data: Any, where: str) -> None:
    """ConfigError when data expands to more than MAX_YAML_VALUES values (aliases count each time used)."""
    stack, count = [data], 0
    while stack:
        item = stack.pop()
        count += 1
        if count > MAX_YAML_VALUES:
            raise ConfigError(
                f"{where}: expands to more than {MAX_YAML_VALUES} values (repeated YAML aliases, an alias bomb); "
                "write the values out"
            )
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item


def _literal(data: Any) -> Any:
    """Every `${` in a string escaped for OmegaConf (`\\${`), so it stays literal text."""
    if isinstance(data, str):
        return data.replace("${", "\\${")
    if isinstance(data, dict):
        return {k: _literal(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_literal(v) for v in data]
    return data


def _override(item: str, interpolate: bool):
    """One `key=value` override as an OmegaConf mapping. The value is YAML (numbers, lists, booleans); text
    that is not YAML (`{question} Answer:`) is taken as a string, except an unclosed list."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key=value (e.g. train.steps=50)")
    key, value = item.split("=", 1)
    key = key.strip()
    if not _DOTTED_KEY.fullmatch(key):
        raise ConfigError(f"override {item!r}: {key!r} is not a dotted key like train.steps")
    try:
        parsed = yaml.load(value, Loader=_StrictLoader) if value.strip() else ""  # a SafeLoader
        _check_size(parsed, f"override {item!r}")
    except (yaml.YAMLError, RecursionError) as err:
        if value.lstrip().startswith("["):
            problem = getattr(err, "problem", None) or type(err).__name__
            raise ConfigError(f"override {item!r}: not a valid YAML list ({problem}); write e.g. {key}=[1,2]") from None
        parsed = value  # e.g. data.template={question} Answer:
    if isinstance(parsed, float) and value.strip().lower() in (".nan", "nan"):
        parsed = math.nan
    source = OmegaConf.create()
    try:
        OmegaConf.update(source, key, parsed if interpolate else _literal(parsed), force_add=True)
    except Exception as err:
        problem = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"override {item!r}: {problem}") from None
    _check_sections(OmegaConf.to_container(source, resolve=False), f"override {item!r}")
    return source


def _check_sections(data: Any, where: str, node: Any = Config, prefix: str = "") -> None:
    """ConfigError when a section (train, data.fields, ...) is given a value instead of its keys."""
    import typing

    if not isinstance(data, dict) or not is_dataclass(node):
        return
    hints = typing.get_type_hints(node)
    for key, value in list(data.items()):
        section = hints.get(key) if isinstance(key, str) else None
        if section is None or not is_dataclass(section):
            continue
        if value is None:  # `train:` with nothing under it: an empty section
            del data[key]
            continue
        if not isinstance(value, dict):
            keys = ", ".join(f.name for f in fields(section))
            raise ConfigError(
                f"{where}: {prefix}{key} is a section ({keys}), not a value; set one of its keys, e.g. "
                f"{prefix}{key}.{fields(section)[0].name}=..."
            )
        _check_sections(value, where, section, f"{prefix}{key}.")


def _expected(key: str) -> str:
    """What the Config field at dotted `key` holds, in words."""
    import typing

    node: Any = Config
    for part in key.split("."):
        hints = typing.get_type_hints(node) if is_dataclass(node) else {}
        if part not in hints:
            return "another type"
        node = hints[part]
    if is_dataclass(node):
        return f"a section of keys ({', '.join(f.name for f in fields(node))})"
    return f"a {getattr(node, '__name__', None) or node}"


def _value_at(source, key: str) -> Any:
    try:
        return OmegaConf.to_container(OmegaConf.select(source, key, default=None), resolve=False)
    except Exception:
        return OmegaConf.select(source, key, default=None)


def _yaml_error(path: str, err: yaml.YAMLError) -> str:
    """One line: where the YAML broke and the usual cause (an unquoted value with {, }, : or #)."""
    mark = getattr(err, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return (
        f"{where}: not valid YAML ({problem}); quote values that contain {{ }} : or #, "
        'e.g. template: "{question} Answer:"'
    )


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


def _load_yaml(path: Path, interpolate: bool = False):
    """The YAML file as an OmegaConf mapping; every way it can be wrong is a one-line ConfigError."""
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory; pass a YAML file")
    if not path.is_file():
        what = "not a regular file" if path.exists() else "not found"
        raise ConfigError(f"config file {what}: {path}" + ("; pass a YAML file" if path.exists() else ""))
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path} is {path.stat().st_size} bytes; a config is at most {MAX_CONFIG_BYTES}")
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8-sig")  # a UTF-8 BOM is accepted
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte {err.object[err.start]:#x})") from None
    except OSError as err:
        raise ConfigError(f"config file {path}: {err.strerror}") from None
    try:
        data = parse_yaml(text, str(path))
    except yaml.YAMLError as err:
        raise ConfigError(_yaml_error(str(path), err)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections (model:, data:, ...), got a {type(data).__name__}")
    _check_sections(data, str(path))
    try:
        return OmegaConf.create(data if interpolate else _literal(data))
    except Exception as err:  # e.g. non-string keys
        raise ConfigError(f"{path}: {str(err).splitlines()[0]}") from None


def _choice(key: str, value: Any, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; allowed values: {', '.join(map(str, allowed))}")


def _range(key: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ConfigError(f"{key}={value} is out of range; allowed: [{low}, {high}]")


def _above(key: str, value: float, low: float) -> None:
    if not value > low:
        raise ConfigError(f"{key}={value} is not allowed; must be > {low:g}")


def validate(cfg: Config) -> None:
    """Check every enumerated and bounded field; the message names the key and the allowed values."""
    a, r, t = cfg.algorithm, cfg.rollout, cfg.train
    if cfg.model.dtype != "float32":
        raise ConfigError(
            f"model.dtype={cfg.model.dtype!r} would train {cfg.model.dtype} weights directly (AdamW updates below "
            "its resolution are lost); keep model.dtype=float32 and set model.compute_dtype=bfloat16 for "
            "mixed precision"
        )
    _choice("model.compute_dtype", cfg.model.compute_dtype, ("float32", "bfloat16"))
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
    _range("logging.sample_every", cfg.logging.sample_every, 0, 1 << 30)
    _range("logging.num_samples", cfg.logging.num_samples, 0, 1 << 20)
    _range("data.eval_size", cfg.data.eval_size, 0, 1 << 30)
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


def config_to_yaml(cfg: Config) -> str:
    """The run's config.yaml: every setting that applies to this run (tiny-model keys are left out of a run
    from a model.path, data.levels out of a run on a dataset: they would do nothing there)."""
    tree = OmegaConf.to_container(OmegaConf.structured(_serialisable(cfg)))
    for key in inert_keys(cfg):
        section, name = key.split(".")
        tree[section].pop(name, None)
    return OmegaConf.to_yaml(tree)


def inert_keys(cfg: Config) -> list[str]:
    """Settings that cannot affect this run (tiny-model settings with a model.path; levels without a task)."""
    keys = ["model.tiny"] if cfg.model.path else []
    if not any(s.startswith("task:") for s in (cfg.data.source, cfg.data.eval_source)):
        keys.append("data.levels")
    return keys
