"""HA-DW for verl: the `grpo_hadw` advantage estimator, its anchor checkpointing, a registration check.

    estimator.py   `grpo_hadw` (importing it registers it in verl.trainer.ppo.core_algos)
    checkpoint.py  HADWCheckpointCallback (trainer.checkpoint_callback_class), save_anchor / load_anchor
    tracking.py    the estimator's hadw/* metrics into verl's Tracking.log (its step, its backends)

verl imports the estimator by itself through the `verl.plugins` entry point this package declares
(verl ≥ 0.9), or through `VERL_USE_EXTERNAL_MODULES=hadw.integrations.verl.estimator` (older verl).
verl swallows plugin import errors, so run `python -m hadw.integrations.verl` (`check_registered()`)
before launching. This file imports nothing from verl, so the check can report why verl fails.
"""

from __future__ import annotations

import importlib

ESTIMATOR_NAME = "grpo_hadw"


def check_registered() -> str:
    """Import verl as its trainer does and confirm `grpo_hadw` is in its advantage-estimator registry.

    Raises RuntimeError with the real cause (verl hides plugin import errors); returns a one-line report.
    """
    try:
        verl = importlib.import_module("verl")
        core_algos = importlib.import_module("verl.trainer.ppo.core_algos")
    except ImportError as e:
        raise RuntimeError(f"verl is not importable here ({e}); install it: scripts/setup_verl.sh or pip") from e
    if ESTIMATOR_NAME not in core_algos.ADV_ESTIMATOR_REGISTRY:
        try:
            importlib.import_module("hadw.integrations.verl.estimator")
        except Exception as e:
            raise RuntimeError(f"the grpo_hadw plugin fails to import: {type(e).__name__}: {e}") from e
        raise RuntimeError(
            f"verl did not load the {ESTIMATOR_NAME!r} plugin (it imports fine). Reinstall hadw so its "
            "verl.plugins entry point exists (`pip install -e .`), check VERL_USE_EXTERNAL_PLUGINS is not "
            "'none', or set VERL_USE_EXTERNAL_MODULES=hadw.integrations.verl.estimator."
        )
    return f"{ESTIMATOR_NAME} is registered in verl {getattr(verl, '__version__', '?')}"
