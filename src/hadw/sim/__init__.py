"""`hadw sim`: GRPO ± HA-DW on a simulated prompt population whose true success rates are known."""

from typing import TYPE_CHECKING

from hadw.lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and IDEs; at run time each name is imported on first use
    from hadw.sim.engine import ARMS, SimResult, SimSettings, simulate

# Lazy: `hadw sim` is registered at every `hadw` start-up, and the engine imports torch.
__getattr__, __dir__ = lazy_exports(
    __name__, {"ARMS": "engine", "SimResult": "engine", "SimSettings": "engine", "simulate": "engine"}
)

__all__ = ["ARMS", "SimResult", "SimSettings", "simulate"]
