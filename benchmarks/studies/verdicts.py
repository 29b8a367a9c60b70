"""The README's answer to "Does HA-DW help?": one row a pre-registered study of HA-DW − GRPO, every figure rebuilt from
the studies' committed raw files (the per-study tables live in each study's report).

    python benchmarks/studies/verdicts.py   # rewrite the README's block from the raw files alone

tests/test_raw_tables.py rebuilds the block and fails on a mismatch.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import raw_tables
import sweep_tables

HERE = Path(__file__).resolve().parent
README = raw_tables.ROOT / "README.md"
SUMMARY = re.compile(r"<!-- rebuilt by (\S+?\.py): (\w+) -->\n(.*?)\n?<!-- /rebuilt -->", re.S)
NAME = "benchmarks/studies/verdicts.py"
# (report, raw file, what, testbed): what is a sweep_tables treatment arm or across_starts' G
STUDIES = [
    (
        "real_model_study/real_model_study.md",
        "real_model_study/real_model_study.raw.json",
        "hadw",
        "SmolLM2-135M-Instruct, `sums` 1–2 as a chat question, G = 8; greedy on 500 problems a seed",
    ),
    (
        "tiny_testbed/tiny_testbed.md",
        "tiny_testbed/tiny_testbed.raw.json",
        "hadw",
        "tiny model from `sums234-s0`, G = 8; greedy on 2000 problems a seed",
    ),
    (
        "across_starts/across_starts.md",
        "across_starts/across_starts.raw.json",
        8,
        "tiny model, three warm starts pooled, G = 8; avg@4 on 300 problems a seed",
    ),
    (
        "across_starts/across_starts.md",
        "across_starts/across_starts.raw.json",
        4,
        "tiny model, three warm starts pooled, G = 4; avg@4 on 300 problems a seed",
    ),
]


def _interval(mean: float, low: float, high: float) -> str:
    return f"{mean:+.4f} [{low:+.4f}, {high:+.4f}]"


def _sweep_row(raw: dict, arm: str) -> tuple[int, str, float, str]:
    c = sweep_tables.comparison(raw, arm)
    d = c["pair"].diff
    words = sweep_tables.verdict(d.low, d.high, raw["margin"])
    control = "control" in sweep_tables.treatments(raw) and sweep_tables.comparison(raw, "control")
    if control:
        cd = control["pair"].diff
        words += f"; its positive control detected at {_interval(cd.mean, cd.low, cd.high)}"
    return len(c["seeds"]), _interval(d.mean, d.low, d.high), c["pair"].mde, words


def _across_row(raw: dict, g: int) -> tuple[int, str, float, str]:
    sys.path.insert(0, str(HERE / "across_starts"))
    import across_starts as A

    starts = sorted({r["start"] for r in raw["runs"]})
    p = A.pooled({s: A.paired(raw["runs"], s, g, A.PRIMARY) for s in starts})
    # the pre-registered rule: worse / better when the pooled interval excludes 0, else parity
    words = "worse with HA-DW" if p["high"] < 0 else "better with HA-DW" if p["low"] > 0 else "parity"
    words += f"; same on every start (ANOVA p = {p['anova_p']:.2f})" if p["anova_p"] >= 0.05 else "; depends on start"
    return p["n"], _interval(p["mean"], p["low"], p["high"]), p["mde"], words


def tables(raws: dict[str, dict] | None = None) -> dict[str, str]:
    """{"verdicts": the README's table}; `raws` (raw file -> its contents) defaults to the committed files."""
    raws = raws or {raw: json.loads((HERE / raw).read_text(encoding="utf-8")) for _, raw, _, _ in STUDIES}
    lines = ["| study | testbed | seeds | HA-DW − GRPO [95 %] | MDE (80 %) | verdict |", "|---|---|---|---|---|---|"]
    for report, raw, what, testbed in STUDIES:
        n, diff, mde, words = (_across_row if isinstance(what, int) else _sweep_row)(raws[raw], what)
        name = report.split("/")[0]
        lines.append(f"| [{name}](benchmarks/studies/{report}) | {testbed} | {n} | {diff} | {mde:.4f} | {words} |")
    return {"verdicts": "\n".join(lines)}


def blocks(text: str) -> dict[tuple[str, str], str]:
    """(script, block name) -> the block's markdown, for every block a script (not a raw file) rebuilds."""
    return {(m.group(1), m.group(2)): m.group(3) for m in SUMMARY.finditer(text)}


def main() -> None:
    new = tables()
    text = README.read_text(encoding="utf-8")

    def swap(m: re.Match) -> str:
        if m.group(1) != NAME or m.group(2) not in new:
            return m.group(0)
        return f"<!-- rebuilt by {NAME}: {m.group(2)} -->\n{new[m.group(2)]}\n<!-- /rebuilt -->"

    README.write_text(SUMMARY.sub(swap, text), encoding="utf-8")
    print(new["verdicts"])


if __name__ == "__main__":
    main()
