"""`hadw sim`: GRPO ± HA-DW on a simulated prompt population (see docs/sim.md)."""

from hadw.sim.core import SimConfig, group_baseline_bias, simulate

__all__ = ["SimConfig", "group_baseline_bias", "simulate"]
