"""hadw: RLVR for language models with History-Aware Adaptive Difficulty Weighting (arXiv 2601.08521)."""

__version__ = "0.3.0"
