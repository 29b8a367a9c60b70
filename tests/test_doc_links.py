"""Every relative link in README.md, docs/*.md and benchmarks/**/*.md points to a file that exists (and, with a
`#fragment` into a markdown file, to a heading there): moving a section between the README and docs/, or a report
between benchmarks/' rooms, must not leave a link dangling."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PAGES = [
    REPO_ROOT / "README.md",
    *sorted((REPO_ROOT / "docs").glob("*.md")),
    *sorted((REPO_ROOT / "benchmarks").rglob("*.md")),
]
_LINK = re.compile(r"\]\(([^()\s]+)\)")  # [text](target) and ![alt](target); no spaces or parentheses in targets
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # links inside code are examples, not links


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (letters, digits, - and _ kept), spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _CODE.sub("", page.read_text(encoding="utf-8"))
    return {_anchor(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    """The relative links of `page` whose file (or heading) does not exist."""
    bad = []
    for target in _LINK.findall(_CODE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        missing_heading = fragment and file.suffix == ".md" and file.exists() and fragment not in _anchors(file)
        if not file.exists() or missing_heading:
            bad.append(target)
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves(page: Path):
    assert not broken_links(page), f"{page.relative_to(REPO_ROOT)}: {broken_links(page)}"


def test_the_pages_link_to_each_other():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/benchmarks.md)" in readme and "](docs/library.md)" in readme


def test_a_planted_broken_link_is_found(tmp_path):
    (tmp_path / "there.md").write_text("# A heading\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-heading) [web](https://example.org/x) `[code](nowhere.md)`\n"
        "[gone](docs/nowhere.md) [bad heading](there.md#no-such-heading)\n",
        encoding="utf-8",
    )
    assert broken_links(page) == ["docs/nowhere.md", "there.md#no-such-heading"]
