"""Pure tensor maths of GRPO-style training with HA-DW. Depends on torch only."""

from hadw.core.advantages import ADVANTAGE_ESTIMATORS, GroupAdvantages, compute_advantages, scale_advantages
from hadw.core.anchors import ANCHORS, Anchor, anchor_from_state, make_anchor
from hadw.core.groups import GroupIndex, group_mean
from hadw.core.losses import LOSS_PRESETS, LossSpec, aggregate, kl_penalty, masked_mean, policy_loss
from hadw.core.options import HADWOptions, anchor_parameters
from hadw.core.weighting import DEFAULT_LAMBDA, NORMALIZE, HADWResult, apply_hadw, hadw_weights, normalize_weights

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ANCHORS",
    "DEFAULT_LAMBDA",
    "LOSS_PRESETS",
    "NORMALIZE",
    "Anchor",
    "GroupAdvantages",
    "GroupIndex",
    "HADWOptions",
    "HADWResult",
    "LossSpec",
    "aggregate",
    "anchor_from_state",
    "anchor_parameters",
    "apply_hadw",
    "compute_advantages",
    "group_mean",
    "hadw_weights",
    "kl_penalty",
    "make_anchor",
    "masked_mean",
    "normalize_weights",
    "policy_loss",
    "scale_advantages",
]
