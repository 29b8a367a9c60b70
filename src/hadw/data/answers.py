"""Pull a final answer out of free text: the last \\boxed{...}, or the number after "####".

Shared by the dataset layouts (gold answers inside MATH / Minerva solutions, GSM8K rationales) and by
the verifiers (answers inside model completions). Pure string code, no sympy, cheap to import.
"""

from __future__ import annotations

import re

_BOXED_OPENERS = ("\\boxed{", "\\fbox{")
_HASHES_RE = re.compile(r"####\s*([^\n]*)")


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}) in `text`, braces balanced; None if there is none.

    "\\boxed{\\frac{1}{2}}" -> "\\frac{1}{2}". An unclosed last box (a truncated completion) counts as none.
    Also accepts the brace-less "\\boxed 5" form that some MATH solutions use.
    """
    start = max(text.rfind(opener) for opener in _BOXED_OPENERS)
    bare = text.rfind("\\boxed ")
    if bare > start:  # "\boxed 5": the answer runs to the next "$" or whitespace
        match = re.match(r"\\boxed ([^\s$]+)", text[bare:])
        return match.group(1) if match else None
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def after_hashes(text: str) -> str | None:
    """The GSM8K answer: what follows the last "####", with thousands commas removed. None if absent.

    "... #### 1,450,000" -> "1450000".
    """
    matches = _HASHES_RE.findall(text)
    if not matches:
        return None
    answer = matches[-1].strip().replace(",", "")
    return answer or None


def extract_answer(text: str) -> str | None:
    """The answer a completion commits to: the last \\boxed{}, else the "####" answer, else None."""
    boxed = last_boxed(text)
    return boxed if boxed is not None else after_hashes(text)


def strip_dollars(text: str) -> str:
    """Drop inline-math dollars: "$69$,$84$" -> "69,84", "$\\frac{1}{2}$" -> "\\frac{1}{2}"."""
    return text.replace("$", "").strip()


def number_string(value: float | int | str) -> str:
    """A whole-valued float as an integer string (27.0 -> "27"); other values unchanged as str."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
