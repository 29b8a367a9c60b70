"""Adapters that switch HA-DW on inside other trainers: `trl` (GRPOTrainer) and `verl` (the grpo_hadw estimator)."""
