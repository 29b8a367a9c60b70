"""Pure tensor maths of GRPO-style training with HA-DW. Depends on torch only (imported on first use)."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ below imports on first use
    from hadw.core.advantages import ADVANTAGE_ESTIMATORS, GroupAdvantages, compute_advantages, scale_advantages
    from hadw.core.anchors import ANCHORS, Anchor, anchor_from_state, make_anchor
    from hadw.core.groups import GroupIndex, group_mean
    from hadw.core.losses import LOSS_PRESETS, LossSpec, aggregate, kl_penalty, masked_mean, policy_loss
    from hadw.core.options import HADWOptions, anchor_parameters
    from hadw.core.weighting import (
        DEFAULT_LAMBDA,
        NORMALIZE,
        HADWResult,
        apply_hadw,
        hadw_weights,
        normalize_weights,
    )

# name -> the module that defines it. Imported on first use (PEP 562): `hadw.core.registry` alone (the reward
# registry; a verifier-pool process) must not pay for torch.
_HOMES = {
    "ADVANTAGE_ESTIMATORS": "hadw.core.advantages",
    "GroupAdvantages": "hadw.core.advantages",
    "compute_advantages": "hadw.core.advantages",
    "scale_advantages": "hadw.core.advantages",
    "ANCHORS": "hadw.core.anchors",
    "Anchor": "hadw.core.anchors",
    "anchor_from_state": "hadw.core.anchors",
    "make_anchor": "hadw.core.anchors",
    "GroupIndex": "hadw.core.groups",
    "group_mean": "hadw.core.groups",
    "LOSS_PRESETS": "hadw.core.losses",
    "LossSpec": "hadw.core.losses",
    "aggregate": "hadw.core.losses",
    "kl_penalty": "hadw.core.losses",
    "masked_mean": "hadw.core.losses",
    "policy_loss": "hadw.core.losses",
    "HADWOptions": "hadw.core.options",
    "anchor_parameters": "hadw.core.options",
    "DEFAULT_LAMBDA": "hadw.core.weighting",
    "NORMALIZE": "hadw.core.weighting",
    "HADWResult": "hadw.core.weighting",
    "apply_hadw": "hadw.core.weighting",
    "hadw_weights": "hadw.core.weighting",
    "normalize_weights": "hadw.core.weighting",
}

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


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        try:  # a submodule, as `hadw.core.weighting` after `import hadw.core` was before the imports were lazy
            return importlib.import_module(f"hadw.core.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module 'hadw.core' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
