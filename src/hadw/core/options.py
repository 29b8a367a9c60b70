"""The one HA-DW option schema (method.md §3). The native config (`hadw.*`), TRL's `HADWGRPOConfig`
(`hadw_*`) and the verl plugin (`algorithm.hadw.*`) all build an `HADWOptions` and from it the anchor;
docs/method.md "HA-DW options" maps each field to its spelling on each surface.

Anchor timing, by kind: `window` weighs with the mean INCLUDING the current batch (authors' code);
`kalman` and `ema` weigh with the prior (the belief before this batch); `fixed` is constant. The keyed
kinds (per_level, per_source, per_prompt) have the timing of their `anchor_base` kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hadw.core.anchors import ANCHORS, BASE_ANCHORS, Anchor, make_anchor
from hadw.core.weighting import DEFAULT_LAMBDA


@dataclass
class HADWOptions:
    enabled: bool = False  # rescale advantages with Φ (False: the base algorithm; the anchor is still logged)
    lam: float = DEFAULT_LAMBDA  # λ_scale of Φ = λ·exp(D·M): paper Table 7's best (the authors' code uses 1.5)
    # Anchor kind: window (current batch included) | kalman, ema (prior) | fixed | per_level, per_source,
    # per_prompt (beyond the paper, method.md §3.4; they need a level / source / prompt-id per response).
    anchor: str = "window"
    anchor_base: str = "window"  # per_level / per_source / per_prompt: the kind of each history (its timing)
    window_k: int = 10  # window: batch accuracies averaged, the current one included (authors' code)
    kalman_eta: float = 1.0  # kalman: base gain η (η_t = clip(η·σ_t, eta_min, 1))
    kalman_m: int = 10  # kalman: beliefs in the σ_t window (and warm-up length)
    kalman_eta_min: float = 0.2  # kalman: floor of η_t so the anchor keeps tracking (0 = the paper's rule)
    ema_alpha: float = 0.2  # ema: rate α of C⁺ = (1 − α)C⁻ + α·y
    fixed_value: float = 0.5  # fixed: the constant C (0.5 is the theory's pivot, method.md §3.4)
    prompt_visits: int = 4  # per_prompt: visits pooled into a prompt's success rate, the current one included
    prompt_max: int = 100_000  # per_prompt: prompts remembered (least recently seen forgotten first)

    def base_options(self, kind: str) -> dict[str, Any]:
        """Keyword arguments of a base anchor kind."""
        return {
            "window": {"k": self.window_k},
            "kalman": {"eta": self.kalman_eta, "m": self.kalman_m, "eta_min": self.kalman_eta_min},
            "ema": {"alpha": self.ema_alpha},
            "fixed": {"value": self.fixed_value},
        }[kind]

    def anchor_options(self) -> dict[str, Any]:
        """Keyword arguments of `make_anchor(self.anchor, ...)`."""
        if self.anchor in BASE_ANCHORS:
            return self.base_options(self.anchor)
        options = {"base": self.anchor_base, **self.base_options(self.anchor_base)}
        if self.anchor == "per_prompt":
            options |= {"visits": self.prompt_visits, "max_prompts": self.prompt_max}
        return options

    def make_anchor(self) -> Anchor:
        return make_anchor(self.anchor, **self.anchor_options())

    def problems(self) -> list[tuple[str, Any, str]]:
        """(field, value, allowed) for each field out of range; [] when the options are valid."""
        bad: list[tuple[str, Any, str]] = []
        check = lambda name, ok, allowed: None if ok else bad.append((name, getattr(self, name), allowed))
        check("anchor", self.anchor in ANCHORS, ", ".join(ANCHORS))
        check("anchor_base", self.anchor_base in BASE_ANCHORS, ", ".join(BASE_ANCHORS))
        check("lam", 1e-6 <= self.lam <= 100.0, "[1e-06, 100]")
        check("window_k", self.window_k >= 1, ">= 1")
        check("kalman_eta", self.kalman_eta >= 0.0, ">= 0")
        check("kalman_m", self.kalman_m >= 2, ">= 2")
        check("kalman_eta_min", 0.0 <= self.kalman_eta_min <= 1.0, "[0, 1]")
        check("ema_alpha", 0.0 < self.ema_alpha <= 1.0, "(0, 1]")
        check("fixed_value", 0.0 <= self.fixed_value <= 1.0, "[0, 1]")
        check("prompt_visits", self.prompt_visits >= 1, ">= 1")
        check("prompt_max", self.prompt_max >= 1, ">= 1")
        return bad
