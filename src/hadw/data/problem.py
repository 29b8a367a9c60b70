"""The one record every prompt source yields, and the error a bad dataset row raises."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hadw.errors import UserError


@dataclass(frozen=True)
class Problem:
    """One prompt with its gold answer.

    question: the bare question text (no instruction suffix; templates add that).
    answer:   the gold answer as a string ("85", "\\frac{14}{3}", "(3, \\frac{\\pi}{2})").
    level:    difficulty level where the source has one (MATH: 1-5, built-in tasks: 1-5), else None.
    source:   where it came from: a task name ("addition") or a dataset name ("math500").
    uid:      stable id, unique within a run: "math500:test/precalculus/807.json", "addition:L2:0:17".
    row:      the raw dataset row it was read from (None for built-in tasks); reward functions with TRL's
              signature receive its columns as keyword arguments. Not part of equality.
    where:    where that row is ("data.jsonl:3", "x.parquet: row 2 (0-based)"), for errors found after loading
              (a prompt too long for the model); None for built-in tasks. Not part of equality.
    context:  the chat turns before the question, kept as given ({"role", "content"} each): a conversational
              row's system turn and earlier turns (TRL's conversational format), or a system prompt
              (with_system_prompt). The template fills the last user turn; a chat template renders them all.
    """

    question: str
    answer: str
    level: int | str | None
    source: str
    uid: str
    row: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    where: str | None = field(default=None, compare=False, repr=False)
    context: tuple[Mapping[str, str], ...] = field(default=(), compare=False, repr=False)


def with_system_prompt(problems: list[Problem], system_prompt: str) -> list[Problem]:
    """The problems with `system_prompt` as their first chat turn (data.system_prompt, --system-prompt); a row that
    has a system turn of its own keeps it. "" changes nothing (the chat template's own default, if it has one)."""
    if not system_prompt:
        return problems
    turn = {"role": "system", "content": system_prompt}
    return [
        p if any(m.get("role") == "system" for m in p.context) else replace(p, context=(turn, *p.context))
        for p in problems
    ]


class DatasetError(UserError, ValueError):
    """A dataset file, row or option that cannot be turned into Problems. The message names the
    file, the line (JSONL, 1-based) or row (parquet / HF, 0-based), and the field or allowed values."""
