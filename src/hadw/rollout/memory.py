"""How many rows one generate chunk may hold: the KV cache and the logits a chunk needs, against a budget.

A probe of 8 prompts × 136 samples × 2048 new tokens on a 135 M model asked for 106 GB in one chunk. Every
generating caller (eval, probe, SFT's evaluation, the trainer's rollouts) goes through HFRolloutEngine, which
splits its rows into chunks of at most `rows_per_chunk(...)` rows.
"""

from __future__ import annotations

import os

import torch

# The share of the memory available when generation starts that one chunk may use: the rest is the weights'
# working set, the allocator's slack and whatever else runs (a training step's graph lives elsewhere in time).
BUDGET_FRACTION = 0.5


def available_bytes(device: torch.device) -> int:
    """Free memory on `device`: the GPU's free bytes, or the host's MemAvailable (Linux) / physical memory."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def bytes_per_row(config, total_len: int, dtype_bytes: int) -> int:
    """Peak bytes one generated row costs: its K/V cache over `total_len` positions (prompt + new tokens),
    plus its logits row in float32, counted four times (logits, the temperature-scaled copy, the softmax and
    the sort of top-p)."""
    layers = config.num_hidden_layers
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv = 2 * layers * kv_heads * head_dim * total_len * dtype_bytes
    return kv + 4 * config.vocab_size * 4


def rows_per_chunk(model, total_len: int, budget_bytes: int | None = None) -> int:
    """The most rows a chunk of `total_len` positions may hold within `budget_bytes` (None: half of what is
    available now); at least 1, so a single huge row still runs (and fails loudly if it cannot)."""
    param = next(model.parameters())
    if budget_bytes is None:
        budget_bytes = int(available_bytes(param.device) * BUDGET_FRACTION)
    dtype_bytes = max(param.element_size(), 2)
    return max(1, budget_bytes // max(1, bytes_per_row(model.config, total_len, dtype_bytes)))
