"""The demo's table under other CPUs' kernels: `hadw demo` from its shipped warm start, once per kernel setting.

The warm start is a file, the same everywhere; RL from it is deterministic on one machine but chaotic in floating-point
summation order, so another CPU's kernels give another table. The settings below stand in for other CPUs on one
machine: PyTorch's own kernels at another instruction set (`ATEN_CPU_CAPABILITY`) and MKL's BLAS at another one
(`MKL_ENABLE_INSTRUCTIONS`). The README's demo table states the range over them; demo_results.md (this folder) keeps
the rows of every setting.

Usage: python benchmarks/studies/demo_range/demo_range.py run [--settings native,aten_avx2,...] [--out runs/demo_range]
       python benchmarks/studies/demo_range/demo_range.py rebuild   # README.md's and demo_results.md's blocks, from
                                                                    # demo_range.raw.json alone
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: the shared helpers
import raw_tables

RAW = Path(__file__).with_suffix(".raw.json")
TABLES = [Path(__file__).with_name("demo_results.md"), raw_tables.ROOT / "README.md"]
SETTINGS = {
    "native": {},  # what this CPU picks (AVX-512 here)
    "aten_avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "aten_default": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl_avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "aten_default_mkl_sse42": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
}
ARMS = ("GRPO", "GRPO+HA-DW")


def run(args: argparse.Namespace) -> None:
    """One `hadw demo` per setting (in a fresh process: the kernels are chosen at import), then the raw file."""
    rows = []
    for name in args.settings.split(","):
        out = args.out / name
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ATEN_CPU", "MKL_ENABLE"))}
        env |= SETTINGS[name]
        print(f"== {name} {SETTINGS[name]}", flush=True)
        subprocess.run([sys.executable, "-m", "hadw.cli", "demo", "--out-dir", str(out)], env=env, check=True)
        result = json.loads((out / "demo_results.json").read_text(encoding="utf-8"))
        probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
        capability = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).stdout
        for bucket, row in result["initial"].items():
            base = {"setting": name, "kernel_env": SETTINGS[name], "cpu_capability": capability.strip()}
            rows.append({**base, "arm": "warm start", "bucket": bucket, "greedy": row["greedy"], "n": row["count"]})
            for arm in ARMS:
                rows.append({**base, "arm": arm, "bucket": bucket, "greedy": result["final"][arm][bucket]})
    raw_tables.write_raw(RAW, TABLES, Path(__file__), "python " + " ".join(sys.argv), rows)


def _label(bucket: str) -> str:
    return bucket.split("/")[-1] if "/" in bucket else "all"


def tables(raw: dict) -> dict[str, str]:
    """`range` (README: the native table with each change's range over the settings) and `per_setting`."""
    rows = raw["runs"]
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    # the levels, then all (the task-wide bucket "sums" is the same as "all" here)
    buckets = [b for b in dict.fromkeys(r["bucket"] for r in rows) if "/" in b] + ["all"]
    value = {(r["setting"], r["arm"], r["bucket"]): r["greedy"] for r in rows}
    count = {r["bucket"]: int(r["n"]) for r in rows if "n" in r}
    warm = {b: value[(settings[0], "warm start", b)] for b in buckets}
    arms = " | ".join(f"{a}: value (change; change's range)" for a in ARMS)
    head = f"| level | n | warm start | {arms} |\n|---|---|---|" + "---|" * len(ARMS)
    lines = [head]
    for b in buckets:
        cells = []
        for arm in ARMS:
            deltas = [value[(s, arm, b)] - value[(s, "warm start", b)] for s in settings]
            first = value[(settings[0], arm, b)]
            cells.append(f"{first:.3f} ({deltas[0]:+.3f}; {min(deltas):+.3f} to {max(deltas):+.3f})")
        lines.append(f"| {_label(b)} | {count[b]} | {warm[b]:.3f} | " + " | ".join(cells) + " |")
    out = {"range": "\n".join(lines)}
    lines = ["| setting | kernels | level | warm start | " + " | ".join(ARMS) + " |", "|---|---|---|---|---|---|"]
    for s in settings:
        kernels = next(r["cpu_capability"] for r in rows if r["setting"] == s)
        for b in buckets:
            start = value[(s, "warm start", b)]
            cells = [f"{value[(s, a, b)]:.3f} ({value[(s, a, b)] - start:+.3f})" for a in ARMS]
            lines.append(f"| {s} | {kernels} | {_label(b)} | {start:.3f} | " + " | ".join(cells) + " |")
    out["per_setting"] = "\n".join(lines)
    return out


def main() -> None:
    raw_tables.command_line(__doc__, RAW, tables, run, _options)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--out", type=Path, default=Path("runs/demo_range"))


if __name__ == "__main__":
    main()
