"""The hard-prompt study's pilots: each held-out problem's greedy score and correct samples of 8, kept as a raw file,
and the per-level tables of README.md rebuilt from that file alone.

    python benchmarks/studies/hard_prompts/pilot.py pack --pilot pilot1=DIR1 --pilot pilot2=DIR2 --pilot pilot3=DIR3
    python benchmarks/studies/hard_prompts/pilot.py rebuild

`pack` reads each pilot's `hadw eval ... -k 8 --samples samples.jsonl` output (DIR/samples.jsonl: one greedy and 8
sampled completions a problem, each with its score); a problem's success rate is its correct samples / 8.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # benchmarks/: the shared helpers

from raw_tables import environment, rebuild  # noqa: E402

RAW = HERE / "pilot.raw.json"
README = "benchmarks/studies/hard_prompts/README.md"
K = 8  # samples a problem
HISTOGRAM = ((0, 0), (1, 1), (2, 2), (3, K))  # correct samples of 8: 0 / 1 / 2 / >= 3


def _problems(samples: Path) -> list[list[int]]:
    """[[level, greedy score 0/1, correct samples of K], ...] in the eval's problem order."""
    greedy: dict[tuple, int] = {}
    sampled: dict[tuple, int] = defaultdict(int)
    for line in samples.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        key = (row["level"], row["index"])
        if row["mode"] == "greedy":
            greedy[key] = int(row["score"])
        else:
            sampled[key] += int(row["score"])
    order = sorted(greedy, key=lambda key: key[1])  # the problems' index
    return [[level, greedy[(level, index)], sampled[(level, index)]] for level, index in order]


def pack(args: argparse.Namespace) -> None:
    runs = []  # one a pilot: its k = 8 evaluation of the start
    for item in args.pilot:
        name, _, folder = item.partition("=")
        runs.append({"pilot": name, "problems": _problems(Path(folder) / "samples.jsonl")})
    raw = {
        "script": "benchmarks/studies/hard_prompts/pilot.py",
        "tables": [README],
        "command": " ".join(sys.argv[1:]),
        "environment": environment(),
        "k": K,
        "runs": runs,
    }
    RAW.write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")
    counts = ", ".join(f"{r['pilot']} ({len(r['problems'])} problems)" for r in runs)
    print(f"wrote {RAW.name}: {counts}")


def _level_row(level: int, rows: list[list[int]]) -> str:
    n = len(rows)
    p = [c / K for _, _, c in rows]
    hist = " / ".join(str(sum(lo <= c <= hi for _, _, c in rows)) for lo, hi in HISTOGRAM)
    informative = sum(1 - q**4 - (1 - q) ** 4 for q in p) / n  # a G = 4 group with both outcomes: a gradient
    cells = [
        f"L{level}",
        str(n),
        f"{sum(g for _, g, _ in rows) / n:.3f}",
        f"{sum(p) / n:.3f}",
        f"{sum(c > 0 for _, _, c in rows) / n:.3f}",  # pass@8 of 8 samples: any correct
        hist,
        f"{sum(q < 0.3 for q in p) / n:.3f}",
        f"{informative:.3f}",
    ]
    return "| " + " | ".join(cells) + " |"


def tables(raw: dict) -> dict[str, str]:
    """{<pilot>_levels}: the pilot's per-level table."""
    header = (
        "| level | problems | greedy | avg@8 | pass@8 | problems with 0 / 1 / 2 / ≥ 3 of 8 correct | success < 0.3 | "
        "informative groups at G = 4 (expected) |\n|---|---|---|---|---|---|---|---|"
    )
    out = {}
    for run in raw["runs"]:
        name, by_level = run["pilot"], defaultdict(list)
        for row in run["problems"]:
            by_level[row[0]].append(row)
        out[f"{name}_levels"] = "\n".join([header, *(_level_row(lv, by_level[lv]) for lv in sorted(by_level))])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["pack", "rebuild"])
    parser.add_argument("--pilot", action="append", default=[], help="NAME=FOLDER of a pilot's hadw eval output")
    args = parser.parse_args()
    if args.what == "pack":
        pack(args)
    rebuild(RAW, tables)


if __name__ == "__main__":
    main()
