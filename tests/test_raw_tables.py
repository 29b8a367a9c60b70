"""Every measured table is rebuilt from its committed raw per-run results (benchmarks/raw_tables.py).

- each `benchmarks/*.raw.json` names its script; the script's `tables(raw)` makes every block from the raw file alone,
  and each block in the files it names must be exactly that;
- a rebuilt block must name a raw file that exists, and a raw file must have its blocks;
- every markdown table in `benchmarks/*.md` sits in a rebuilt block (a bench_report keeps its output in a code block,
  not a table); `benchmarks/archive/` holds the studies whose raw results were not kept, each saying so;
- the README's measured tables (the demo's, "Does HA-DW help?") are rebuilt blocks.
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.conftest import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))
import raw_tables  # noqa: E402

RAW_FILES = sorted(BENCH.glob("*.raw.json"))


def _files_with_blocks() -> list:
    return [*sorted(BENCH.glob("*.md")), REPO_ROOT / "README.md"]


def test_there_are_raw_files():
    names = {p.name for p in RAW_FILES}
    assert {"demo_range.raw.json", "across_starts.raw.json"} <= names, names


@pytest.mark.parametrize("raw_path", RAW_FILES, ids=lambda p: p.name)
def test_every_block_is_rebuilt_from_its_raw_file(raw_path):
    raw = json.loads(raw_path.read_text(encoding="utf-8"))
    assert raw["runs"], f"{raw_path.name}: no per-run rows"
    assert {"commit", "cpu", "cpu_capability", "torch"} <= set(raw["environment"]), raw_path.name
    rebuilt = raw_tables.load_tables_fn(raw)(raw)
    rel = str(raw_path.relative_to(REPO_ROOT))
    found = set()
    for name in raw["tables"]:
        for (r, b), body in raw_tables.blocks((REPO_ROOT / name).read_text("utf-8")).items():
            if r == rel:
                found.add(b)
                assert body == rebuilt[b], f"{name}: block {b} differs from what {raw['script']} rebuilds from {rel}"
    assert set(rebuilt) <= set(found), f"{rel}: no block for {sorted(set(rebuilt) - set(found))}"


def test_every_block_names_an_existing_raw_file_that_lists_it():
    for path in _files_with_blocks():
        for raw_rel, block in raw_tables.blocks(path.read_text("utf-8")):
            raw_path = REPO_ROOT / raw_rel
            assert raw_path.is_file(), f"{path.name}: block {block} names {raw_rel}, which does not exist"
            listed = json.loads(raw_path.read_text("utf-8"))["tables"]
            assert str(path.relative_to(REPO_ROOT)) in listed, f"{raw_rel} does not list {path.name}"


def _tables_outside_blocks(text: str) -> list[str]:
    text = raw_tables.BLOCK.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [ln for ln in text.splitlines() if ln.startswith("|")]


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.md")), ids=lambda p: p.name)
def test_no_measured_table_without_raw_results(path):
    stray = _tables_outside_blocks(path.read_text("utf-8"))
    assert not stray, f"{path.name}: a table outside a rebuilt block (add raw results and a block): {stray[0][:80]}"


def test_archived_studies_say_why_they_are_archived():
    for path in sorted((BENCH / "archive").glob("*.md")):
        if path.name != "README.md":
            assert path.read_text("utf-8").startswith("> **Archived, not current evidence.**"), path.name


def test_the_readme_measured_tables_are_rebuilt_blocks():
    readme = (REPO_ROOT / "README.md").read_text("utf-8")
    names = {(r, b) for r, b in raw_tables.blocks(readme)}
    assert ("benchmarks/demo_range.raw.json", "range") in names
    assert ("benchmarks/across_starts.raw.json", "primary") in names


def test_a_changed_raw_value_fails_the_check(tmp_path):
    """The check can fail: one value changed in a copy of a raw file rebuilds another table."""
    raw_path = BENCH / "demo_range.raw.json"
    raw = json.loads(raw_path.read_text("utf-8"))
    before = raw_tables.load_tables_fn(raw)(raw)
    row = next(r for r in raw["runs"] if r["arm"] == "GRPO" and r["bucket"] == "all")
    row["greedy"] += 0.01
    assert raw_tables.load_tables_fn(raw)(raw)["range"] != before["range"]
