"""GraphedDecoder: FusedDecoder's one-token step with static shapes, replayed as one CUDA graph.

Why: on a GPU a small model's decode step is bound by kernel launches, not by the card. transformers'
forward for a 135 M-shaped Llama (30 layers) launches ~1,200 kernels a token from Python: 26 ms a step on
an H200 for 64 rows (measured once, issue 26), where the weights (0.27 GB in bf16) and the K/V stream in
well under a millisecond.
A CUDA graph records the step's ~500 kernels once and replays them with one launch.

A graph replays fixed kernels on fixed memory, so the step may have no shape or Python value that
changes from token to token. Compared with `FusedDecoder.step`:
- the new token, its position and the cache column are copied into static buffers before each replay;
- K and V are written with `index_copy_` at the column held in a tensor (not a Python slice);
- attention reads every column of the cache [B * nkv, T, D]; columns not yet written carry -inf in the
  additive bias (and are zero-filled, so 0 x garbage cannot make a NaN), and the step unmasks its own
  column with `index_fill_`. The extra columns cost bytes, not launches: T = prompt + max new tokens.
The prefill (once per batch, varying shapes) runs eagerly through FusedDecoder. One graph is captured per
`generate` chunk (the trainer changes the weights between calls, and the fused weights are copies made
per call): capturing costs about one eager step. Off a GPU the same static step runs eagerly, which is
what the CPU tests compare with FusedDecoder.step.

On a GPU the fused weights are made in the compute dtype (autocast's, when the trainer runs the rollout
under `model.compute_dtype=bfloat16`; else the model's), and the step runs with autocast off, so the
eager and the replayed step compute the same thing. benchmarks/speed/rollout_gpu.py measures it against
transformers' forward, FusedDecoder eager and `model.generate`; scripts/gpu_check.sh runs that and the CUDA
tests. Not yet run on a GPU (none was lent since this was written), so the engine uses it only when asked
(`rollout.decoder=graph`); the static step's maths is tested on a CPU against FusedDecoder and transformers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hadw.rollout.fused import FusedDecoder, _softmax

USE_CUDA_GRAPHS = True  # False: the static step runs eagerly on a GPU too (tests compare the two)


def compute_dtype(model: nn.Module, device: torch.device) -> torch.dtype:
    """The dtype a forward of `model` computes in here: autocast's when it is on for `device`, else the model's."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return next(model.parameters()).dtype


class GraphedDecoder:
    """Decode state for one batch (as FusedDecoder), stepping through a CUDA graph on a GPU.

    Build it for the batch's left-padded prompt mask [B, P], call `prefill` once, then `step` once per
    token (at most max_new_tokens times). Shapes: B rows, T = P + max_new_tokens cache columns, V vocabulary.
    """

    @torch.inference_mode()
    def __init__(self, model: nn.Module, prompt_mask: torch.Tensor, max_new_tokens: int):
        device = prompt_mask.device
        dtype = compute_dtype(model, device)
        self.fused = FusedDecoder(model, prompt_mask, max_new_tokens, dtype=dtype, zero_cache=True)
        batch, prompt_len = prompt_mask.shape
        # Response columns start masked; each step unmasks the column it writes.
        self.fused.bias[:, :, prompt_len:] = float("-inf")  # [B * nkv, 1, T]
        self.tokens = torch.zeros(batch, dtype=torch.long, device=device)  # static inputs of the step
        self.positions = torch.zeros(batch, dtype=torch.long, device=device)
        self.column = torch.zeros(1, dtype=torch.long, device=device)
        self.use_graph = device.type == "cuda" and USE_CUDA_GRAPHS
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None  # [B, V]: the graph's output buffer

    def prefill(self, prompt_ids: torch.Tensor, first: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
        """See FusedDecoder.prefill (eager: once per batch). Returns next-token logits [B, V]."""
        with torch.autocast(prompt_ids.device.type, enabled=False):
            return self.fused.prefill(prompt_ids, first, inverse)

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Feed one token per row. tokens, positions: [B] long. Returns next-token logits [B, V].

        On a GPU the returned tensor is the graph's output buffer: read it before the next step.
        """
        self.tokens.copy_(tokens)
        self.positions.copy_(positions)
        self.column.fill_(self.fused.length)
        self.fused.length += 1
        with torch.autocast(tokens.device.type, enabled=False):
            if not self.use_graph:
                return self._static_step()
            if self.graph is None:
                self._capture()
            self.graph.replay()
        return self.logits

    def _capture(self) -> None:
        """Record the step as a graph. The warm-up on a side stream (cuBLAS handles, workspaces) computes
        the same step as the first replay, and writes the same cache column, so running it twice is harmless."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._static_step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self._static_step()

    def _static_step(self) -> torch.Tensor:
        """The step of FusedDecoder.step with no shape or Python value that changes between tokens."""
        f = self.fused
        batch = self.tokens.shape[0]
        nh, kv, d = f.num_heads, f.num_kv, f.head_dim
        group = nh // kv
        f.bias.index_fill_(2, self.column, 0.0)  # this column now holds every row's key
        h = F.embedding(self.tokens, f.embed)  # [B, H]
        cos = f.cos.index_select(0, self.positions)[:, None]  # [B, 1, D]
        sin = f.sin.index_select(0, self.positions)[:, None]
        for i, w in enumerate(f.layers):
            x = F.rms_norm(h, (h.shape[-1],), w.norm_in, f.eps)
            qkv = w.qkv(x)  # [B, (nh + 2 nkv) D]
            qk = f._rope(qkv[:, : (nh + kv) * d].view(batch, nh + kv, d), cos, sin)
            keys, values = f.cache[i, 0], f.cache[i, 1]  # [B * nkv, T, D]
            keys.index_copy_(1, self.column, qk[:, nh:].reshape(batch * kv, 1, d))
            values.index_copy_(1, self.column, qkv[:, (nh + kv) * d :].reshape(batch * kv, 1, d))
            q = qk[:, :nh].reshape(batch * kv, group, d)
            scores = torch.baddbmm(f.bias, q, keys.transpose(1, 2), alpha=f.scale)  # [B * nkv, g, T]
            attn = torch.bmm(_softmax(scores), values).view(batch, nh * d)
            h = f._mlp(w, w.o.add_to(h, attn))  # [B, H]
        h = F.rms_norm(h, (h.shape[-1],), f.final_norm, f.eps)
        return f.lm_head(h)  # [B, V]
