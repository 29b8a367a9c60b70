"""HA-DW's options: one schema behind every surface (docs/train.md, "HA-DW options", has the table).

    options = HADWOptions(enabled=True, lam=1.3, anchor="kalman", anchor_options={"m": 10})
    anchor = options.make_anchor()                    # validated when the options are built
    out = apply_hadw(adv, correct, groups, anchor, options.lam, options.enabled, normalize=options.normalize)

The native config (`hadw.*`), TRL's `HADWGRPOConfig` (`hadw_*`) and verl's `algorithm.hadw.*` keep their
ecosystems' spellings and each builds one of these, so a value means the same everywhere and is validated in
one place. Φ applies to the advantages of training rollouts only: evaluation never reweights and never
feeds the anchor, on every surface.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hadw.core.anchors import ANCHORS, Anchor, make_anchor
from hadw.core.weighting import DEFAULT_LAMBDA, NORMALIZE


@dataclass(frozen=True)
class HADWOptions:
    """enabled: rescale advantages by Φ (False: the base algorithm's advantages, the anchor still tracks);
    lam: λ_scale of Φ = λ·exp(D·M); anchor: the kind (`hadw.core.ANCHORS`); anchor_options: that kind's
    constructor arguments (missing ones take the anchor's defaults); correct_threshold: a response is correct
    when its correctness score is above this (p̂ and the batch accuracy count correct responses); normalize:
    "none" (the paper's Φ) | "batch" (Φ rescaled to mean 1 over the batch's informative responses:
    re-weighting only, λ cancels; hadw.core.weighting.normalize_weights)."""

    enabled: bool = False
    lam: float = DEFAULT_LAMBDA
    anchor: str = "window"
    anchor_options: Mapping[str, Any] = field(default_factory=dict)
    correct_threshold: float = 0.5
    normalize: str = "none"

    def __post_init__(self):
        if self.normalize not in NORMALIZE:
            raise ValueError(f"HA-DW normalize={self.normalize!r} is not allowed; allowed: {', '.join(NORMALIZE)}")
        if self.anchor not in ANCHORS:
            raise ValueError(f"HA-DW anchor {self.anchor!r} is not allowed; allowed: {', '.join(ANCHORS)}")
        if not self.lam > 0:
            raise ValueError(f"HA-DW λ (lam) must be > 0, got {self.lam}")
        if not 0.0 <= self.correct_threshold < 1.0:
            raise ValueError(f"HA-DW correct_threshold must be in [0, 1), got {self.correct_threshold}")
        allowed = anchor_parameters(self.anchor)
        unknown = sorted(set(self.anchor_options) - set(allowed))
        if unknown:
            raise ValueError(f"{self.anchor} anchor: unknown option(s) {unknown}; allowed: {sorted(allowed)}")
        self.make_anchor()  # bad values (k < 1, eta_min > 1, ...) fail here, with the anchor's own message

    def make_anchor(self) -> Anchor:
        return make_anchor(self.anchor, **self.anchor_options)

    def anchor_spec(self) -> dict[str, Any]:
        """{"kind": ..., **options}: what identifies an anchor's settings (a change restarts its history)."""
        return {"kind": self.anchor, **self.anchor_options}


def anchor_parameters(kind: str) -> dict[str, Any]:
    """{option: default} of an anchor kind's constructor, e.g. window -> {"k": 10}."""
    signature = inspect.signature(ANCHORS[kind].__init__)
    return {name: p.default for name, p in signature.parameters.items() if name != "self"}
