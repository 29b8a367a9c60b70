"""The training configuration's schema: one dataclass tree and ConfigError, the bottom of hadw.train.config.

Every field has a default and a reason (the comments beside it: hadw.train.config_docs, `hadw train
--show-config`). `algorithm.preset` (grpo | gspo | dapo) fills the loss fields left at None with the paper's
Table 8 values; `hadw.enabled` switches HA-DW on.

Three floors, each importing only those below it (no circle; tests/test_layers.py): this schema; the strict
YAML loader (hadw.train.config_yaml) and the validation rules (hadw.train.config_checks), which both read it;
and hadw.train.config, whose `load_config` puts them together and which re-exports every name here (import
from there).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hadw.data.tasks import TINY_LEVELS, TINY_TASK, TINY_WARM_START_ACCURACY
from hadw.errors import UserError

if TYPE_CHECKING:
    from hadw.core import HADWOptions, LossSpec

# hadw.core (torch) is imported by the methods that need it (the loss, the anchor): reading a config file, and
# its errors (an unknown key, a YAML mistake), stay as quick as `hadw --help` (tests/test_cli_startup.py).


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
    # Where the warm start comes from: auto (a shipped start of hadw.train.warm_starts when one was made for exactly
    # this task, levels, shape, target and train.seed: the same file on every machine, no SFT; else SFT here) |
    # sft (always SFT here; the result depends on the CPU's kernels) | the name of a shipped start
    warm_start: str = "auto"


@dataclass
class LoraConfig:
    """LoRA adapters through peft (pip install 'hadw[lora]'): train low-rank adapters instead of every weight.
    Checkpoints hold the adapter and its optimiser state (megabytes where a full one holds gigabytes); the KL
    reference is the base model with the adapter switched off (no second copy); `hadw eval RUN_DIR` loads the
    base and merges the adapter in (hadw.rollout.lora)."""

    enabled: bool = False  # off: full fine-tuning, every weight trained (the paper's setting)
    rank: int = 16  # r: the adapters' inner dimension; 8-64 is TRL's and verl's usual range
    alpha: float = 32.0  # lora_alpha: the update is scaled by alpha / rank (2 × rank, the common choice)
    # Dropout on the adapters' input while training (peft's lora_dropout). 0: the policy that samples (eval
    # mode) is the one the loss scores, so the PPO ratio starts at exactly 1.
    dropout: float = 0.0
    # Layers that get adapters: "all-linear" (every linear layer but the output head, as in QLoRA and TRL's
    # examples) or comma-separated module names, e.g. "q_proj,v_proj".
    target_modules: str = "all-linear"
    # Also write merged_model/ at the end: the base with the adapter merged in, a normal model folder for
    # serving (vLLM, transformers) without peft. final_model/ keeps the adapter either way.
    save_merged: bool = False


@dataclass
class ModelConfig:
    # A checkpoint folder (any HF causal LM) or a Hub id such as "Qwen/Qwen2.5-0.5B-Instruct" (downloaded
    # with a progress bar when online, read from the cache offline); empty = build the tiny model.
    path: str = ""
    # Storage dtype of the trained weights, gradients and AdamW state. Only float32: AdamW steps of
    # lr ~1e-6 are below bfloat16's resolution, so bf16 weights would barely move (issue 10).
    dtype: str = "float32"
    # Dtype of the forward/backward passes and of sampling (mixed precision via torch.autocast): float32 |
    # bfloat16 | auto (bfloat16 where the device multiplies bf16 natively: a GPU with bf16, a CPU with AVX512-BF16
    # or AMX; else float32). bfloat16 is TRL's `bf16=True` and verl's default on GPU; on a CPU without native bf16
    # it is slower. Master weights stay float32 either way. float32 by default: the demo and every shipped figure
    # reproduce to the digit only in float32 (benchmarks/studies/bf16_equivalence asks whether bf16 learns the same).
    compute_dtype: str = "float32"
    device: str = "auto"  # auto | cpu | cuda
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    gradient_checkpointing: bool = False  # trade compute for memory on real models
    trust_remote_code: bool = False  # run the model repository's own Python code; only for repos you trust
    lora: LoraConfig = field(default_factory=LoraConfig)


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
    # A system turn before every prompt (chat templates only); a conversational row's own system turn is kept.
    # Empty = none: the model's chat template may add its own default (SmolLM2's "You are a helpful AI assistant").
    system_prompt: str = ""
    limit: int | None = None  # use only the first N rows of a file source
    eval_source: str = ""  # evaluation prompts; empty = held-out items of `source`
    eval_size: int = 200  # evaluation prompts per periodic evaluation (0 = none; with a model.path: 100)
    # Sampled answers per evaluation problem besides the greedy one, at rollout.temperature / top_p (verl's
    # val_kwargs.n): 0 = greedy only; k adds avg@k and pass@k, and the final per-problem file keeps the k scores
    # (avg@k varies less than greedy from run to run: `hadw compare` can then split its variance too).
    eval_samples: int = 0
    # Longest prompt (in tokens) a file row may have; longer rows are skipped and counted, so one huge
    # row cannot blow up memory. 0 = the model's context (max_position_embeddings) - rollout.max_new_tokens;
    # never above the context (evaluation refuses a longer prompt).
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
    # | always | never. TRL and verl always recompute with a vLLM rollout. The step's first mini-batch is never
    # re-scored: it is on-policy, its π_old is its own forward's log-probs (TRL's shortcut when steps align).
    recompute_logprobs: str = "auto"
    group_size: int = 8  # G responses per prompt; the paper uses 8
    temperature: float = 1.0  # sampling temperature; 1.0 samples the policy itself (what the ratio assumes)
    top_p: float = 1.0  # nucleus sampling mass (1.0 = off: truncation makes samples off-policy)
    top_k: int = 0  # sample from the k most likely tokens only (0 = off)
    # the tiny tasks' answers fit in 6 tokens; with a model.path: 128 (16 on a task); the paper: 4096
    max_new_tokens: int = 6
    max_batch_size: int | None = None  # split generation into chunks of at most this many rows
    # Memory one generation chunk may use for its K/V cache and logits (hadw.rollout.memory); None = half the
    # memory free when a rollout starts. Rows are split further when max_batch_size rows would not fit.
    memory_budget_gb: float | None = None
    # How the prompt and the tokens after it run: auto (hadw's fused loop for float32 Llama / Qwen2 on a CPU,
    # where per-op overhead bounds speed; transformers' forward elsewhere) | fused | graph (the fused step with
    # static shapes, one CUDA graph replay per token on a GPU, where kernel launches bound speed; opt-in, not
    # yet measured on a GPU: benchmarks/speed/rollout_gpu.py) | hf (transformers' forward). Same samples either way
    # up to float rounding (log-probs agree to ~1e-6 in float32); benchmarks/speed/roofline.py.
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
        from hadw.core import LOSS_PRESETS, LossSpec

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
        from hadw.core import HADWOptions

        return HADWOptions(self.enabled, self.lam, self.anchor, self.anchor_options(), normalize=self.normalize)


@dataclass
class OptimConfig:
    # adamw (the paper's; scale-free, so a constant factor on every advantage cancels) | sgd (plain SGD, no
    # momentum: the step is proportional to the gradient, so λ and advantage_scale act as learning rates).
    # betas apply to adamw only; weight_decay to both (SGD's is coupled: added to the gradient).
    name: str = "adamw"
    lr: float = 1e-4  # the tiny model's; with a model.path: 1e-5 (hadw.train.model_defaults); the paper uses 1e-6
    weight_decay: float = 0.0  # AdamW's decoupled weight decay (the paper: 0.1)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW's (β1, β2), each in [0, 1)
    # AdamW's ε in m̂/(√v̂ + ε) (torch's default). It is what breaks Adam's scale invariance: a gradient scaled by
    # λ gives the same step up to ε, so a constant factor on the advantages only matters where √v̂ is near ε.
    eps: float = 1e-8
    warmup_steps: int = 5  # optimiser steps of linear warm-up (the paper: 10)
    grad_clip: float = 1.0  # clip the global gradient norm to this (0 = off; paper: 1.0)


@dataclass
class TrainConfig:
    # rollout batches (training steps); the tiny regime: 100 moved `sums` L3 by only +0.06; with a model.path: 100
    steps: int = 200
    prompts_per_step: int = 16  # P prompts × G responses per rollout batch (paper: 256; with a model.path: 4)
    # prompts per optimiser step (paper: 16 of 256 -> 16 updates per batch; with a model.path: 2)
    mini_batch_prompts: int = 4
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
    # auto | bar | lines | off: a live bar (reward, accuracy) on a terminal and a plain line every 10 s elsewhere
    # (a pipe, a Slurm log, CI), so a job without a terminal is never silent; hadw.progress. true = auto and
    # false = off, the boolean of older configs.
    progress: str = "auto"
    tensorboard: bool = False  # also write the metrics to <output_dir>/tensorboard (needs the tensorboard extra)
    wandb: bool = False  # also log to Weights & Biases (needs wandb and a login); --resume continues the W&B run
    wandb_project: str = "hadw"  # the W&B project of the run
    sample_every: int = 10  # log a few completions every N steps (0 = never)
    num_samples: int = 4  # completions written to samples.jsonl each time


@dataclass
class CheckpointConfig:
    every: int = 0  # steps between checkpoints (0 = only at the end; with a model.path: 10)
    keep_last: int = 2  # older checkpoints are deleted; >= 1 (the latest is what --resume needs)


@dataclass
class TRLEngineConfig:
    """`engine: trl`: what TRL (accelerate, DeepSpeed / FSDP, vLLM) needs that has no native spelling. Every shared
    key (model, data, reward, rollout, algorithm, hadw, optim, train, logging, checkpoint) keeps its meaning and is
    mapped to TRL's GRPOConfig in one table (hadw.train.engines.trl_args; `hadw train --show-config` prints the
    result). The run folder, its evaluation and `hadw eval` / `plot` / `compare` are hadw's either way."""

    # Training processes (GPUs, or gloo ranks on a CPU), launched by accelerate; 1 = one process, no launcher.
    num_processes: int = 1
    # accelerate's config: empty = plain data parallel (DDP); a YAML file of yours; or one of TRL's shipped names
    # multi_gpu | zero1 | zero2 | zero3 | fsdp1 | fsdp2 (trl/accelerate_configs/), as `trl grpo --accelerate_config`.
    accelerate_config: str = ""
    # Further `accelerate launch` flags, passed as given (multi-node: --num_machines 2 --machine_rank 0
    # --main_process_ip HOST --main_process_port 29500).
    launch_args: list[str] = field(default_factory=list)
    # Rollouts with vLLM: none (transformers' generate) | colocate (vLLM in every training process, weights synced
    # after each optimiser step; needs a GPU) | server (a `trl vllm-serve` you started; host and port in trl.extra).
    vllm: str = "none"
    vllm_gpu_memory_utilization: float = 0.3  # colocate: the share of each GPU vLLM may take (TRL's default)
    # Any other GRPOConfig field, as TRL spells it (e.g. {vllm_server_host: 10.0.0.2, ddp_timeout: 3600}); checked
    # against GRPOConfig at load: an unknown name, or one hadw already sets from its own key, is refused in one line.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Config:
    # Who trains: native (hadw's own trainer: one process, one device) | trl (TRL's GRPOTrainer with hadw's HA-DW,
    # launched through accelerate: several GPUs, DeepSpeed / FSDP, vLLM; the `trl` section).
    engine: str = "native"
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
    trl: TRLEngineConfig = field(default_factory=TRLEngineConfig)

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
