"""Difficulty anchors C_t: a running belief of the policy's current solving ability (docs/method.md §3.1).

An anchor sees exactly one observation per rollout batch, y_t = mean correctness over ALL responses of
the batch (degenerate groups included, before any dynamic-sampling filter), through `observe(y_t)`,
which returns the value C that HA-DW compares each prompt's p̂ with for this batch:

    window  mean of the last k observations, the current one included (the authors' released code)
    kalman  paper eqs. 8–12: C⁺ = (1 − η_t) C⁻ + η_t y_t, η_t = clip(η · σ_t, 0, 1); weights use C⁻
    ema     fixed-rate exponential average, C⁺ = (1 − α) C⁻ + α y_t; weights use C⁻
    fixed   a constant threshold (paper Table 2 ablation)

Beyond the paper (method.md §3.4; each needs a label per response, given to `apply_hadw(keys=...)`):

    per_level   one anchor of a base kind per difficulty level (batch anchor until a level has history)
    per_source  the same per data source
    per_prompt  a prompt's pooled correctness over its last visits replaces p̂; C is the batch anchor

`prior` is the belief before the next observation (None until the first one, for the learned kinds).
State is plain floats and lists, so `state_dict()` round-trips through JSON and checkpoints.
"""

from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch


def _check_accuracy(y: float) -> float:
    y = float(y)
    if not (0.0 <= y <= 1.0) or math.isnan(y):
        raise ValueError(f"batch accuracy must lie in [0, 1], got {y}")
    return y


class Anchor(ABC):
    kind: str = ""
    needs_keys: bool = False  # True: apply_hadw needs a label per response (level, source or prompt id)

    @property
    @abstractmethod
    def prior(self) -> float | None:
        """C_t⁻: the belief before the next observation; None before the first observation."""

    @abstractmethod
    def observe(self, batch_accuracy: float) -> float:
        """Absorb y_t (once per rollout batch) and return the C to weight this batch with."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]: ...

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def _check_kind(self, state: dict[str, Any]) -> None:
        if state.get("kind") != self.kind:
            raise ValueError(f"anchor state is of kind {state.get('kind')!r}, this anchor is {self.kind!r}")


class FixedAnchor(Anchor):
    kind = "fixed"

    def __init__(self, value: float = 0.5):
        self.value = _check_accuracy(value)

    @property
    def prior(self) -> float:
        return self.value

    def observe(self, batch_accuracy: float) -> float:
        _check_accuracy(batch_accuracy)
        return self.value

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_kind(state)
        self.value = float(state["value"])


class WindowAnchor(Anchor):
    """Mean of the last `k` batch accuracies, the current batch included (authors' code, App. F)."""

    kind = "window"

    def __init__(self, k: int = 10):
        if k < 1:
            raise ValueError(f"window anchor needs k >= 1, got {k}")
        self.k = int(k)
        self.history: list[float] = []

    @property
    def prior(self) -> float | None:
        return sum(self.history) / len(self.history) if self.history else None

    def observe(self, batch_accuracy: float) -> float:
        self.history = [*self.history, _check_accuracy(batch_accuracy)][-self.k :]
        return sum(self.history) / len(self.history)

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "k": self.k, "history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_kind(state)
        self.k = int(state["k"])
        self.history = [float(v) for v in state["history"]]


class EMAAnchor(Anchor):
    """Exponential moving average with a fixed rate; initialised from the first batch."""

    kind = "ema"

    def __init__(self, alpha: float = 0.2):
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"ema anchor needs alpha in (0, 1], got {alpha}")
        self.alpha = float(alpha)
        self.belief: float | None = None

    @property
    def prior(self) -> float | None:
        return self.belief

    def observe(self, batch_accuracy: float) -> float:
        y = _check_accuracy(batch_accuracy)
        used = y if self.belief is None else self.belief
        self.belief = y if self.belief is None else (1 - self.alpha) * self.belief + self.alpha * y
        return used

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "alpha": self.alpha, "belief": self.belief}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_kind(state)
        self.alpha = float(state["alpha"])
        self.belief = None if state["belief"] is None else float(state["belief"])


class KalmanAnchor(Anchor):
    """The paper's update (eqs. 8–12) with the choices it leaves open made explicit.

    η_t = clip(η · σ_t, eta_min, 1), σ_t = population std of the previous `m` beliefs. The paper's
    rule is self-referential: beliefs that barely move give a small σ, hence a small η_t, hence beliefs
    that barely move. So:
    - initialisation: the first observation sets the belief (C_1 = y_1);
    - warm-up: while fewer than `m` beliefs exist, η_t = 1/t (the running mean of the observations, the
      best estimate of a constant accuracy), which also seeds the belief history with real spread;
    - `eta_min` floors the gain so the anchor never freezes. Its default, 0.2, makes the anchor track an
      accuracy rising 0.30 → 0.86 over 90 batches within 0.03 on average (with 0, the paper's rule, the
      anchor stays at 0.33; tests/test_core_anchors.py); set 0 for the paper's rule as printed.
    Weights use the prior C_t⁻ (the belief before this batch's y_t is absorbed).
    """

    kind = "kalman"

    def __init__(self, eta: float = 1.0, m: int = 10, eta_min: float = 0.2):
        if eta < 0 or m < 2 or not 0.0 <= eta_min <= 1.0:
            raise ValueError(f"kalman anchor needs eta >= 0, m >= 2, eta_min in [0, 1]; got {eta}, {m}, {eta_min}")
        self.eta, self.m, self.eta_min = float(eta), int(m), float(eta_min)
        self.beliefs: list[float] = []  # C_1..C_t, the last m kept
        self.steps = 0
        self.last_gain: float | None = None

    @property
    def prior(self) -> float | None:
        return self.beliefs[-1] if self.beliefs else None

    def gain(self) -> float:
        """η_t for the next observation."""
        if len(self.beliefs) < self.m:
            return 1.0 / (self.steps + 1)
        mean = sum(self.beliefs) / len(self.beliefs)
        sigma = math.sqrt(sum((b - mean) ** 2 for b in self.beliefs) / len(self.beliefs))
        return min(1.0, max(self.eta_min, self.eta * sigma))

    def observe(self, batch_accuracy: float) -> float:
        y = _check_accuracy(batch_accuracy)
        prior = y if not self.beliefs else self.beliefs[-1]
        self.last_gain = self.gain()
        posterior = (1 - self.last_gain) * prior + self.last_gain * y
        self.beliefs = [*self.beliefs, posterior][-self.m :]
        self.steps += 1
        return prior

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "eta": self.eta,
            "m": self.m,
            "eta_min": self.eta_min,
            "beliefs": list(self.beliefs),
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_kind(state)
        self.eta, self.m, self.eta_min = float(state["eta"]), int(state["m"]), float(state["eta_min"])
        self.beliefs = [float(b) for b in state["beliefs"]]
        self.steps = int(state["steps"])


BASE_ANCHORS: dict[str, type[Anchor]] = {cls.kind: cls for cls in (WindowAnchor, KalmanAnchor, EMAAnchor, FixedAnchor)}


def _base_anchor(base: str, given: dict[str, Any]) -> tuple[Anchor, dict[str, Any]]:
    """A base anchor of kind `base` from those of `given` that its constructor takes (the keyed kinds
    accept every base kind's options flat, so one schema lists them all)."""
    if base not in BASE_ANCHORS:
        raise ValueError(f"keyed anchor: unknown base kind {base!r}; allowed: {', '.join(BASE_ANCHORS)}")
    names = inspect.signature(BASE_ANCHORS[base].__init__).parameters
    options = {k: v for k, v in given.items() if k in names}
    return BASE_ANCHORS[base](**options), options


def _base_from_state(state: dict[str, Any]) -> Anchor:
    anchor = BASE_ANCHORS[state["kind"]]()
    anchor.load_state_dict(state)
    return anchor


def _rows_by_key(keys: Sequence[Any]) -> dict[str, torch.Tensor]:
    """{str(key): [n] row indices}, keys in first-seen order (the same on every rank for the same batch)."""
    rows: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        rows.setdefault(str(key), []).append(i)
    return {name: torch.tensor(index, dtype=torch.long) for name, index in rows.items()}


class _BatchBacked(Anchor):
    """An anchor built around a batch anchor of a base kind (the keyed anchors below): the base kind and
    its options, C for a batch without keys, and the base part of the state."""

    needs_keys = True

    def __init__(self, base: str, given: dict[str, float]):
        self.base = base
        self.batch, self.options = _base_anchor(base, given)  # options: only those of the base kind

    @property
    def prior(self) -> float | None:
        return self.batch.prior

    def observe(self, batch_accuracy: float) -> float:
        """Without keys the anchor is its batch anchor (e.g. a batch that carries no level column)."""
        return self.batch.observe(batch_accuracy)

    def _base_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "base": self.base, "options": dict(self.options), "batch": self.batch.state_dict()}

    def _load_base_state(self, state: dict[str, Any]) -> None:
        self._check_kind(state)
        self.base, self.options = state["base"], dict(state["options"])
        self.batch = _base_from_state(state["batch"])


class KeyedAnchor(_BatchBacked):
    """One anchor of kind `base` per key (difficulty level or data source; method.md §3.4), beside a
    batch anchor of the same kind.

    Per rollout batch, `observe_keyed` feeds the batch anchor with the batch accuracy and each key's
    anchor with the accuracy over that key's responses (once each). A response is weighed against its
    key's anchor, or against the batch anchor while its key had no history before this batch. Keys are
    stored as strings (JSON state); the timing of each sub-anchor is its base kind's.
    """

    kind = "per_level"

    def __init__(
        self,
        base: str = "window",
        *,
        k: int = 10,
        eta: float = 1.0,
        m: int = 10,
        eta_min: float = 0.2,
        alpha: float = 0.2,
        value: float = 0.5,
    ):
        super().__init__(base, {"k": k, "eta": eta, "m": m, "eta_min": eta_min, "alpha": alpha, "value": value})
        self.per_key: dict[str, Anchor] = {}

    def observe_keyed(self, correctness: torch.Tensor, keys: Sequence[Any]) -> torch.Tensor:
        """correctness: [N] 0/1; keys: N labels. Returns [N] the C each response is weighed against."""
        c_batch = self.batch.observe(float(correctness.mean()) if correctness.numel() else 0.0)
        c = torch.full((len(keys),), float(c_batch), dtype=torch.float32)
        correct = correctness.detach().float().cpu()
        for name, rows in _rows_by_key(keys).items():
            anchor = self.per_key.get(name)
            fresh = anchor is None or anchor.prior is None
            if anchor is None:
                anchor = self.per_key[name] = BASE_ANCHORS[self.base](**self.options)
            c_key = anchor.observe(float(correct[rows].mean()))
            if not fresh:
                c[rows] = float(c_key)
        return c

    def state_dict(self) -> dict[str, Any]:
        return self._base_state() | {"per_key": {k: a.state_dict() for k, a in self.per_key.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_base_state(state)
        self.per_key = {k: _base_from_state(v) for k, v in state["per_key"].items()}


class LevelAnchor(KeyedAnchor):
    """One history per difficulty level (the `level` column)."""

    kind = "per_level"


class SourceAnchor(KeyedAnchor):
    """One history per data source (the `source` column)."""

    kind = "per_source"


class PromptAnchor(_BatchBacked):
    """Each prompt's own pooled success rate p̃ replaces p̂ (method.md §3.4); C is the batch anchor.

    p̃ = correct / total over the prompt's last `visits` visits, the current one and degenerate ones
    included; a prompt seen for the first time gets its group's p̂ (its only visit). At most
    `max_prompts` prompts are remembered (the least recently seen is forgotten first), so state stays
    bounded. Keys are prompt ids (stored as strings).
    """

    kind = "per_prompt"

    def __init__(
        self,
        base: str = "window",
        visits: int = 4,
        max_prompts: int = 100_000,
        *,
        k: int = 10,
        eta: float = 1.0,
        m: int = 10,
        eta_min: float = 0.2,
        alpha: float = 0.2,
        value: float = 0.5,
    ):
        if visits < 1 or max_prompts < 1:
            raise ValueError(f"per_prompt anchor needs visits >= 1 and max_prompts >= 1; got {visits}, {max_prompts}")
        super().__init__(base, {"k": k, "eta": eta, "m": m, "eta_min": eta_min, "alpha": alpha, "value": value})
        self.visits, self.max_prompts = int(visits), int(max_prompts)
        self.counts: OrderedDict[str, list[list[int]]] = OrderedDict()  # id -> [[correct, total], ...]

    def observe_prompts(self, correctness: torch.Tensor, keys: Sequence[Any]) -> tuple[float, torch.Tensor]:
        """correctness: [N] 0/1; keys: N prompt ids. Returns (C, [N] p̃ of each response's prompt)."""
        c = self.batch.observe(float(correctness.mean()) if correctness.numel() else 0.0)
        p = torch.empty(len(keys), dtype=torch.float32)
        correct = correctness.detach().float().cpu()
        for name, rows in _rows_by_key(keys).items():
            visit = [int(correct[rows].sum()), len(rows)]
            history = [*self.counts.pop(name, []), visit][-self.visits :]
            self.counts[name] = history  # re-inserted last: the most recently seen
            p[rows] = sum(v[0] for v in history) / sum(v[1] for v in history)
        while len(self.counts) > self.max_prompts:
            self.counts.popitem(last=False)
        return c, p

    def state_dict(self) -> dict[str, Any]:
        return self._base_state() | {
            "visits": self.visits,
            "max_prompts": self.max_prompts,
            "counts": [[k, v] for k, v in self.counts.items()],  # a list keeps the recency order in JSON
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_base_state(state)
        self.visits, self.max_prompts = int(state["visits"]), int(state["max_prompts"])
        self.counts = OrderedDict((str(k), [[int(a), int(b)] for a, b in v]) for k, v in state["counts"])


ANCHORS: dict[str, type[Anchor]] = {**BASE_ANCHORS, **{c.kind: c for c in (LevelAnchor, SourceAnchor, PromptAnchor)}}

# Which per-response label each keyed anchor needs (the Problem / dataset column it reads).
ANCHOR_KEY_COLUMN = {"per_level": "level", "per_source": "source", "per_prompt": "uid"}


def make_anchor(kind: str = "window", **options: Any) -> Anchor:
    """Build an anchor by name: window (default, k=10), kalman (eta, m, eta_min), ema (alpha), fixed (value);
    per_level / per_source (base kind + its options), per_prompt (base kind, visits, max_prompts + options)."""
    if kind not in ANCHORS:
        raise ValueError(f"unknown anchor kind {kind!r}; allowed: {', '.join(ANCHORS)}")
    return ANCHORS[kind](**options)


def anchor_from_state(state: dict[str, Any]) -> Anchor:
    """Rebuild an anchor (kind and parameters included) from its `state_dict()`."""
    if state.get("kind") not in ANCHORS:
        raise ValueError(f"unknown anchor kind {state.get('kind')!r}; allowed: {', '.join(ANCHORS)}")
    anchor = ANCHORS[state["kind"]]()  # default options; the state carries the real ones
    anchor.load_state_dict(state)
    return anchor


# Keys of an anchor's state_dict that are its learned history, not its settings.
ANCHOR_HISTORY_KEYS = ("history", "belief", "beliefs", "steps", "batch", "per_key", "counts")


def anchor_setting_changes(saved: dict[str, Any], anchor: Anchor) -> list[str]:
    """'key: saved -> configured' for each setting (kind, k, eta, m, alpha, value, ...) in which a saved
    anchor state differs from a configured anchor; [] when the saved history can be loaded as is. A
    resume uses this to warn loudly instead of letting the saved settings silently win."""
    current = anchor.state_dict()
    if saved.get("kind") != current["kind"]:
        return [f"kind: {saved.get('kind')!r} -> {current['kind']!r}"]
    return [
        f"{key}: {saved.get(key)!r} -> {value!r}"
        for key, value in current.items()
        if key not in (*ANCHOR_HISTORY_KEYS, "kind") and saved.get(key) != value
    ]
