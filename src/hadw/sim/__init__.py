"""`hadw sim`: GRPO ± HA-DW on a simulated prompt population whose true success rates are known."""

from hadw.sim.engine import ARMS, SimResult, SimSettings, simulate

__all__ = ["ARMS", "SimResult", "SimSettings", "simulate"]
