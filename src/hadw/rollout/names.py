"""What a config names for the rollout side, checked without torch or transformers: config validation and the
engine=trl parent (which only launches the workers that load them) run before anything heavy is imported."""

import re
from pathlib import Path

DECODERS = ("auto", "fused", "graph", "hf")  # rollout.decoder's values (hadw.rollout.engine implements them)
COMPUTE_DTYPES = ("float32", "bfloat16", "auto")  # model.compute_dtype's values (hadw.rollout.precision)

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def is_hub_id(name: str | Path) -> bool:
    """ORG/NAME or NAME (letters, digits, . _ -): what could name a Hub repository."""
    return bool(_HUB_ID.fullmatch(str(name))) and str(name).count("/") <= 1
