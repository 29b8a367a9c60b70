"""A name → implementation table with a duplicate-name guard (verl's `register_adv_est` idea).

    POLICY_LOSSES = Registry("policy loss")
    @POLICY_LOSSES.register("token_clip")
    def token_clip_loss(...): ...
    POLICY_LOSSES.get("token_clip")   # unknown names raise ValueError listing the allowed ones

A second registration under a taken name raises instead of silently replacing the first, so two modules
cannot fight over one name; `replace=True` says a replacement is meant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Registry(dict[str, Any]):
    """A dict of named implementations of one kind ("advantage estimator", "anchor", ...)."""

    def __init__(self, kind: str, items: dict[str, Any] | None = None):
        super().__init__()
        self.kind = kind
        for name, obj in (items or {}).items():
            self.add(name, obj)

    def add(self, name: str, obj: T, replace: bool = False) -> T:
        if name in self and not replace:
            raise ValueError(f"{self.kind} {name!r} is already registered ({self[name]!r}); pass replace=True")
        self[name] = obj
        return obj

    def register(self, name: str, replace: bool = False) -> Callable[[T], T]:
        """Decorator form of `add`."""
        return lambda obj: self.add(name, obj, replace)

    def get(self, name: str) -> Any:  # type: ignore[override]
        """The implementation under `name`; an unknown name raises ValueError naming the allowed ones."""
        if name not in self:
            raise ValueError(f"unknown {self.kind} {name!r}; allowed: {', '.join(sorted(self))}")
        return self[name]
