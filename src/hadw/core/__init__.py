"""Pure tensor maths of GRPO-style training with HA-DW. Depends on torch only (hadw.core.registry: on nothing)."""

from typing import TYPE_CHECKING

from hadw.lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and IDEs; at run time each name is imported on first use
    from hadw.core.advantages import ADVANTAGE_ESTIMATORS, GroupAdvantages, compute_advantages, scale_advantages
    from hadw.core.anchors import ANCHORS, Anchor, anchor_from_state, make_anchor
    from hadw.core.groups import GroupIndex, group_mean
    from hadw.core.losses import LOSS_PRESETS, LossSpec, aggregate, kl_penalty, masked_mean, policy_loss
    from hadw.core.options import HADWOptions, anchor_parameters
    from hadw.core.weighting import DEFAULT_LAMBDA, NORMALIZE, HADWResult, apply_hadw, hadw_weights, normalize_weights

# Lazy: hadw.rewards (verifier worker processes, `hadw eval`'s option checks) reads hadw.core.registry, which
# must not import torch with the tensor maths.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ADVANTAGE_ESTIMATORS": "advantages",
        "GroupAdvantages": "advantages",
        "compute_advantages": "advantages",
        "scale_advantages": "advantages",
        "ANCHORS": "anchors",
        "Anchor": "anchors",
        "anchor_from_state": "anchors",
        "make_anchor": "anchors",
        "GroupIndex": "groups",
        "group_mean": "groups",
        "LOSS_PRESETS": "losses",
        "LossSpec": "losses",
        "aggregate": "losses",
        "kl_penalty": "losses",
        "masked_mean": "losses",
        "policy_loss": "losses",
        "HADWOptions": "options",
        "anchor_parameters": "options",
        "DEFAULT_LAMBDA": "weighting",
        "NORMALIZE": "weighting",
        "HADWResult": "weighting",
        "apply_hadw": "weighting",
        "hadw_weights": "weighting",
        "normalize_weights": "weighting",
    },
)

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
