"""Every measured table is rebuilt from its committed raw per-run results (benchmarks/raw_tables.py).

- each `benchmarks/**/*.raw.json` names its script; the script's `tables(raw)` makes every block from the raw file
  alone, and each block in the files it names must be exactly that;
- a rebuilt block must name a raw file that exists, and a raw file must have its blocks;
- every markdown table in `benchmarks/**/*.md` sits in a rebuilt block (a bench_report keeps its output in a code
  block, not a table), except in the indexes (benchmarks/README.md, benchmarks/studies/archived.md) and in the
  archived studies (studies/hadw_effect/, studies/sim_vs_trainer/: their raw results were not kept), each of which
  says so in its first line;
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

RAW_FILES = sorted(BENCH.rglob("*.raw.json"))
REPORTS = sorted(BENCH.rglob("*.md"))
INDEXES = (BENCH / "README.md", BENCH / "studies" / "archived.md")  # lists of reports: name files, measure nothing
ARCHIVED_BANNER = "> **Archived, not current evidence.**"
ARCHIVED_STUDIES = ("hadw_effect", "sim_vs_trainer")  # benchmarks/studies/<name>/: per-seed results not kept


def _files_with_blocks() -> list:
    return [*REPORTS, REPO_ROOT / "README.md"]


def test_there_are_raw_files():
    names = {p.name for p in RAW_FILES}
    assert {
        "demo_range.raw.json",
        "across_starts.raw.json",
        "tiny_testbed.raw.json",
        "real_model_study.raw.json",
    } <= names


@pytest.mark.parametrize("raw_path", RAW_FILES, ids=lambda p: str(p.relative_to(BENCH)))
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


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: str(p.relative_to(BENCH)))
def test_no_measured_table_without_raw_results(path):
    text = path.read_text("utf-8")
    if path in INDEXES or text.startswith(ARCHIVED_BANNER):
        return
    stray = _tables_outside_blocks(text)
    assert not stray, f"{path.name}: a table outside a rebuilt block (add raw results and a block): {stray[0][:80]}"


def test_archived_studies_say_why_they_are_archived():
    archived = [p for name in ARCHIVED_STUDIES for p in sorted((BENCH / "studies" / name).glob("*.md"))]
    assert archived
    for path in archived:
        assert path.read_text("utf-8").startswith(ARCHIVED_BANNER), path.name
    for path in REPORTS:  # and only they: a current report's tables are rebuilt
        if path.read_text("utf-8").startswith(ARCHIVED_BANNER):
            assert path in archived, f"{path.relative_to(BENCH)}: archived outside {ARCHIVED_STUDIES}"


def test_the_readme_measured_tables_are_rebuilt_blocks():
    readme = (REPO_ROOT / "README.md").read_text("utf-8")
    names = {(r, b) for r, b in raw_tables.blocks(readme)}
    assert ("benchmarks/studies/demo_range/demo_range.raw.json", "range") in names


def test_the_readme_verdicts_are_rebuilt_from_the_studies_raw_files():
    """ "Does HA-DW help?" is one table, one row a study, every figure rebuilt from the studies' committed raw files."""
    sys.path.insert(0, str(BENCH / "studies"))
    import verdicts

    readme = (REPO_ROOT / "README.md").read_text("utf-8")
    section = readme.split("\n## Does HA-DW help?\n", 1)[1].split("\n## ", 1)[0]
    found = verdicts.blocks(section)
    assert found == {(verdicts.NAME, "verdicts"): verdicts.tables()["verdicts"]}, "run benchmarks/studies/verdicts.py"
    assert not _tables_outside_blocks(verdicts.SUMMARY.sub("", section)), "a table typed by hand"
    for _, raw, _, _ in verdicts.STUDIES:
        assert (BENCH / "studies" / raw) in RAW_FILES, raw
    raws = {raw: json.loads((BENCH / "studies" / raw).read_text("utf-8")) for _, raw, _, _ in verdicts.STUDIES}
    raws["tiny_testbed/tiny_testbed.raw.json"]["runs"][0]["greedy"]["all"] += 0.01  # the check can fail
    assert verdicts.tables(raws)["verdicts"] != verdicts.tables()["verdicts"]


def test_a_changed_raw_value_fails_the_check(tmp_path):
    """The check can fail: one value changed in a copy of a raw file rebuilds another table."""
    raw_path = BENCH / "studies" / "demo_range" / "demo_range.raw.json"
    raw = json.loads(raw_path.read_text("utf-8"))
    before = raw_tables.load_tables_fn(raw)(raw)
    row = next(r for r in raw["runs"] if r["arm"] == "GRPO" and r["bucket"] == "all")
    row["greedy"] += 0.01
    assert raw_tables.load_tables_fn(raw)(raw)["range"] != before["range"]
