"""Lazy package exports (PEP 562): `from hadw.theory import bias` still works, but importing the package (or
one of its light modules, such as its `cli`) does not import the heavy ones (torch, scipy) until a name is used.

    __getattr__, __dir__ = lazy_exports(__name__, {"bias": "binary", "simulate": "engine"})

The `hadw` command registers every sub-command at start-up by importing `hadw.<package>.cli`, which imports
`hadw.<package>/__init__`: an eager `from .engine import ...` there put torch on the path of `hadw --help`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(__getattr__, __dir__) for `package`: each name in `exports` is read from `package.<module>` on first
    use (and then cached in the package's namespace by Python's attribute lookup of the module)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        globals_of_package = importlib.import_module(package).__dict__
        globals_of_package[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*importlib.import_module(package).__dict__, *exports})

    return __getattr__, __dir__
