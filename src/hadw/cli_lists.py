"""The one list syntax of the command line: a list option takes comma-separated values, may be repeated,
and numeric lists take inclusive integer ranges.

    -G 4,8          -G 4 -G 8         --seeds 0-4,7        --levels 1,2,3        -p 0.1,0.5

Options whose values contain commas themselves (--data, --arm, --set, --dist) are repeated instead.
"""

from __future__ import annotations

from collections.abc import Iterable

import typer


def _tokens(values: Iterable[str] | str | None) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [t for v in values for t in str(v).replace(" ", "").split(",") if t]


def parse_ints(values: Iterable[str] | str | None, option: str) -> list[int]:
    """"0,1,2", "0-4" (inclusive), "0-2,7" or repeated options → a flat list of ints."""
    out: list[int] = []
    try:
        for token in _tokens(values):
            lo, sep, hi = token.partition("-")
            out += list(range(int(lo), int(hi) + 1)) if sep and lo else [int(token)]
    except ValueError:
        raise typer.BadParameter(
            f"{','.join(_tokens(values))!r}: expected integers like 0,1,2 or 0-4", param_hint=f"'{option}'"
        ) from None
    return out


def parse_floats(values: Iterable[str] | str | None, option: str) -> list[float]:
    """"0.1,0.5" or repeated options → a flat list of floats."""
    try:
        return [float(t) for t in _tokens(values)]
    except ValueError:
        raise typer.BadParameter(
            f"{','.join(_tokens(values))!r}: expected numbers like 0.1,0.5", param_hint=f"'{option}'"
        ) from None
