"""What a reward's score may be and how an item fails: the kinds of failure, `check_score`, `item_failure`.

The bottom of hadw.rewards: the in-process runner (hadw.rewards.base) and the verifier pool's workers
(hadw.rewards.pool) both judge a score and name a failure with these, and neither imports the other for it (the
pool once imported them back from base, which imports the pool: an import circle; tests/test_layers.py).
Importing this module imports nothing but the standard library (each pool worker imports it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FLOAT32_MAX = 3.4028234663852886e38  # the largest float32: the trainer's reward tensors

# How an item of a reward can fail; a failed item scores 0 and is counted under its kind, never raised.
TIMEOUT = "timeout"  # no result within reward.timeout_s
RAISED = "raised"  # the function raised an exception
EXITED = "exit"  # the function called sys.exit / os._exit (caught: it cannot end the trainer)
NON_FINITE = "nan/inf"  # the score is NaN or infinite
NONE = "None"  # the score is None
NOT_A_NUMBER = "not a number"  # the score is a string, a list, ...
WRONG_LENGTH = "wrong length"  # a batch function returned another number of scores than items
OUT_OF_RANGE = "out of range"  # a correctness score that is not 0 or 1
ERROR_KINDS = (TIMEOUT, RAISED, EXITED, NON_FINITE, NONE, NOT_A_NUMBER, WRONG_LENGTH, OUT_OF_RANGE)


class ScoreError(ValueError):
    """An item's score is unusable; `kind` is one of ERROR_KINDS."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class RewardExit(BaseException):
    """Raised in place of os._exit inside a reward thread or a pool worker's call (it cannot end the process)."""


@dataclass(frozen=True)
class ItemError:
    """One failed item: its row (index into the batch), the kind (ERROR_KINDS) and the message."""

    row: int
    kind: str
    message: str


def check_score(value: object) -> float:
    """A finite float, else ScoreError naming the kind (None, not a number, NaN / inf)."""
    if value is None:
        raise ScoreError(NONE, "score is None")
    if not isinstance(value, int | float) and not hasattr(value, "__float__"):  # bool, numpy and 0-d tensors pass
        raise ScoreError(NOT_A_NUMBER, f"score is a {type(value).__name__} ({str(value)[:60]!r}), not a number")
    try:
        score = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError) as e:
        raise ScoreError(NOT_A_NUMBER, f"score {str(value)[:60]!r} is not a number ({e})") from None
    if not math.isfinite(score):
        raise ScoreError(NON_FINITE, f"score is {score} (scores must be finite)")
    if abs(score) > FLOAT32_MAX:  # the rewards are float32 tensors: 1e39 would become inf there
        raise ScoreError(NON_FINITE, f"score {score:g} overflows float32 to inf (scores must be within ±3.4e38)")
    return score


def item_failure(row: int, err: BaseException) -> ItemError:
    """The ItemError of an exception raised while scoring item `row`."""
    if isinstance(err, ScoreError):
        return ItemError(row, err.kind, str(err))
    if isinstance(err, SystemExit | RewardExit):
        what = "sys.exit" if isinstance(err, SystemExit) else "os._exit"
        return ItemError(row, EXITED, f"{what}({err.args[0] if err.args else ''}) inside the reward (caught)")
    return ItemError(row, RAISED, f"{type(err).__name__}: {err}"[:500])
