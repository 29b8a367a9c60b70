"""Experiments built from the floors below: multi-seed comparisons, the demo, plots of runs."""
