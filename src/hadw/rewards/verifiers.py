"""Per-item verifiers: (completion, gold answer) -> score. Pure functions, importable in a worker process.

exact  - integer answers of the built-in tasks: normalise both to a canonical digit string and compare
         exactly (any length; no float rounding); no sympy, in-process.
math   - math-verify: symbolic / numeric equivalence of the completion's last \\boxed{} (or "#### N")
         answer with the gold answer. Slow on pathological inputs, so it runs in the verifier pool.
format - 1 when the completion commits to an answer (a closed \\boxed{} or "#### N"), else 0.

Both exact and math read Unicode decimal digits ("٨٥", fullwidth "８５") as the ASCII digits they stand for.
Equations (docs/data.md): when the gold is not an equation, a predicted equation matches only when its
left side is a single variable ("x = 2" is read as "2"); "1 = 2" or "x + 1 = 3" score 0. math-verify alone
would take the right-hand side of any equation, so "\\boxed{1=2}" would match gold 2.
"""

from __future__ import annotations

import functools
import logging
import re

from hadw.data.answers import extract_answer

_INT_RE = re.compile(r"([+-]?)([0-9]+)(?:\.0*)?")
# A single variable: a Latin letter or a Greek letter command, with an optional subscript (x, \\theta, a_1).
_VARIABLE_RE = re.compile(r"\s*(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?\s*")


def ascii_digits(text: str) -> str:
    """Unicode decimal digits (Arabic-Indic, fullwidth, ...) replaced by ASCII 0-9; everything else kept."""
    if text.isascii():
        return text
    return "".join(str(int(c)) if c.isdecimal() else c for c in text)


def canonical_int(text: str) -> str | None:
    """ "85", " -12 ", "1,450,000", "27.0", "085", "٨٥" -> "85", "-12", "1450000", "27", "85", "85" (exact
    digits, any length); anything else -> None."""
    match = _INT_RE.fullmatch(ascii_digits(text).strip().replace(",", ""))
    if match is None:
        return None
    sign, digits = match.groups()
    digits = digits.lstrip("0") or "0"
    return f"-{digits}" if sign == "-" and digits != "0" else digits


def to_int(text: str) -> int | None:
    """canonical_int as an int (exact for any length)."""
    canonical = canonical_int(text)
    return None if canonical is None else int(canonical)


def exact_item(completion: str, answer: str) -> float:
    """1 if the completion's answer (its last \\boxed{}, "#### N", else the whole completion) equals the
    gold integer. "47+38=" -> "85" scores 1; "85 " scores 1; "085" scores 1; "84" or "85x" score 0.
    Compared as digit strings, so 12345678901234567891 never matches ...890 and 400 digits are fine."""
    predicted = extract_answer(completion)
    predicted_int = canonical_int(completion if predicted is None else predicted)
    return float(predicted_int is not None and predicted_int == canonical_int(answer))


def equation_answer(predicted: str, gold: str) -> str | None:
    """The part of `predicted` to compare with a non-equation gold: the right side of "x = ..." (a single
    variable on the left), None for any other equation (it never matches); `predicted` itself otherwise."""
    if "=" not in predicted or "=" in gold:
        return predicted
    left, _, right = predicted.rpartition("=")
    if "=" in left or not _VARIABLE_RE.fullmatch(left) or not right.strip():
        return None
    return right


def format_item(completion: str, answer: str) -> float:
    """1 if the completion contains a closed, non-empty \\boxed{} or a "#### N" answer."""
    predicted = extract_answer(completion)
    return float(predicted is not None and predicted.strip() != "")


@functools.cache
def _math_verify():
    """Import math-verify once per process; its signal timeouts are disabled (the pool enforces ours)."""
    import math_verify
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" warnings
    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    parse = functools.partial(math_verify.parse, extraction_config=config, parsing_timeout=None)
    verify = functools.partial(math_verify.verify, timeout_seconds=None)
    return parse, verify


@functools.lru_cache(maxsize=4096)
def _parse_gold(answer: str):
    """Gold answers are bare LaTeX ("\\frac{14}{3}", "90^\\circ"): wrap them in \\boxed{} so the LaTeX
    extractor reads the whole string. Cached: the G completions of a prompt share one gold."""
    parse, _ = _math_verify()
    return parse(f"\\boxed{{{answer}}}")


def math_item(completion: str, answer: str) -> float:
    """1 if the completion's last \\boxed{} (or "#### N") answer is mathematically equal to the gold.

    No extracted answer -> 0 (the paper's reward needs a \\boxed{}). If math-verify cannot parse the
    gold at all, fall back to comparing the two strings with whitespace removed.
    """
    predicted = extract_answer(completion)
    if predicted is None or not predicted.strip():
        return 0.0
    predicted, answer = equation_answer(ascii_digits(predicted), ascii_digits(answer)), ascii_digits(answer)
    if predicted is None:  # an equation against a non-equation gold, not "x = ..." (module docstring)
        return 0.0
    parse, verify = _math_verify()
    gold = _parse_gold(answer)
    if not gold:
        return float("".join(predicted.split()) == "".join(answer.split()))
    return float(verify(gold, parse(f"\\boxed{{{predicted}}}")))


def warm_up() -> None:
    """Pay the sympy / math-verify import and first-parse cost now (called when a pool worker starts)."""
    math_item("\\boxed{\\frac{1}{2}}", "0.5")
