"""Each config field's documentation, read from the comments beside it in config_schema.py, so that the source stays
the one place a field is documented and `hadw train --show-config` prints exactly that text.

A field's doc is the comment block directly above it plus its trailing comment:

    # Responses per forward/backward (0 = the whole mini-batch).     <- block above
    micro_batch_size: int = 0  # lower it when a mini-batch does not fit   <- trailing
"""

from __future__ import annotations

import inspect
import io
import json
import re
import tokenize
from dataclasses import fields, is_dataclass
from typing import Any

_FIELD = re.compile(r"^\s+([a-z_][a-z0-9_]*)\s*:")


def field_docs(cls: type) -> dict[str, str]:
    """{field name: doc} for one dataclass, from the comments of its source."""
    source = inspect.getsource(cls)
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    names = {f.name for f in fields(cls)}
    docs: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        match = _FIELD.match(line)
        if not match or match.group(1) not in names:
            continue
        above, k = [], number - 1
        while k >= 1 and lines[k - 1].strip().startswith("#"):
            above.insert(0, comments.get(k, ""))
            k -= 1
        parts = [*above, comments.get(number, "")]
        docs[match.group(1)] = " ".join(p for p in parts if p)
    return docs


def describe(cfg: Any, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(dotted key, value, doc) for every leaf field of a config tree, in declaration order."""
    rows, nested = [], []
    docs = field_docs(type(cfg))
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        key = f"{prefix}{f.name}"
        if is_dataclass(value):  # sub-sections after the section's own fields
            nested += describe(value, key + ".")
        else:
            rows.append((key, value, docs.get(f.name, "")))
    return rows + nested


def show_config(cfg: Any, indent: int = 0) -> str:
    """The resolved config as YAML, each value followed by its doc: what `hadw train --show-config` prints.
    The text loads back as a config file (values are written as JSON scalars, which YAML reads unchanged)."""
    pad = "  " * indent
    docs = field_docs(type(cfg))
    leaves, sections = [], []
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if is_dataclass(value):
            title = _title(type(value))
            head = f"{pad}{f.name}:" + (f"  # {title}" if title else "")
            sections.append(head + "\n" + show_config(value, indent + 1))
        else:
            doc = docs.get(f.name, "")
            leaves.append(f"{pad}{f.name}: {json.dumps(value, ensure_ascii=False)}" + (f"  # {doc}" if doc else ""))
    text = "\n".join(leaves) + ("\n" if leaves else "")
    return text + ("\n" if indent == 0 and sections else "").join(sections)


def _title(cls: type) -> str:
    """First line of a config section's docstring ('' when dataclass() wrote its signature there)."""
    doc = (cls.__doc__ or "").strip()
    return "" if not doc or doc.startswith(f"{cls.__name__}(") else doc.splitlines()[0]
