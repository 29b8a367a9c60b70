"""Plain-text output shared by `hadw eval`, `hadw compare` and `hadw probe`: markdown tables and rich tables."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from hadw import metrics as M
from hadw.metrics import jsonable  # noqa: F401  (re-exported: the report's JSON encoding)


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
        table.add_column(escape(header), justify="left" if i == 0 else "right", no_wrap=i == 0)
    for row in rows:
        table.add_row(*(escape(str(c)) for c in row))
    return table


def eval_rows(buckets: dict[str, dict[str, float]]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of an evaluation table: bucket, count, then every metric in a stable order."""
    metrics: list[str] = []
    for row in buckets.values():
        metrics += [m for m in row if m not in ("count", M.REWARD_FAILED) and m not in metrics]
    metrics.sort(key=lambda m: (m != "greedy", not m.startswith("avg@"), int(m.split("@")[1]) if "@" in m else 0))
    rows = [
        [key, str(int(buckets[key]["count"])), *(fmt(buckets[key].get(m)) for m in metrics)]
        for key in sorted(buckets, key=bucket_order)
    ]
    return ["bucket", "n", *metrics], rows


def completion_notes(stats: dict[str, dict[str, float]], reward_failures: dict[str, str] | None = None) -> list[str]:
    """One line per generation mode ("greedy", "sampled") of `EvalResult.stats`, plus peak memory, e.g.
    "greedy: 500 completions, 93.2% with an extracted answer, 4.1% truncated at the length limit, 812 tokens/s".
    reward_failures (EvalResult.reward_failures): an error line each, in place of any diagnosis of the model."""
    lines = [
        f"{mode}: {int(s['completions'])} completions, {s['answered']:.1%} with an extracted answer, "
        f"{s['truncated']:.1%} truncated at the length limit, {fmt(s['tokens_per_s'], 0)} tokens/s"
        for mode, s in stats.items()
        if mode != "memory"
    ]
    memory = stats.get("memory", {})
    if memory:
        parts = [f"CPU peak RSS {memory[M.CPU_PEAK_RSS]:.2f} GiB"]
        if M.GPU_MAX_ALLOCATED in memory:
            parts.append(f"GPU max allocated {memory[M.GPU_MAX_ALLOCATED]:.2f} GiB")
        lines.append("memory: " + ", ".join(parts))
    failures = reward_failures or {}
    for where, failure in failures.items():
        lines.append(
            f"error: the reward failed on every completion of {where} ({failure}), so the table has no accuracy "
            "for it (—): these are the reward's errors, not the model's answers; fix the reward or the data "
            "columns it reads (--samples shows the failure under reward_error)"
        )
    failed_modes = {where.rsplit("(", 1)[-1].rstrip(")") for where in failures}
    for mode, s in stats.items():
        if mode in failed_modes:
            continue
        if mode != "memory" and s.get("reward_errors"):
            lines.append(
                f"warning: the reward failed on {int(s['reward_errors'])} of {int(s['completions'])} {mode} "
                "completions (raised, timed out or returned a bad score; scored 0); the --samples file shows the "
                "first failure of each batch under reward_error"
            )
        # a reward that reads no \boxed{} (a user's own) scores answers hadw cannot extract: only when nothing scored
        if mode != "memory" and s["completions"] and s["answered"] == 0 and not s.get("scored", 0):
            lines.append(
                f"warning: no {mode} completion has an extractable answer, so every score is 0; look at the "
                "--samples file (the template, --max-new-tokens, or a model that needs SFT first)"
            )
    return lines


def interval_cell(iv, digits: int = 3, signed: bool = False) -> str:
    """ "0.512 [0.480, 0.544]" (signed: "+0.012 [−0.010, +0.034]")."""
    if iv is None:
        return "—"
    f = (lambda v: f"{v:+.{digits}f}") if signed else (lambda v: f"{v:.{digits}f}")
    return f"{f(iv.mean)} [{f(iv.low)}, {f(iv.high)}]" if iv.n > 1 else f"{f(iv.mean)} (n=1)"


def compare_rows(result, metric_name: str = M.GREEDY, primary: str | None = None) -> tuple[list[str], list[list[str]]]:
    """One row per bucket: each arm's mean [CI] over seeds, then each arm − baseline, paired by seed, with p and the
    minimal detectable effect at 80 % power for that n and observed SD (MDE). With `primary` (a final key such as
    "val/all/avg@4") a last column names that row the primary comparison and every other row exploratory."""
    keys = sorted(
        (k for k in result.metrics if M.split_val_key(k)[1] == metric_name),
        key=lambda k: bucket_order(M.split_val_key(k)[0]),
    )
    others = [a for a in result.arms if a != result.baseline]
    robust = getattr(result, "robust", "none") != "none"  # --robust wilcoxon: its p beside the t test's
    headers = [
        "bucket",
        *(f"{a} (n)" for a in result.arms),
        *(f"{a} − {result.baseline} [paired]" for a in others),
        *(f"p ({a})" for a in others),
        *(f"Wilcoxon p ({a})" for a in others if robust),
        *(f"MDE ({a})" for a in others),
        *(["role"] if primary else []),
    ]
    rows = []
    for key in keys:
        m = result.metrics[key]
        cells = [M.split_val_key(key)[0]]
        cells += [f"{interval_cell(m.arms.get(a))} ({m.arms[a].n})" if a in m.arms else "—" for a in result.arms]
        cells += [interval_cell(m.diffs[a].diff, signed=True) if a in m.diffs else "—" for a in others]
        cells += [fmt(m.diffs[a].p_value) if a in m.diffs else "—" for a in others]
        cells += [fmt(m.diffs[a].wilcoxon_p) if a in m.diffs else "—" for a in others if robust]
        cells += [fmt(m.diffs[a].mde) if a in m.diffs else "—" for a in others]
        if primary:
            cells.append("**primary**" if key == primary else "exploratory")
        rows.append(cells)
    return headers, rows


# Headers are short so both probe tables fit a 100-column terminal; the titles explain them.
PROBE_BIAS_COLUMNS = [
    ("prompts", "prompts", 0), ("grad", "nondegenerate", 0), ("p_ref", "p_ref_mean", 2),
    ("bias ± se", ("bias_measured", "bias_se"), 3), ("theory", "bias_theory", 3),
    ("under", "under_frac", 2), ("theory", "under_theory", 2), ("over", "over_frac", 2), ("theory", "over_theory", 2),
]  # fmt: skip
PROBE_ADVANTAGE_COLUMNS = [
    ("Â correct", "z_correct_est", 2), ("A correct", "z_correct_ref", 2),
    ("Â wrong", "z_wrong_est", 2), ("A wrong", "z_wrong_ref", 2),
    ("Â corr raw", "adv_correct_est", 3), ("A corr raw", "adv_correct_ref", 3),
]  # fmt: skip


def probe_rows(buckets: dict[str, dict[str, float]], columns=None) -> tuple[list[str], list[list[str]]]:
    """One row per probe bucket ("all", p ranges, then levels): measured bias beside the theory's (default
    columns), or with columns=PROBE_ADVANTAGE_COLUMNS the group vs reference advantages."""
    columns = columns or PROBE_BIAS_COLUMNS
    order = sorted(buckets, key=lambda k: (k != "all", not k.startswith("p∈"), bucket_order(k) if "/" in k else ()))
    rows = [[key, *(_probe_cell(buckets[key], m, d) for _, m, d in columns)] for key in order]
    return ["bucket", *(h for h, _, _ in columns)], rows


def no_informative_group_note(row: dict[str, float], group_size: int) -> str | None:
    """A warning when no group of G had a gradient (the probe then has nothing to measure), else None."""
    if row["nondegenerate"] > 0:
        return None
    outcome = "wrong" if row["p_ref_mean"] == 0 else "right" if row["p_ref_mean"] == 1 else "alike"
    return (
        f"warning: no group of G={group_size} is informative: in every group all responses scored the same "
        f"(mean reference accuracy {row['p_ref_mean']:.2f}: all {outcome}), so there is no bias to measure. Use "
        "problems the model solves sometimes (--levels, --data), a larger --max-new-tokens, or look at the "
        "completions with `hadw eval MODEL --data ... --samples samples.jsonl`."
    )


def _probe_cell(row: dict[str, float], metric, digits: int) -> str:
    if isinstance(metric, tuple):  # value ± its standard error
        value, se = (row[m] for m in metric)
        return fmt(value, digits) if math.isnan(se) else f"{value:.{digits}f}±{se:.{digits}f}"
    return fmt(int(row[metric]) if digits == 0 else row[metric], digits)
