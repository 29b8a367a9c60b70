"""`grpo_hadw`: verl's own GRPO advantage, rescaled by Φ from `hadw.core` (docs/method.md §3).

verl computes advantages in its driver process, once per training step, by calling a registered
estimator with the whole rollout batch:

    token_level_rewards: [bs, T] (the outcome reward sits on the last response token)
    response_mask:       [bs, T]
    index:               [bs] the prompt uid of each response (numpy object array)
    config:              the `algorithm` config node; HA-DW reads its `hadw` sub-node

Â comes from verl's `compute_grpo_outcome_advantage` unchanged (sample std, epsilon, and
`algorithm.norm_adv_by_std_in_grpo=False` for Dr. GRPO), so with HA-DW off the result is bit-identical
to `algorithm.adv_estimator=grpo`. The anchor lives in this (driver) process, is updated once per call
(= once per step; validation never computes advantages), and is checkpointed by
`hadw.integrations.verl.checkpoint.HADWCheckpointCallback`.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

from hadw.core import DEFAULT_LAMBDA, Anchor, HADWOptions, apply_hadw, make_anchor
from hadw.core.anchors import ANCHOR_KEY_COLUMN, anchor_setting_changes
from hadw.integrations.verl import ESTIMATOR_NAME, tracking

logger = logging.getLogger(__name__)
# verl sets the root logger to WARNING; our one line per step should still reach the driver's console.
logger.setLevel(os.environ.get("HADW_LOG_LEVEL", "INFO"))


@dataclass(frozen=True)
class VerlHADWConfig:
    """`algorithm.hadw.*` (all optional), verl's spelling of hadw.core.HADWOptions (docs/train.md has the
    table): `enable` as in verl's `filter_groups.enable`; anchor_options go to the anchor (window: k;
    kalman: eta, m, eta_min; ema: alpha; fixed: value); metrics_file and log_to_tracker are verl-only."""

    enable: bool = True
    lam: float = DEFAULT_LAMBDA
    anchor: str = "window"
    anchor_options: dict[str, Any] = field(default_factory=dict)
    correct_threshold: float = 0.5  # a response is correct when its outcome score is > this
    normalize: str = "none"  # none (the paper's Φ) | batch (Φ to mean 1 over the informative responses)
    metrics_file: str | None = None  # append one JSON line of hadw/* metrics per step
    log_to_tracker: bool = True  # the hadw/* metrics into verl's own logger (trainer.logger), with verl's step

    @staticmethod
    def from_config(config: Any) -> VerlHADWConfig:
        node = config.get("hadw", None) if config is not None else None
        raw = _to_dict(node)
        allowed = set(VerlHADWConfig.__dataclass_fields__)
        unknown = sorted(set(raw) - allowed)
        if unknown:
            raise ValueError(f"algorithm.hadw: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
        verl = VerlHADWConfig(**{**raw, "anchor_options": _to_dict(raw.get("anchor_options"))})
        if verl.anchor in ANCHOR_KEY_COLUMN:
            raise ValueError(
                f"algorithm.hadw.anchor={verl.anchor} is not available in verl: it needs each response's "
                f"{ANCHOR_KEY_COLUMN[verl.anchor]}, and verl gives an advantage estimator only the rewards and a "
                "fresh random uid per sample and step (no level, data source or stable prompt id); use window, "
                "kalman, ema or fixed (docs/verl.md), or the native trainer / TRL for the keyed anchors"
            )
        try:
            verl.options()
        except ValueError as err:
            raise ValueError(f"algorithm.hadw: {err}") from None
        return verl

    def options(self) -> HADWOptions:
        """The one HA-DW schema of hadw.core (validated)."""
        return HADWOptions(
            self.enable, self.lam, self.anchor, self.anchor_options, self.correct_threshold, normalize=self.normalize
        )


def _to_dict(node: Any) -> dict[str, Any]:
    if node is None:
        return {}
    if hasattr(node, "_metadata"):  # an OmegaConf node: resolve interpolations, drop the config types
        from omegaconf import OmegaConf

        return dict(OmegaConf.to_container(node, resolve=True))
    return dict(node)


class AnchorStore:
    """The driver's one anchor. Rebuilt when the configured kind/parameters change; `pending` holds a
    state restored from a checkpoint before the first step has told us the options."""

    def __init__(self):
        self.anchor: Anchor | None = None
        self.spec: dict[str, Any] | None = None
        self.pending: dict[str, Any] | None = None
        self.last_metrics: dict[str, float] = {}
        self.checked = False  # check_setup run (start-up warnings given once)

    def get(self, options: HADWOptions) -> Anchor:
        """The anchor for these options (hadw.core.HADWOptions)."""
        spec = options.anchor_spec()
        if self.anchor is None or spec != self.spec:
            if self.anchor is not None:
                logger.warning(
                    "HA-DW: algorithm.hadw anchor settings changed from %s to %s; THE ANCHOR STARTS EMPTY",
                    self.spec,
                    spec,
                )
            self.anchor, self.spec = make_anchor(**spec), spec
            if self.pending is not None:
                changes = anchor_setting_changes(self.pending, self.anchor)
                if changes:  # never let the saved settings silently win, nor fail the resume
                    logger.warning(
                        "HA-DW: the resumed checkpoint's anchor has other settings (%s); THE ANCHOR STARTS EMPTY "
                        "with the configured ones. Keep algorithm.hadw as saved to continue its history.",
                        "; ".join(changes),
                    )
                else:
                    self.anchor.load_state_dict(self.pending)
                self.pending = None
        return self.anchor

    def state_dict(self) -> dict[str, Any] | None:
        return self.anchor.state_dict() if self.anchor is not None else self.pending

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.anchor is not None:
            self.anchor.load_state_dict(state)
        else:
            self.pending = dict(state)

    def reset(self) -> None:
        self.__init__()


STORE = AnchorStore()


def _get(node: Any, dotted: str, default: Any = None) -> Any:
    """config.a.b.c for a DictConfig, a dict or an object; `default` when a level is missing."""
    for key in dotted.split("."):
        if node is None:
            return default
        node = node.get(key, None) if hasattr(node, "get") else getattr(node, key, None)
    return default if node is None else node


def check_setup(config: Any) -> list[str]:
    """Start-up checks on verl's full trainer config (or its `algorithm` node). Returns the warnings given.

    - Multi-turn / multi-output agent loops: verl's own `grpo` groups only each session's final output
      (compute_advantage_for_multi_trajectories); any other estimator, `grpo_hadw` included, is handed every
      output row, so groups and the anchor would count intermediate turns. Refused (ValueError).
    - `algorithm.filter_groups.enable` (DAPO dynamic sampling): the anchor then sees only the kept,
      non-degenerate groups, so its batch accuracy is biased toward 1/2. Warned, not refused.
    """
    if _get(config, "actor_rollout_ref.rollout.multi_turn.enable", False):
        raise ValueError(
            "actor_rollout_ref.rollout.multi_turn.enable=true: grpo_hadw supports single-turn rollouts only "
            "(verl groups multi-output agent sessions by their final output for `grpo` alone); see docs/verl.md"
        )
    algorithm = _get(config, "algorithm", config)
    warnings = []
    if _get(algorithm, "filter_groups.enable", False):
        warnings.append(
            "HA-DW: algorithm.filter_groups.enable=true: the anchor's batch accuracy is computed on the kept "
            "(non-degenerate) groups only, so it is pulled toward 1/2; see docs/verl.md"
        )
    for message in warnings:
        logger.warning(message)
    return warnings


def group_ids(index: np.ndarray | list) -> torch.Tensor:
    """verl's per-response prompt uids (any hashable) -> [bs] int64 group numbers."""
    _, inverse = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    return torch.as_tensor(inverse.reshape(-1), dtype=torch.long)


@register_adv_est(ESTIMATOR_NAME)
def compute_grpo_hadw_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages × Φ. Returns (advantages, returns), both [bs, T], like verl's `grpo`."""
    verl = VerlHADWConfig.from_config(config)
    options = verl.options()
    if not STORE.checked:  # the estimator sees only `algorithm`: the filter_groups warning, once
        check_setup(config)
        STORE.checked = True
    _check_single_output_sessions(index)
    if norm_adv_by_std_in_grpo is None:  # verl passes it to built-in GRPO only; others read the config
        norm_adv_by_std_in_grpo = config.get("norm_adv_by_std_in_grpo", True) if config is not None else True
    # One scalar Â per response: verl's GRPO on a [bs, 1] all-ones mask (so empty responses keep theirs).
    ones = torch.ones_like(response_mask[:, :1], dtype=token_level_rewards.dtype)
    scalar, _ = compute_grpo_outcome_advantage(
        token_level_rewards, ones, index, epsilon=epsilon, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo
    )
    scores = token_level_rewards.sum(dim=-1)
    correct = (scores > options.correct_threshold).float()
    groups = group_ids(index).to(scores.device)
    anchor = STORE.get(options)
    result = apply_hadw(
        scalar[:, 0], correct, groups, anchor, options.lam, options.enabled, normalize=options.normalize
    )
    STORE.last_metrics = result.metrics
    _log_metrics(result.metrics, verl.metrics_file)
    if verl.log_to_tracker and tracking.hook_tracking():
        tracking.offer(result.metrics)
    advantages = result.advantages.unsqueeze(-1) * response_mask
    return advantages, advantages


def _check_single_output_sessions(index: np.ndarray | list) -> None:
    """grpo_hadw groups every output row by uid, as verl's GRPO does for single-turn rollouts. verl's v1
    trainer computes its built-in GRPO on the final output of each multi-output agent session only, and a
    plug-in estimator is not given the session keys, so grpo_hadw is for one output per sample: groups of
    unequal size (the sign of multi-output sessions) are refused rather than silently mis-counted."""
    _, counts = np.unique(np.asarray(index, dtype=object).astype(str), return_counts=True)
    if counts.size and counts.min() != counts.max():
        raise ValueError(
            f"grpo_hadw: groups of unequal size ({int(counts.min())}..{int(counts.max())} rows per uid): "
            "multi-output agent sessions are not supported (verl gives plug-in estimators no session keys); "
            "use single-turn rollouts, or verl's built-in adv_estimator=grpo for multi-output agent loops"
        )


def _log_metrics(metrics: dict[str, float], metrics_file: str | None) -> None:
    # The driver log and, if asked, a JSON-lines file; verl's own logger gets them through `tracking`.
    logger.info("HA-DW %s", " ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
    if metrics_file:
        os.makedirs(os.path.dirname(os.path.abspath(metrics_file)), exist_ok=True)
        with open(metrics_file, "a") as f:
            f.write(json.dumps(metrics) + "\n")
