"""The one list syntax of the command line: a list option takes comma-separated values, may be repeated,
and numeric lists take inclusive integer ranges.

    -G 4,8          -G 4 -G 8         --seeds 0-4,7        --levels 1,2,3        -p 0.1,0.5

Options whose values contain commas themselves (--data, --arm, --set, --dist) are repeated instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import typer


def _tokens(values: Iterable[str] | str | None) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [t for v in values for t in str(v).replace(" ", "").split(",") if t]


def parse_ints(values: Iterable[str] | str | None, option: str, allow_empty: bool = False) -> list[int]:
    """ "0,1,2", "0-4" (inclusive), "0-2,7" or repeated options → a flat list of ints. A descending range
    (3-1) or an empty list (unless allow_empty) is a usage error naming the option."""
    out: list[int] = []
    try:
        for token in _tokens(values):
            lo, sep, hi = token.partition("-")
            if sep and lo and int(hi) < int(lo):
                raise typer.BadParameter(
                    f"{token!r} is a descending range; write LO-HI with LO <= HI", param_hint=f"'{option}'"
                )
            out += list(range(int(lo), int(hi) + 1)) if sep and lo else [int(token)]
    except ValueError:
        raise typer.BadParameter(
            f"{','.join(_tokens(values))!r}: expected integers like 0,1,2 or 0-4", param_hint=f"'{option}'"
        ) from None
    if not out and not allow_empty:
        raise typer.BadParameter("is empty; give at least one integer, e.g. 0,1,2 or 0-4", param_hint=f"'{option}'")
    return out


def parse_floats(values: Iterable[str] | str | None, option: str, allow_empty: bool = False) -> list[float]:
    """ "0.1,0.5" or repeated options → a flat list of finite floats; empty (unless allow_empty), NaN or
    inf is a usage error naming the option."""
    try:
        out = [float(t) for t in _tokens(values)]
    except ValueError:
        raise typer.BadParameter(
            f"{','.join(_tokens(values))!r}: expected numbers like 0.1,0.5", param_hint=f"'{option}'"
        ) from None
    if not out and not allow_empty:
        raise typer.BadParameter("is empty; give at least one number, e.g. 0.1,0.5", param_hint=f"'{option}'")
    if not all(math.isfinite(x) for x in out):
        raise typer.BadParameter(f"{out}: every number must be finite", param_hint=f"'{option}'")
    return out


def check_range(
    option: str, value: float | None, low: float | None = None, high: float | None = None, low_open: bool = False
) -> None:
    """A usage error naming `option` unless value is finite and within [low, high] ((low, high] with
    low_open); None (an unset optional value) passes."""
    if value is None:
        return
    ok = (
        math.isfinite(value)
        and (low is None or (value > low if low_open else value >= low))
        and (high is None or value <= high)
    )
    if not ok:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        allowed = f"{'(' if low_open else '['}{lo}, {hi}]"
        raise typer.BadParameter(f"{value!r} is out of range; allowed: {allowed}", param_hint=f"'{option}'")
