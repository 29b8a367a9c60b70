"""Reward shaping that depends only on response lengths (DAPO's overlong handling)."""

from __future__ import annotations

import torch


def overlong_penalty(lengths: torch.Tensor, max_length: int, buffer: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment, ≤ 0, added to the total reward (never to correctness).

    lengths: [N] response lengths in tokens. With L_max = max_length and L_cache = buffer:
        0                                   if |o| ≤ L_max − L_cache
        factor · ((L_max − L_cache) − |o|) / L_cache   if L_max − L_cache < |o| ≤ L_max
        −factor                             beyond L_max
    """
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    free = max_length - buffer
    over = (lengths.to(torch.float32) - free).clamp(min=0, max=buffer)
    return -factor * over / buffer
