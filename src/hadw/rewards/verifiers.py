"""Per-item verifiers: (completion, gold answer) -> score. Pure functions, importable in a worker process.

exact  - integer answers of the built-in tasks: normalise both to int and compare; no sympy, in-process.
math   - math-verify: symbolic / numeric equivalence of the completion's last \\boxed{} (or "#### N")
         answer with the gold answer. Slow on pathological inputs, so it runs in the verifier pool.
format - 1 when the completion commits to an answer (a closed \\boxed{} or "#### N"), else 0.
"""

from __future__ import annotations

import functools
import logging
import re

from hadw.data.answers import extract_answer

_INT_RE = re.compile(r"[+-]?\d+(?:\.0*)?")


def to_int(text: str) -> int | None:
    """"85", " -12 ", "1,450,000", "27.0" -> int; anything else -> None."""
    text = text.strip().replace(",", "")
    return int(float(text)) if _INT_RE.fullmatch(text) else None


def exact_item(completion: str, answer: str) -> float:
    """1 if the completion's answer (its last \\boxed{}, "#### N", else the whole completion) equals the
    gold integer. "47+38=" -> "85" scores 1; "85 " scores 1; "085" scores 1; "84" or "85x" score 0."""
    predicted = extract_answer(completion)
    predicted_int = to_int(completion if predicted is None else predicted)
    return float(predicted_int is not None and predicted_int == to_int(answer))


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
    parse, verify = _math_verify()
    gold = _parse_gold(answer)
    if not gold:
        return float("".join(predicted.split()) == "".join(answer.split()))
    return float(verify(gold, parse(f"\\boxed{{{predicted}}}")))


def warm_up() -> None:
    """Pay the sympy / math-verify import and first-parse cost now (called when a pool worker starts)."""
    math_item("\\boxed{\\frac{1}{2}}", "0.5")
