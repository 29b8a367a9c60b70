"""`hadw/*` metrics into verl's own logger (wandb, tensorboard, mlflow, file, console), with verl's step.

verl 0.9 logs one dict per training step through `verl.utils.tracking.Tracking.log(data, step)` (the legacy
`RayPPOTrainer.fit` and the v1 trainer alike) and fills that dict itself: an advantage estimator's API is
tensors in, `(advantages, returns)` out, and neither trainer has a hook between the two. Both call the
estimator in the driver process and then, in the same process, log the step. So the estimator leaves its
metrics here (`offer`) and the next `Tracking.log` call adds them to its dict (`hook_tracking`, a wrapper
around that one method, installed once when grpo_hadw first runs; `algorithm.hadw.log_to_tracker=false`
leaves verl's class untouched). The step is verl's own: the call that logs the step whose advantages these are.
"""

from __future__ import annotations

import functools
from typing import Any

_PENDING: dict[str, float] = {}
_HOOKED = "_hadw_hooked"  # set on the wrapper: one wrapper, however often hook_tracking is called


def offer(metrics: dict[str, float]) -> None:
    """The estimator's metrics of this step, to go into the next `Tracking.log` call (replacing unlogged ones:
    a step whose log never came, e.g. verl's critic warm-up, is not carried into the next step's)."""
    _PENDING.clear()
    _PENDING.update({k: float(v) for k, v in metrics.items()})


def take() -> dict[str, float]:
    """What is pending, emptied."""
    taken = dict(_PENDING)
    _PENDING.clear()
    return taken


def hook_tracking() -> bool:
    """Wrap `verl.utils.tracking.Tracking.log` so that it logs the pending hadw/* metrics with the step it is
    given. Keys verl already put in the dict win. Returns False when verl has no such class (nothing done)."""
    try:
        from verl.utils.tracking import Tracking
    except ImportError:
        return False
    if getattr(Tracking.log, _HOOKED, False):
        return True
    original = Tracking.log

    @functools.wraps(original)
    def log(self: Any, data: dict, step: int, backend: Any = None) -> Any:
        pending = take()
        if pending:
            data = {**pending, **data}
        return original(self, data=data, step=step, backend=backend)

    setattr(log, _HOOKED, True)
    Tracking.log = log
    return True
