"""HA-DW inside TRL's GRPOTrainer: one config class, one trainer class, the maths from `hadw.core`.

    from hadw.integrations.trl import HADWGRPOConfig, HADWGRPOTrainer
    args = HADWGRPOConfig(output_dir="out", hadw_lambda=1.3, hadw_anchor="window", ...)
    trainer = HADWGRPOTrainer(model=..., reward_funcs=[correct_fn, format_fn], args=args, train_dataset=ds)

How it hooks in (TRL 1.x): `_generate_and_score_completions` runs once per generation batch and returns
this rank's slice of the group-normalised advantages Â. We keep the per-function rewards it gathered
from every rank (wrapping `_calculate_rewards`), gather Â, and replace it with Â·Φ from
`hadw.core.apply_hadw`. All ranks hold the same gathered rewards, so all ranks update an identical
anchor, once per generation batch and never in evaluation. Everything downstream (every `loss_type`,
`importance_sampling_level="sequence"` for GSPO, the clip, the completions table) sees Â·Φ.

The anchor state is written as `hadw_anchor.json` into each checkpoint folder and read back on
`train(resume_from_checkpoint=...)`, through the same two hooks TRL uses for its own entropy
controller state.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate.utils import gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOConfig, GRPOTrainer

from hadw import metrics as M
from hadw.core import (
    ADVANTAGE_ESTIMATORS,
    ANCHORS,
    DEFAULT_LAMBDA,
    Anchor,
    HADWOptions,
    anchor_parameters,
    apply_hadw,
    compute_advantages,
)
from hadw.core.anchors import ANCHOR_KEY_COLUMN, anchor_setting_changes

logger = logging.getLogger(__name__)

ANCHOR_STATE_NAME = "hadw_anchor.json"


@dataclass
class HADWGRPOConfig(GRPOConfig):
    """`GRPOConfig` plus the HA-DW options (docs/method.md §3). Anchor parameters are `hadw_anchor_<name>`;
    only those of the chosen anchor kind are used."""

    hadw_enabled: bool = field(default=True, metadata={"help": "Rescale advantages with Φ (False: plain GRPO)."})
    hadw_lambda: float = field(default=DEFAULT_LAMBDA, metadata={"help": "λ_scale of Φ = λ·exp(D·M)."})
    hadw_anchor: str = field(
        default="window",
        metadata={
            "help": f"Difficulty anchor kind, one of {', '.join(ANCHORS)}. Timing: window weighs with a mean that "
            "includes the current batch; kalman and ema with the prior belief; the keyed kinds with their "
            "hadw_anchor_base's."
        },
    )
    hadw_anchor_k: int = field(default=10, metadata={"help": "window: number of batch accuracies averaged."})
    hadw_anchor_eta: float = field(default=1.0, metadata={"help": "kalman: base gain η."})
    hadw_anchor_m: int = field(default=10, metadata={"help": "kalman: beliefs in the σ_t window."})
    hadw_anchor_eta_min: float = field(default=0.2, metadata={"help": "kalman: floor of the gain η_t."})
    hadw_anchor_alpha: float = field(default=0.2, metadata={"help": "ema: rate α."})
    hadw_anchor_value: float = field(default=0.5, metadata={"help": "fixed: the constant anchor C."})
    hadw_anchor_base: str = field(
        default="window",
        metadata={"help": "per_level / per_source / per_prompt: the kind (and timing) of each history."},
    )
    hadw_anchor_visits: int = field(
        default=4, metadata={"help": "per_prompt: visits pooled into a prompt's success rate (current included)."}
    )
    hadw_anchor_max_prompts: int = field(
        default=100_000, metadata={"help": "per_prompt: prompts remembered (least recently seen forgotten first)."}
    )
    hadw_key_column: str | None = field(
        default=None,
        metadata={
            "help": "per_level / per_source / per_prompt: the dataset column giving each prompt's level, source "
            "or id. Default: level, source, uid respectively. Refused at the first batch when missing."
        },
    )
    hadw_correctness_reward: str | None = field(
        default=None,
        metadata={
            "help": "Reward function giving correctness (p̂ and the batch accuracy): its name or index "
            "(int or digit string). Default: the first reward function."
        },
    )
    hadw_correctness_threshold: float = field(
        default=0.5, metadata={"help": "A response is correct when its correctness reward is > this."}
    )
    hadw_advantage: str | None = field(
        default=None,
        metadata={
            "help": "None: TRL's own group advantage (scale_rewards, multi_objective_aggregation). An estimator of "
            "hadw.core.ADVANTAGE_ESTIMATORS (grpo, drgrpo, rloo, ...): Â recomputed from TRL's weighted total reward "
            "with hadw's estimator, as the native trainer computes it (what `hadw train engine=trl` sets)."
        },
    )
    hadw_advantage_std: str = field(
        default="population",
        metadata={"help": "hadw_advantage set: the group std it divides by, population (ddof 0) | sample (ddof 1)."},
    )
    hadw_normalize: str = field(
        default="none",
        metadata={
            "help": "none (the paper's Φ = λ·exp(D·M)) | batch (Φ rescaled to mean 1 over the batch's informative "
            "responses: re-weighting only, λ cancels)."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        if self.hadw_advantage is not None and self.hadw_advantage not in ADVANTAGE_ESTIMATORS:
            allowed = ", ".join(sorted(ADVANTAGE_ESTIMATORS))
            raise ValueError(f"HADWGRPOConfig.hadw_advantage={self.hadw_advantage!r}; allowed: None, {allowed}")
        if self.hadw_advantage_std not in ("population", "sample"):
            std = self.hadw_advantage_std
            raise ValueError(f"HADWGRPOConfig.hadw_advantage_std={std!r}; allowed: population, sample")
        if self.hadw_anchor not in ANCHORS:
            raise ValueError(f"HADWGRPOConfig.hadw_anchor={self.hadw_anchor!r}; allowed: {', '.join(ANCHORS)}")
        try:
            self.hadw_options()  # the one schema's checks (hadw.core.HADWOptions)
        except ValueError as err:
            raise ValueError(f"HADWGRPOConfig: {err}") from None

    def hadw_anchor_options(self) -> dict[str, Any]:
        """Keyword arguments of the chosen anchor kind, read from the `hadw_anchor_<name>` fields."""
        return {name: getattr(self, f"hadw_anchor_{name}") for name in anchor_parameters(self.hadw_anchor)}

    def hadw_options(self) -> HADWOptions:
        """These `hadw_*` fields as the one HA-DW schema of hadw.core."""
        return HADWOptions(
            self.hadw_enabled,
            self.hadw_lambda,
            self.hadw_anchor,
            self.hadw_anchor_options(),
            self.hadw_correctness_threshold,
            normalize=self.hadw_normalize,
        )


def resolve_reward_index(which: int | str | None, reward_func_names: list[str]) -> int:
    """Column of `rewards_per_func` holding correctness: None -> 0, an index, or a reward function's name."""
    if which is None:
        return 0
    if isinstance(which, int) or (isinstance(which, str) and which.isdigit()):
        index = int(which)
        if not 0 <= index < len(reward_func_names):
            raise ValueError(
                f"hadw_correctness_reward={which!r} is out of range: {len(reward_func_names)} reward functions "
                f"({', '.join(reward_func_names)})"
            )
        return index
    if which not in reward_func_names:
        raise ValueError(f"hadw_correctness_reward={which!r} is not a reward function; allowed: {reward_func_names}")
    return reward_func_names.index(which)


class HADWGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` whose training advantages are Â·Φ (HA-DW). Needs `args` to be a `HADWGRPOConfig`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, HADWGRPOConfig):
            raise TypeError(f"HADWGRPOTrainer needs args=HADWGRPOConfig(...), got {type(self.args).__name__}")
        self.hadw_options = self.args.hadw_options()
        self.hadw_anchor: Anchor = self.hadw_options.make_anchor()
        self.hadw_correctness_index = resolve_reward_index(self.args.hadw_correctness_reward, self.reward_func_names)
        self._hadw_rewards_per_func: torch.Tensor | None = None

    def _calculate_rewards(self, *args, **kwargs) -> torch.Tensor:
        # [N_global, num_reward_funcs], already gathered from every rank (TRL normalises per group on it).
        rewards_per_func = super()._calculate_rewards(*args, **kwargs)
        self._hadw_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func, self._hadw_rewards_per_func = self._hadw_rewards_per_func, None
        if self.model.training:  # evaluation neither reweights nor moves the anchor
            output["advantages"] = self._hadw_rescale(output["advantages"], rewards_per_func, inputs)
        return output

    def _hadw_keys(self, inputs: list[dict[str, Any]]) -> list[Any]:
        """Each completion's level / source / prompt id, gathered from every rank in TRL's order (rank 0's
        slice first, as `gather` lays out the rewards), so every rank's keyed anchor sees the same batch."""
        column = self.args.hadw_key_column or ANCHOR_KEY_COLUMN[self.hadw_anchor.kind]
        missing = [i for i, row in enumerate(inputs) if row.get(column) is None]
        if missing:
            raise ValueError(
                f"hadw_anchor={self.hadw_anchor.kind!r} needs a {column!r} column in the training dataset (row "
                f"keys: {sorted(inputs[missing[0]])}); add it, or name another with hadw_key_column"
            )
        return gather_object([row[column] for row in inputs])

    def _hadw_rescale(
        self, local_advantages: torch.Tensor, rewards_per_func: torch.Tensor, inputs: list[dict[str, Any]]
    ) -> torch.Tensor:
        """local_advantages: [n] this rank's Â; rewards_per_func: [N_global, F]; inputs: this rank's n rows
        (their dataset columns give the keyed anchors' keys). Returns [n] Â·Φ."""
        # An unscored (NaN) correctness reward counts as wrong: NaN > threshold is False.
        correct = (rewards_per_func[:, self.hadw_correctness_index] > self.hadw_options.correct_threshold).float()
        # TRL lays the gathered batch out as consecutive groups of num_generations (rewards.view(-1, G)),
        # and every rank holds an equal, contiguous slice of it.
        group_ids = torch.arange(correct.numel(), device=correct.device) // self.num_generations
        if self.args.hadw_advantage is None:
            advantages = self.accelerator.gather(local_advantages)
        else:  # hadw's estimator on TRL's total (sum_then_normalize's weighted sum), as the native trainer computes Â
            weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
            total = (rewards_per_func * weights).nansum(dim=1)  # [N_global]
            advantages = compute_advantages(
                total, group_ids, self.args.hadw_advantage, std=self.args.hadw_advantage_std
            ).advantages.to(local_advantages.dtype)
        opts = self.hadw_options
        keys = self._hadw_keys(inputs) if self.hadw_anchor.needs_keys else None
        result = apply_hadw(
            advantages, correct, group_ids, self.hadw_anchor, opts.lam, opts.enabled, keys, opts.normalize
        )

        for name, value in result.metrics.items():
            self._metrics["train"][name].append(value)
        final = result.advantages  # [N_global] what is trained on
        for name, value in ((M.ADV_MEAN, final.mean()), (M.ADV_MAX, final.max()), (M.ADV_MIN, final.min())):
            self._metrics["train"][name].append(float(value))
        # The completions table was filled with Â; show what is trained on instead.
        logged = self._logs["advantages"]
        for _ in range(min(len(logged), advantages.numel())):
            logged.pop()
        logged.extend(result.advantages.tolist())

        n = local_advantages.numel()
        start = self.accelerator.process_index * n
        return result.advantages[start : start + n]

    def _save_checkpoint(self, model, trial) -> None:
        super()._save_checkpoint(model, trial)  # with push_to_hub, _push_from_checkpoint wrote the anchor first
        checkpoint = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        self._write_anchor(os.path.join(self._get_output_dir(trial=None), checkpoint))

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        # transformers pushes inside _save_checkpoint: the anchor must be in the folder before the upload.
        self._write_anchor(checkpoint_folder)
        super()._push_from_checkpoint(checkpoint_folder)

    def _write_anchor(self, folder: str) -> None:
        if self.args.should_save and os.path.isdir(folder):  # identical on every rank: the main process writes
            with open(os.path.join(folder, ANCHOR_STATE_NAME), "w") as f:
                json.dump(self.hadw_anchor.state_dict(), f)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        restore_anchor(self.hadw_anchor, os.path.join(checkpoint, ANCHOR_STATE_NAME))


def restore_anchor(anchor: Anchor, path: str) -> bool:
    """Load a checkpoint's anchor state into `anchor` (in place); returns whether it was loaded. A saved
    anchor whose settings differ from the configured one is not loaded: a loud warning, and the anchor
    starts empty with the configured settings (never the saved settings silently winning)."""
    if not os.path.exists(path):
        logger.warning("%s not found: HA-DW anchor starts afresh (checkpoint from a run without HA-DW?)", path)
        return False
    with open(path) as f:
        state = json.load(f)
    changes = anchor_setting_changes(state, anchor)
    if changes:
        logger.warning(
            "HA-DW: %s holds an anchor with other settings (%s); THE ANCHOR STARTS EMPTY with the configured "
            "ones. Keep hadw_anchor* as saved to continue its history.",
            path,
            "; ".join(changes),
        )
        return False
    try:
        anchor.load_state_dict(state)
    except (KeyError, ValueError) as e:
        raise ValueError(f"{path}: cannot restore the HA-DW anchor ({e}); check hadw_anchor") from e
    return True
