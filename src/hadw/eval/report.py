"""Plain-text output shared by `hadw eval`, `hadw compare` and `hadw probe`: markdown tables and rich tables."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def bucket_order(key: str) -> tuple:
    """ "all" first, then each source followed by its levels in numeric order ("L2" before "L10")."""
    if key == "all":
        return (0, "", 0, "")
    source, _, level = key.partition("/")
    digits = level[1:] if level.startswith("L") else ""
    return (1, source, int(digits) if digits.isdigit() else -1 if not level else 10**9, level)


def fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, int):
        return str(x)
    return f"{x:.{digits}f}"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub markdown table; '|' inside cells is escaped."""
    esc = lambda cell: str(cell).replace("|", "\\|")
    lines = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def rich_table(title: str, headers: Sequence[str], rows: Iterable[Sequence[str]]):
    """The same table for the terminal (rich), with headers and cells taken literally (no markup)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title))
    for i, header in enumerate(headers):
        table.add_column(escape(header), justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(escape(str(c)) for c in row))
    return table


def eval_rows(buckets: dict[str, dict[str, float]]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of an evaluation table: bucket, count, then every metric in a stable order."""
    metrics: list[str] = []
    for row in buckets.values():
        metrics += [m for m in row if m != "count" and m not in metrics]
    metrics.sort(key=lambda m: (m != "greedy", not m.startswith("avg@"), int(m.split("@")[1]) if "@" in m else 0))
    rows = [
        [key, str(int(buckets[key]["count"])), *(fmt(buckets[key].get(m)) for m in metrics)]
        for key in sorted(buckets, key=bucket_order)
    ]
    return ["bucket", "n", *metrics], rows


def interval_cell(iv, digits: int = 3, signed: bool = False) -> str:
    """ "0.512 [0.480, 0.544]" (signed: "+0.012 [−0.010, +0.034]")."""
    if iv is None:
        return "—"
    f = (lambda v: f"{v:+.{digits}f}") if signed else (lambda v: f"{v:.{digits}f}")
    return f"{f(iv.mean)} [{f(iv.low)}, {f(iv.high)}]" if iv.n > 1 else f"{f(iv.mean)} (n=1)"


def compare_rows(result, metric_name: str = "avg@k") -> tuple[list[str], list[list[str]]]:
    """One row per bucket: each arm's mean [CI] over seeds, then each arm − baseline, paired by seed, with p."""
    suffix = "/" + metric_name
    keys = sorted(
        (k for k in result.metrics if k.endswith(suffix)), key=lambda k: bucket_order(k[len("eval/") : -len(suffix)])
    )
    others = [a for a in result.arms if a != result.baseline]
    headers = [
        "bucket",
        *(f"{a} (n)" for a in result.arms),
        *(f"{a} − {result.baseline} [paired]" for a in others),
        *(f"p ({a})" for a in others),
    ]
    rows = []
    for key in keys:
        m = result.metrics[key]
        cells = [key[len("eval/") : -len(suffix)]]
        cells += [f"{interval_cell(m.arms.get(a))} ({m.arms[a].n})" if a in m.arms else "—" for a in result.arms]
        cells += [interval_cell(m.diffs[a].diff, signed=True) if a in m.diffs else "—" for a in others]
        cells += [fmt(m.diffs[a].p_value) if a in m.diffs else "—" for a in others]
        rows.append(cells)
    return headers, rows


PROBE_COLUMNS = [
    ("prompts", "prompts", 0),
    ("groups w/ grad", "nondegenerate", 0),
    ("degenerate", "degenerate_frac", 2),
    ("p_ref", "p_ref_mean", 3),
    ("bias meas.", "bias_measured", 4),
    ("± se", "bias_se", 4),
    ("bias theory", "bias_theory", 4),
    ("under", "under_frac", 2),
    ("under theory", "under_theory", 2),
    ("over", "over_frac", 2),
    ("over theory", "over_theory", 2),
    ("Â+ (z)", "z_correct_est", 2),
    ("A+ ref (z)", "z_correct_ref", 2),
    ("Â− (z)", "z_wrong_est", 2),
    ("A− ref (z)", "z_wrong_ref", 2),
]


def probe_rows(buckets: dict[str, dict[str, float]]) -> tuple[list[str], list[list[str]]]:
    """One row per probe bucket ("all", p ranges, then levels) with measurement beside theory."""
    order = sorted(buckets, key=lambda k: (k != "all", not k.startswith("p∈"), bucket_order(k) if "/" in k else ()))
    rows = [
        [key, *(fmt(int(buckets[key][m]) if d == 0 else buckets[key][m], d) for _, m, d in PROBE_COLUMNS)]
        for key in order
    ]
    return ["bucket", *(h for h, _, _ in PROBE_COLUMNS)], rows
