"""Raw per-run results beside every measured table, and the one way a table is rebuilt from them.

A measured table in benchmarks/**/*.md or the README sits in a block

    <!-- rebuilt from benchmarks/ROOM/.../NAME.raw.json: BLOCK -->
    | ... |
    <!-- /rebuilt -->

`NAME.raw.json` holds the per-run values (and the environment they were measured in) and names its script (beside it,
or benchmarks/sweep_tables.py); the script's `tables(raw) -> {BLOCK: markdown}` makes every block from the raw file
alone. `python benchmarks/ROOM/.../NAME.py rebuild` rewrites the blocks; tests/test_raw_tables.py rebuilds them all and
fails on a mismatch, on a block or a table without a raw file, and on a raw file without its blocks.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"<!-- rebuilt from (\S+?\.raw\.json): (\w+) -->\n(.*?)\n?<!-- /rebuilt -->", re.S)


def environment() -> dict:
    """What a result depends on beyond the config: commit, CPU and its kernels, thread count, library versions."""
    import torch
    import transformers

    import hadw

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "unknown"

    cpu = "unknown"
    if Path("/proc/cpuinfo").exists():
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        names = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    return {
        "commit": git("rev-parse", "HEAD") + (" (+uncommitted)" if git("status", "--porcelain", "src") else ""),
        "cpu": cpu,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "kernel_env": {k: v for k, v in os.environ.items() if k.startswith(("ATEN_CPU", "MKL_", "ONEDNN", "DNNL"))},
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "hadw": hadw.__version__,
    }


def write_raw(raw_path: Path, tables: list[Path], script: Path, command: str, runs: list[dict], **extra) -> None:
    """Write the raw file: the script that rebuilds, the files holding its blocks, the command, the per-run rows."""
    rel = lambda p: str(Path(p).resolve().relative_to(ROOT))
    raw = {
        "script": rel(script),
        "tables": [rel(t) for t in tables],
        "command": command,
        "environment": environment(),
        **extra,
        "runs": runs,
    }
    raw_path.write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")


def blocks(text: str) -> dict[tuple[str, str], str]:
    """(raw file, block name) -> the block's markdown, for every rebuilt block in `text`."""
    return {(m.group(1), m.group(2)): m.group(3) for m in BLOCK.finditer(text)}


def replace_blocks(text: str, raw_rel: str, new: dict[str, str]) -> str:
    """`text` with every block of `raw_rel` replaced by new[name] (a block `new` lacks is left as it is)."""

    def swap(m: re.Match) -> str:
        if m.group(1) != raw_rel or m.group(2) not in new:
            return m.group(0)
        return f"<!-- rebuilt from {raw_rel}: {m.group(2)} -->\n{new[m.group(2)]}\n<!-- /rebuilt -->"

    return BLOCK.sub(swap, text)


def load_tables_fn(raw: dict) -> Callable[[dict], dict[str, str]]:
    """The `tables` function of the script a raw file names."""
    path = ROOT / raw["script"]
    spec = importlib.util.spec_from_file_location(f"_rebuild_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tables


def rebuild(raw_path: Path, tables_fn: Callable[[dict], dict[str, str]] | None = None) -> None:
    """Rewrite every block of `raw_path` in the files it names from the raw file alone."""
    raw = json.loads(raw_path.read_text(encoding="utf-8"))
    new = (tables_fn or load_tables_fn(raw))(raw)
    raw_rel = str(raw_path.resolve().relative_to(ROOT))
    for name in raw["tables"]:
        path = ROOT / name
        text = path.read_text(encoding="utf-8")
        path.write_text(replace_blocks(text, raw_rel, new), encoding="utf-8")
        missing = set(new) - {b for r, b in blocks(text) if r == raw_rel}
        if name.startswith("benchmarks/") and missing:
            print(f"{name}: no block for {sorted(missing)} (add '<!-- rebuilt from {raw_rel}: NAME -->')")


def command_line(
    doc: str,
    raw_path: Path,
    tables_fn: Callable[[dict], dict[str, str]],
    run_fn: Callable[[argparse.Namespace], None],
    options: Callable[[argparse.ArgumentParser], None],
) -> None:
    """`python benchmarks/ROOM/.../NAME.py run [options]` (measure, write the raw file, rebuild) | `... rebuild` (the
    blocks from the raw file alone): the command line every raw-table script shares; `options` adds the run's flags."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("what", choices=["run", "rebuild"])
    options(parser)
    args = parser.parse_args()
    if args.what == "run":
        run_fn(args)
    rebuild(raw_path, tables_fn)
