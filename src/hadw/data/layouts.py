"""Field mappings ("layouts"): how to read a Problem out of one raw dataset row.

A FieldMap names the row fields (dotted paths reach into nested dicts, e.g. "reward_model.ground_truth")
and, where the raw value is not yet the text we want, a function that converts it (the last \\boxed{}
of a MATH solution, the number after "####" in GSM8K, 27.0 -> "27" for AMC). LAYOUTS holds one
ready-made FieldMap per known file format; `detect_layout` picks one from a row's keys.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hadw.data.answers import after_hashes, last_boxed, number_string, strip_dollars
from hadw.data.problem import DatasetError, Problem

# The instruction the paper appends to every question; verl-layout files already carry it, and we strip
# it so that rendering with the "paper" template does not add it twice.
PAPER_SUFFIX = "Let's think step by step and output the final answer within \\boxed{}."


class FieldError(DatasetError):
    """A field is missing or its value cannot be converted; the loader adds the file and line."""


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise FieldError(f"expected a string, got {type(value).__name__} {value!r:.80}")
    return value


def _boxed_answer(solution: Any) -> str:
    answer = last_boxed(_text(solution))
    if answer is None:
        raise FieldError("no \\boxed{...} answer in the solution")
    return answer


def _hashes_answer(rationale: Any) -> str:
    answer = after_hashes(_text(rationale))
    if answer is None:
        raise FieldError("no '#### N' answer in the rationale")
    return answer


class SourceFloat(float):
    """A JSON number with a fraction or an exponent, with the text the file wrote it as (hadw.data.files parses
    JSONL floats into this): a gold answer with more digits than a float holds must not change without a word."""

    text: str

    def __new__(cls, text: Any) -> SourceFloat:
        number = super().__new__(cls, text)
        number.text = str(text)
        return number


def _digits_kept(value: float) -> bool:
    """False when `value` was written with more digits than a float holds (12345678901234567890.5 reads as
    1.2345678901234567e+19): str() of it would be another number than the file's."""
    from decimal import Decimal, InvalidOperation

    text = getattr(value, "text", None)
    if text is None or not math.isfinite(value):
        return True
    try:
        return Decimal(text) == Decimal(repr(float(value)))
    except InvalidOperation:
        return True


def _number_answer(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise FieldError(f"expected a number, got {type(value).__name__} {value!r:.80}")
    if isinstance(value, float) and not _digits_kept(value):
        raise FieldError(
            f"the answer {value.text[:60]} has more digits than a number holds (it reads as {float(value)!r}); "  # type: ignore[attr-defined]
            'allowed: write it as a JSON string, e.g. "12345678901234567890.5", to keep every digit'
        )
    return number_string(value)


def _single_list_answer(value: Any) -> str:
    if not (isinstance(value, list | tuple) and len(value) == 1):
        raise FieldError(f"expected a list holding one answer, got {value!r:.80}")
    return strip_dollars(_text(value[0]))


def _chat_question(messages: Any) -> str:
    """The text of the (last) user message of a chat list, with the paper's instruction removed."""
    if not isinstance(messages, list | tuple):
        raise FieldError(f"expected a list of chat messages, got {type(messages).__name__}")
    users = [m.get("content") for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
    if not users:
        raise FieldError("no message with role 'user' in the chat list")
    question = _text(users[-1]).strip()
    return question.removesuffix(PAPER_SUFFIX).rstrip()


def _math_level(value: Any) -> int | str | None:
    """ "Level 3" -> 3, 3 -> 3; anything else ("Level ?" in a few MATH rows) is kept as the string."""
    if value is None or isinstance(value, int):
        return value
    text = str(value).strip().removeprefix("Level").strip()
    return int(text) if text.isdigit() else str(value)


def _identity(value: Any) -> Any:
    return value


def _any_answer(value: Any) -> str:
    """A user's gold-answer field: a string, a number (27.0 -> "27") or a list holding one of those."""
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    if isinstance(value, str):
        return value
    return _number_answer(value)


@dataclass(frozen=True)
class FieldMap:
    """Where the Problem fields live in a row, and how to convert them.

    question/answer/level/uid: dotted field paths; level and uid may be None (then level is None and
    the uid is "<source>:<row index>"; a uid field absent from a row also falls back to the index).
    *_fn: applied to the raw field value.
    """

    question: str
    answer: str
    level: str | None = None
    uid: str | None = None
    question_fn: Callable[[Any], str] = _text
    answer_fn: Callable[[Any], str] = _text
    level_fn: Callable[[Any], int | str | None] = _identity


@dataclass(frozen=True)
class Layout:
    """A named FieldMap, plus the keys whose presence in a row identifies this layout."""

    name: str
    fields: FieldMap
    detect: frozenset[str]
    description: str


def _layout(name: str, fields: FieldMap, detect: set[str], description: str) -> Layout:
    return Layout(name, fields, frozenset(detect), description)


# Order matters for detection: the first layout whose `detect` keys are all in the row wins.
LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in [
        _layout(
            "verl",
            FieldMap("prompt", "reward_model.ground_truth", uid="extra_info.index", question_fn=_chat_question),
            {"prompt", "reward_model"},
            "verl RL parquet: `prompt` chat list (paper instruction stripped), `reward_model.ground_truth`",
        ),
        _layout(
            "olympiadbench",
            FieldMap("question", "final_answer", uid="id", answer_fn=_single_list_answer),
            {"question", "final_answer"},
            "OlympiadBench: `question`, `final_answer` = [one string], $...$ stripped",
        ),
        _layout(
            "math500",
            FieldMap("problem", "answer", level="level", uid="unique_id", level_fn=_math_level),
            {"problem", "answer", "unique_id"},
            "MATH500: `problem`, `answer` (LaTeX, no $), `level` 1-5, `unique_id`",
        ),
        _layout(
            "math",
            FieldMap("problem", "solution", level="level", answer_fn=_boxed_answer, level_fn=_math_level),
            {"problem", "solution", "level"},
            'MATH (Hendrycks): `problem`, answer = last \\boxed{} of `solution`, `level` "Level 3" -> 3',
        ),
        _layout(
            "minerva_math",
            FieldMap("problem", "solution", uid="idx", answer_fn=_boxed_answer),
            {"problem", "solution"},
            "Minerva Math: `problem`, answer = the \\boxed{} in `solution`, `idx`",
        ),
        _layout(
            "amc23",
            FieldMap("problem", "answer", uid="id", answer_fn=_number_answer),
            {"problem", "answer", "id"},
            'AMC23: `problem`, `answer` a JSON float (27.0 -> "27"), `id`',
        ),
        _layout(
            "gsm8k",
            FieldMap("question", "answer", uid="idx", answer_fn=_hashes_answer),
            {"question", "answer"},
            "GSM8K: `question`, answer = the number after '####' in `answer` (commas removed)",
        ),
        _layout(
            "aime25",
            FieldMap("problem", "answer", answer_fn=_number_answer),
            {"problem", "answer"},
            "AIME-style: `problem`, `answer` (string or number)",
        ),
    ]
}


def get_layout(name: str) -> Layout:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise DatasetError(f"unknown layout {name!r}; allowed: auto, {', '.join(LAYOUTS)}") from None


def detect_layout(row: Mapping[str, Any]) -> Layout:
    """The first layout whose identifying keys all appear in `row`."""
    for layout in LAYOUTS.values():
        if layout.detect <= row.keys():
            return layout
    raise DatasetError(
        f"cannot detect the layout of a row with fields {sorted(row)}; name the fields: "
        "data.fields.prompt=... data.fields.answer=... in a config, --prompt-field/--answer-field on "
        f"eval and probe, FieldMap(...) in Python; or a known layout: {', '.join(LAYOUTS)}"
    )


def get_field(row: Mapping[str, Any], path: str) -> Any:
    """row["a"]["b"] for path "a.b"; FieldError naming the missing part and the fields that exist."""
    value: Any = row
    for i, key in enumerate(path.split(".")):
        if not isinstance(value, Mapping) or key not in value:
            where = ".".join(path.split(".")[:i]) or "the row"
            have = sorted(value) if isinstance(value, Mapping) else type(value).__name__
            raise FieldError(f"missing field {path!r} ({where} has: {have})")
        value = value[key]
    if value is None:  # JSON null, or a key parquet filled with null because other rows have it
        raise FieldError(f"missing field {path!r} (it is null)")
    return value


def _finite(value: Any, path: str, what: str, allowed: str) -> Any:
    """value, unless it is (or is a one-item list of) NaN or +-inf: JSON's NaN / Infinity literals and parquet
    float columns hold them, and str() would turn them into the text "nan" / "inf" (a gold answer no model
    gives, or a level of its own) without a word."""
    item = value[0] if isinstance(value, list | tuple) and len(value) == 1 else value
    if isinstance(item, float) and not math.isfinite(item):
        raise FieldError(f"{what} {item} in field {path!r} is not a finite number; allowed: {allowed}")
    return value


def _no_lone_surrogate(text: str, path: str, what: str) -> None:
    """FieldError when `text` holds a lone surrogate (JSON's "\\ud800" escape alone): not a character, so the
    tokenizer refuses it (a traceback of train and eval) and UTF-8 cannot write it to samples.jsonl."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise FieldError(
            f"the {what} field {path!r} holds a lone surrogate {text[err.start]!r} at character {err.start}; allowed: "
            "Unicode text (a surrogate pair such as \\ud83d\\ude00 is one character; half of one is none)"
        ) from None


def row_to_problem(
    row: Mapping[str, Any], fields: FieldMap, source: str, index: int, where: str | None = None
) -> Problem:
    """One Problem from one row; `index` (0-based position in the file) makes the fallback uid; `where` (the
    row's file and line) is kept on the Problem for errors found later."""
    raw_question = get_field(row, fields.question)
    context: tuple = ()
    if _is_chat(raw_question):  # TRL's conversational format, in any layout: the turns before the question kept
        last_user = max(i for i, m in enumerate(raw_question) if m.get("role") == "user")
        context = tuple({"role": str(m["role"]), "content": _text(m["content"])} for m in raw_question[:last_user])
        question = _chat_question(raw_question)
    else:
        question = fields.question_fn(raw_question)
    if not isinstance(question, str) or not question.strip():
        raise FieldError(f"the prompt field {fields.question!r} is empty; every row needs a question")
    raw_answer = _finite(get_field(row, fields.answer), fields.answer, "answer", "a string or a finite number")
    answer = fields.answer_fn(raw_answer)
    _no_lone_surrogate(question, fields.question, "prompt")
    _no_lone_surrogate(answer, fields.answer, "answer")
    raw_level = get_field(row, fields.level) if fields.level else None
    if fields.level:
        _finite(raw_level, fields.level, "level", "an integer or a name")
    level = fields.level_fn(raw_level) if fields.level else None
    uid = index  # the uid field is optional: fall back to the row's position in the file
    if fields.uid:
        with contextlib.suppress(FieldError):
            uid = get_field(row, fields.uid)
    return Problem(question, answer, level, source, f"{source}:{uid}", row=dict(row), where=where, context=context)


def _is_chat(value: Any) -> bool:
    """A list of {"role", "content"} messages with at least one user turn."""
    return (
        isinstance(value, list | tuple)
        and bool(value)
        and all(isinstance(m, Mapping) and "role" in m and "content" in m for m in value)
        and any(m.get("role") == "user" for m in value)
    )


def check_answers(problems: Sequence[Problem], fields: FieldMap, name: str) -> None:
    """Rows with an empty gold answer ("" or whitespace) can never be scored correct. All of them empty: a wrong
    answer field (or a broken file), refused. Some: counted in one warning line on stderr, kept (two math_train
    rows have an empty ground_truth; dropping them would change the benchmark's row count)."""
    empty = [p for p in problems if not p.answer.strip()]
    if not empty:
        return
    first = empty[0].where or name
    if len(empty) == len(problems):
        raise DatasetError(
            f"{first}: the answer field {fields.answer!r} is empty on every row ({len(problems)}); allowed: a "
            "non-empty gold answer (name the right field: data.fields.answer / --answer-field)"
        )
    print(
        f"warning: {name}: {len(empty)} of {len(problems)} rows have an empty answer in field {fields.answer!r} "
        f"(first: {first}); no completion can match them, they score 0",
        file=sys.stderr,
    )


def check_unique_ids(problems: Sequence[Problem], fields: FieldMap, name: str) -> None:
    """DatasetError naming both rows when two problems share a uid: per-problem results (final_eval_problems.jsonl,
    hadw compare's pairing across runs) are keyed by it, so a repeated id paired the wrong problems silently."""
    seen: dict[str, Problem] = {}
    for p in problems:
        first = seen.setdefault(p.uid, p)
        if first is not p:
            by = f"field {fields.uid!r}" if fields.uid else "the row index"
            earlier = first.where or "an earlier row"
            raise DatasetError(
                f"{p.where or name}: id {p.uid.partition(':')[2]!r} ({by}) is also the id of {earlier}; allowed: a "
                "distinct id per row (per-problem results are paired by it): fix or drop the repeated row"
            )


def user_fields(prompt: str, answer: str, level: str | None = None, uid: str | None = None) -> FieldMap:
    """The FieldMap of a user's own field names (dotted paths). Lenient conversions: the answer may be a
    string, a number or a one-item list; a level "Level 3" becomes 3, other values are kept."""
    for name, value in (("prompt", prompt), ("answer", answer)):
        if not value:
            raise DatasetError(f"the {name} field name is empty; give both the prompt and the answer field")
    return FieldMap(prompt, answer, level or None, uid or None, answer_fn=_any_answer, level_fn=_math_level)
