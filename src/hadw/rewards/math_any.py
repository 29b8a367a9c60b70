"""`math_any`: like `math`, but the completion's answer need not be boxed.

The paper's `math` reward scores 0 unless the completion has a \\boxed{} (or "#### N") answer. Instruct
models often end with "The answer is 3/4." instead; `math_any` reads the completion with math-verify's
default extraction (a \\boxed{} first, then "final answer is ...", then the last LaTeX or plain
expression) and checks it against the gold like `math`. A looser reward: use it to evaluate or to start
a model that does not box yet, and say so when reporting numbers (they are not the paper's metric).
"""

from __future__ import annotations

import functools

from hadw.rewards.verifiers import _math_verify, _parse_gold


@functools.cache
def _parse_any():
    import math_verify
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    _math_verify()  # quiets math-verify's logger once per process
    config = [LatexExtractionConfig(), ExprExtractionConfig()]  # math-verify's defaults
    return functools.partial(math_verify.parse, extraction_config=config, parsing_timeout=None)


def math_any_item(completion: str, answer: str) -> float:
    """1 if the answer math-verify extracts from the completion (boxed or not) equals the gold, else 0."""
    predicted = _parse_any()(completion)
    if not predicted:
        return 0.0
    _, verify = _math_verify()
    gold = _parse_gold(answer)
    if not gold:  # an unparsable gold: compare the extracted string, whitespace removed
        return float("".join(str(predicted[-1]).split()) == "".join(answer.split()))
    return float(verify(gold, predicted))
