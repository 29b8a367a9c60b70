"""FusedDecoder: the one-token decode step of a Llama / Qwen2 model in ~16 torch ops per layer.

Why: on a CPU a small model's decode step is bound by per-op overhead, not by FLOPs. transformers'
forward spends ~40 ops per layer (separate q/k/v and gate/up projections, rotate_half built from
slices and a cat, a growing DynamicCache that copies every step, a causal mask rebuilt every step).
This module runs the same maths on the same weights with fewer, larger ops:

    per layer:  rms_norm -> one fused q|k|v linear -> RoPE on q and k together (index_select + addcmul)
                -> write k, v into a preallocated cache -> attention (baddbmm, softmax, bmm; the g query
                heads that share a kv head ride in one matrix, so no repeat_kv) -> o_proj + residual in
                one addmm -> rms_norm -> one fused gate|up linear -> silu * up -> down + residual (addmm)

The prefill runs on the same fused weights: each distinct prompt once (the G rows of a group share it),
all its columns at a time, with torch's SDPA for the causal attention; its K/V go straight into every
row's cache (x1.1-1.3 less CPU time than transformers' forward plus a copy into the cache, measured on
the benchmark models at 16 and 128 prompt tokens; packed weights serve both). The fused weights are
concatenated copies made once per `generate` call (the trainer changes the weights between calls; LoRA
adapters are merged into these copies; under bf16 autocast the projections are cast to bf16 here, once). Each
large enough weight is packed for oneDNN's linear instead of F.linear where that is measured faster on this CPU
for this shape and row count (`packing_pays`: x1.1 on the 5.6 M benchmark model, x1.56 on Qwen2.5-0.5B's shapes
at 64 rows on an AVX-512 core; x1.7-2.6 on SmolLM2-135M's at 8-32 rows on a Sapphire Rapids core).
Results equal transformers' up to float rounding; tests check the prefill's logits against the model's
forward, the sampled log-probs against a teacher-forced re-scoring (`compute_logprobs`) to 1e-5 and
greedy tokens exactly.

Supported: `LlamaForCausalLM` / `Qwen2ForCausalLM` with plain `nn.Linear` layers, SiLU MLP, full
attention on every layer (no sliding window); any RoPE type (the model's own rotary module computes
cos/sin). Also such a model wrapped by peft with LoRA adapters on its linear layers (hadw's
`model.lora.*`): each projection's fused weight is then W + sum of `get_delta_weight(a)` over the active
adapters (`linear_weights`), W alone where the adapters are switched off (`reference_policy`) or merged,
computed into the copies the fused weights are anyway; the model's own weights are never written (no peft
merge/unmerge: a crash between the two would leave the training weights changed, and W + d - d is not W
in floats). Anything else (DoRA and other LoRA variants, other adapter types, quantised layers, other
architectures) -> `fused_unsupported` says why and the engine uses transformers' forward.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from hadw.rollout.logprobs import position_ids_from_mask

SUPPORTED_TYPES = ("llama", "qwen2")


def causal_lm(model: nn.Module) -> nn.Module:
    """The transformers causal LM inside `model`: a peft model's base model (its LoRA layers sit inside), else
    `model`. (A PeftModel's own `.model` is peft's LoraModel, not transformers' decoder body.)"""
    return model.get_base_model() if _is_peft(model) else model


def _is_peft(model: nn.Module) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def _is_peft_module(module: nn.Module) -> bool:
    return type(module).__module__.startswith("peft.")


def fused_unsupported(model: nn.Module) -> str | None:
    """None if FusedDecoder can run `model`, else a short reason why not.

    A peft model is supported when it wraps a supported Llama / Qwen2 and every peft layer in it is a plain LoRA
    Linear over an nn.Linear projection (the adapters are then merged into the fused weights exactly:
    `linear_weights`); DoRA and the other LoRA variants, other adapter types (prompt tuning, IA3, ...), LoRA on
    the embeddings and wrapped heads or embeddings (modules_to_save) are refused.
    """
    if _is_peft(model):
        reason = _peft_unsupported(model)
        if reason:
            return reason
        model = model.get_base_model()
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED_TYPES:
        return f"model_type {getattr(cfg, 'model_type', None)!r} is not one of {SUPPORTED_TYPES}"
    if type(model).__name__ not in ("LlamaForCausalLM", "Qwen2ForCausalLM"):
        return f"{type(model).__name__} is not LlamaForCausalLM / Qwen2ForCausalLM (wrapped or subclassed)"
    if getattr(cfg, "hidden_act", None) != "silu":
        return f"hidden_act {cfg.hidden_act!r} is not 'silu'"
    if any(kind != "full_attention" for kind in getattr(cfg, "layer_types", None) or []):
        return "a layer uses sliding-window attention"
    if getattr(cfg, "use_sliding_window", False):
        return "use_sliding_window is on"
    for name, module in model.named_modules():
        if name.endswith(("_proj", "lm_head")):
            reason = _linear_unsupported(module)
            if reason:
                return f"{name} {reason}"
        elif _is_peft_module(module) and not _is_peft_module(_parent(model, name)):
            return f"{name} is a peft {type(module).__name__} (only LoRA on linear projections is merged)"
    return None


def _parent(model: nn.Module, name: str) -> nn.Module:
    """The module holding submodule `name` ("" for the root's children)."""
    return model.get_submodule(name.rpartition(".")[0])


def _peft_unsupported(model: nn.Module) -> str | None:
    """None if `model`'s peft adapters are all LoRA (the kind `linear_weights` merges), else why not."""
    kinds = {str(getattr(c.peft_type, "value", c.peft_type)) for c in model.peft_config.values()}
    if kinds != {"LORA"}:
        return f"peft adapter type(s) {sorted(kinds)}: only LoRA is merged into the fused weights"
    return None


def _linear_unsupported(module: nn.Module) -> str | None:
    """None if `linear_weights` gives `module`'s effective weight exactly, else why not (no name)."""
    if type(module) is nn.Linear:
        return None
    if not _is_peft_module(module):
        return f"is a {type(module).__name__}, not a plain nn.Linear"
    from peft.tuners.lora.layer import Linear as LoraLinear  # peft is installed: the module came from it

    if type(module) is not LoraLinear:  # quantised (bnb, gptq, ...) or another adapter type's layer
        return f"is a peft {type(module).__name__}, not a LoRA Linear"
    if type(module.base_layer) is not nn.Linear:
        return f"is a LoRA Linear over a {type(module.base_layer).__name__}, not over a plain nn.Linear"
    if module.fan_in_fan_out:
        return "is a LoRA Linear with fan_in_fan_out"
    for adapter in _live_adapters(module):
        variant = getattr(module, "lora_variant", {}).get(adapter)  # peft >= 0.16: DoRA, aLoRA, ... live here
        dora = getattr(module, "use_dora", {}).get(adapter, False)
        if variant is not None or dora:
            kind = "DoRA" if dora else type(variant).__name__
            return f"uses {kind} (adapter {adapter!r}): only plain LoRA is merged into the fused weights"
    if module.merged and module.disable_adapters:
        # peft's forward would unmerge in place; W - delta is not the base weight bit for bit either.
        return "holds merged adapters that are switched off (the base weight is not there to read)"
    return None


def _live_adapters(module: nn.Module) -> list[str]:
    """The adapters peft's forward adds on top of the base layer (when not disabled or merged)."""
    return [name for name in module.active_adapters if name in module.lora_A]


def linear_weights(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weight [out, in] and bias [out] (or None) that `module`'s forward applies: y = x W^T + b.

    A plain nn.Linear: its own parameters (no copy). A peft LoRA Linear: what its forward computes, as in peft's
    merge but into new tensors (the model's weights are never written): the base layer's weight plus
    `get_delta_weight(a)` (scaling included) for each active adapter a, and the base bias plus
    lora_B[a].bias * scaling[a] where lora_bias is on; the base layer alone when adapters are disabled
    (`disable_adapter()`, hadw's `reference_policy`) or already merged into it. Dropout is left out (eval).
    """
    if type(module) is nn.Linear:
        return module.weight, module.bias
    reason = _linear_unsupported(module)
    if reason:
        raise ValueError(f"linear_weights: {type(module).__name__} {reason}")
    base = module.base_layer
    weight, bias = base.weight, base.bias
    if module.disable_adapters or module.merged:  # what peft's forward runs: base_layer(x) alone
        return weight, bias
    for adapter in _live_adapters(module):
        weight = weight + module.get_delta_weight(adapter).to(weight.dtype)  # a new tensor: base left alone
        if getattr(module, "lora_bias", {}).get(adapter, False):
            extra = module.lora_B[adapter].bias * module.scaling[adapter]
            bias = extra.to(weight.dtype) if bias is None else bias + extra.to(bias.dtype)
    return weight, bias


def _cat_weights(*linears: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Row-concatenated effective weight [sum(out), in] and bias (None when no layer has one)."""
    pairs = [linear_weights(lin) for lin in linears]
    weight = torch.cat([w for w, _ in pairs])
    if all(b is None for _, b in pairs):
        return weight, None
    biases = [b if b is not None else w.new_zeros(w.shape[0]) for w, b in pairs]
    return weight, torch.cat(biases)


def _cast(t: torch.Tensor | None, dtype: torch.dtype | None) -> torch.Tensor | None:
    """t in dtype (the tensor itself when it already is, or when dtype is None)."""
    return t if t is None or dtype is None else t.to(dtype)


def _softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis. torch's CPU kernel runs rows shorter than one vector register (16
    floats) ~3x slower than these four ops (measured: 121 vs 37 us for [256, 2, 12]); longer rows use it."""
    if scores.shape[-1] >= 16 or scores.device.type != "cpu":
        return scores.softmax(dim=-1, dtype=torch.float32).to(scores.dtype)  # fp32 softmax, as transformers
    x = scores.float()  # a no-op in float32
    e = (x - x.amax(dim=-1, keepdim=True)).exp_()
    return e.div_(e.sum(dim=-1, keepdim=True)).to(scores.dtype)


# When a projection runs through oneDNN's packed linear (the kernel PyTorch's Inductor picks on a CPU) instead of
# F.linear: decided by measuring both, once per weight shape, row count, step count and dtype (`packing_pays`).
# A fixed rule was wrong across CPUs: on an AVX-512 core without bf16 the packed fp32 linear won from ~32 rows
# (x1.08 at 128x768 weights, x2.1 at Qwen2.5-0.5B's 896x9728, 64 rows); on a Sapphire Rapids core it wins from
# 8 rows (x1.7-2.6 at SmolLM2-135M's shapes), and in bf16 by x1.4-2.7 more. Weights under PACK_MIN_WEIGHTS
# elements are never packed (the per-call overhead loses: x0.69 at 128x128) and never timed.
PACK_MIN_WEIGHTS = 96 * 1024
PACKING = "measured"  # "measured" | "always" | "never" (tests and benchmarks force one)


@functools.cache
def packing_available(dtype: torch.dtype = torch.float32) -> bool:
    """Whether this torch build runs oneDNN's packed linear in `dtype`, and gets F.linear's result (checked once)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        with torch.inference_mode():
            weight = torch.linspace(-1, 1, 128).view(8, 16).to(dtype)  # fixed values: the global RNG stays untouched
            x = torch.linspace(-2, 3, 64).view(4, 16).to(dtype)
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, 4)
            y = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        tolerance = 1e-5 if dtype == torch.float32 else 5e-2
        return torch.allclose(y.float(), F.linear(x, weight).float(), atol=tolerance, rtol=tolerance)
    except (RuntimeError, AttributeError, NotImplementedError):  # op missing or not built for this CPU
        return False


def _best_seconds(fn, repeats: int = 5) -> float:
    """The fastest of `repeats` calls (the least disturbed by other work on the machine)."""
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@functools.cache
@torch.inference_mode()
def packing_pays(out_features: int, in_features: int, rows: int, steps: int, dtype: torch.dtype) -> bool:
    """Whether packing a [out, in] weight once and running `steps` calls on `rows` rows through oneDNN's packed
    linear takes less time than `steps` F.linear calls: both timed here, once per process and shape."""
    if not packing_available(dtype):
        return False
    weight = torch.linspace(-1, 1, out_features * in_features).view(out_features, in_features).to(dtype)
    x = torch.linspace(-1, 1, rows * in_features).view(rows, in_features).to(dtype)
    reorder = torch.ops.mkldnn._reorder_linear_weight
    packed = reorder(weight, rows)
    pack_s = _best_seconds(lambda: reorder(weight, rows), 2)
    linear_s = _best_seconds(lambda: F.linear(x, weight))
    packed_s = _best_seconds(lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""))
    return pack_s + steps * packed_s < steps * linear_s


class _Proj:
    """One projection of the decode step, y = x W^T + b [+ residual]. W [out, in], b [out] or None.

    A weight of at least PACK_MIN_WEIGHTS elements (CPU, oneDNN present) is repacked once into oneDNN's blocked
    layout for `rows` rows when that is measured faster over `steps` calls (`packing_pays`); others use W as is.
    The input is cast to W's dtype (mixed precision: bf16 weights, a float32 residual stream), and a
    residual of another dtype is added outside the matmul, so the stream keeps its precision, as under
    autocast, where a bf16 projection's output added to the float32 embedding stream stays float32.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, rows: int, steps: int):
        self.bias, self.dtype = bias, weight.dtype
        pack = PACKING != "never" and weight.numel() >= PACK_MIN_WEIGHTS and weight.device.type == "cpu"
        if pack and PACKING == "always":
            pack = packing_available(weight.dtype)
        elif pack:
            pack = packing_pays(*weight.shape, rows, steps, weight.dtype)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows) if pack else None
        self.weight = None if self.packed is not None else weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dtype)  # a no-op unless the weights are in a lower precision than the stream
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def add_to(self, residual: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """residual + x W^T + b, the add fused into the matmul (when residual is in W's dtype)."""
        if residual.dtype != self.dtype:
            return residual + self(x)  # promotes to the stream's dtype
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise.binary(x, residual, self.packed, self.bias, "add")
        if self.bias is not None:
            residual = residual + self.bias
        return torch.addmm(residual, x, self.weight.t())


@dataclass
class _Layer:
    norm_in: torch.Tensor  # [H]
    qkv: _Proj  # [(nh + 2 nkv) D, H]
    o: _Proj  # [H, nh D]
    norm_post: torch.Tensor  # [H]
    gate_up: _Proj  # [2 I, H]
    down: _Proj  # [H, I]


class FusedDecoder:
    """Decode state for one batch: fused weights, preallocated KV cache, padding bias.

    Build it for the batch's left-padded prompt mask, call `prefill` once, then `step` once per token.
    Shapes: B rows, P prompt columns (left-padded), N = max new tokens, H hidden, D head dim.
    """

    @torch.inference_mode()
    def __init__(
        self,
        model: nn.Module,
        prompt_mask: torch.Tensor,
        max_new_tokens: int,
        dtype: torch.dtype | None = None,
        zero_cache: bool = False,
        matmul_dtype: torch.dtype | None = None,
    ):
        """dtype: the fused weights' and cache's dtype (None: the model's; bfloat16 for mixed precision on
        a GPU, where the copies are made anyway). zero_cache: fill the K/V cache with zeros, for a step
        that reads every column (GraphedDecoder: unwritten columns get probability 0, and 0 x garbage
        could be NaN). matmul_dtype: mixed precision as autocast computes it: the projections' weights, the
        K/V cache and attention in this dtype (cast once, here, not on every step), the embeddings, norms
        and residual stream in `dtype`; run the decoder with autocast off."""
        reason = fused_unsupported(model)  # checked here too: a layer's adapters may have been merged since
        if reason:
            raise ValueError(f"FusedDecoder cannot run this model: {reason}")
        model = causal_lm(model)  # peft: config, embeddings, norms and rotary live on the base model
        cfg = model.config
        core = model.model
        stream_cast = functools.partial(_cast, dtype=dtype)  # embeddings and norms
        cast = functools.partial(_cast, dtype=matmul_dtype) if matmul_dtype is not None else stream_cast  # projections
        self.eps = cfg.rms_norm_eps
        self.num_heads = cfg.num_attention_heads
        self.num_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scale = self.head_dim**-0.5
        self.inter = cfg.intermediate_size
        self.embed = stream_cast(core.embed_tokens.weight)  # [V, H]
        self.final_norm = stream_cast(core.norm.weight)
        batch, prompt_len = prompt_mask.shape
        steps = max_new_tokens + 1  # calls of each projection: the prefill, then a step per new token
        self.lm_head = _Proj(*map(cast, linear_weights(model.lm_head)), batch, steps)
        self.layers = [self._fuse(layer, batch, steps, cast, stream_cast) for layer in core.layers]

        total = prompt_len + max_new_tokens
        d, kv = self.head_dim, self.num_kv
        # K and V of every layer in one buffer: [L, 2, B * nkv, T, D]; rows x kv-heads flattened for bmm.
        dtype = self.lm_head.dtype  # the projections' (K and V come out of them)
        # Columns are read only once written (prefill or step), so the buffer needs no zero fill.
        shape = (len(self.layers), 2, batch * kv, total, d)
        self.cache = self.embed.new_zeros(shape) if zero_cache else self.embed.new_empty(shape, dtype=dtype)
        self.prompt_mask = prompt_mask
        # Additive attention bias over cache columns: -inf on the prompt's left padding, 0 elsewhere.
        bias = torch.zeros((batch, total), dtype=torch.float32, device=prompt_mask.device)
        bias[:, :prompt_len].masked_fill_(prompt_mask == 0, float("-inf"))
        self.bias = bias.repeat_interleave(kv, dim=0)[:, None, :].to(dtype)  # [B * nkv, 1, T]
        self.length = 0  # cache columns filled (the prompt's, once prefilled)
        # RoPE tables for every position this batch can reach, from the model's own rotary module (so any
        # rope_type / scaling applies); rotate_half(x) * sin == x.roll(D/2) * (sign * sin): one op, no cat.
        self.half = d // 2
        positions = torch.arange(int(prompt_mask.sum(1).max()) + max_new_tokens, device=prompt_mask.device)
        cos, sin = core.rotary_emb(self.embed[:1][None], positions[None])  # [1, positions, D] each
        sign = torch.ones(d, dtype=cos.dtype, device=cos.device)
        sign[: self.half] = -1
        self.cos, self.sin = cos[0].to(dtype), (sin[0] * sign).to(dtype)  # [positions, D], q and k's dtype

    @staticmethod
    def _fuse(layer: nn.Module, rows: int, steps: int, cast, stream_cast) -> _Layer:
        attn, mlp = layer.self_attn, layer.mlp
        return _Layer(
            norm_in=stream_cast(layer.input_layernorm.weight),
            qkv=_Proj(*map(cast, _cat_weights(attn.q_proj, attn.k_proj, attn.v_proj)), rows, steps),
            o=_Proj(*map(cast, linear_weights(attn.o_proj)), rows, steps),
            norm_post=stream_cast(layer.post_attention_layernorm.weight),
            gate_up=_Proj(*map(cast, _cat_weights(mlp.gate_proj, mlp.up_proj)), rows, steps),
            down=_Proj(*map(cast, linear_weights(mlp.down_proj)), rows, steps),
        )

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """RoPE on heads x [..., heads, D] with tables [..., 1, D]: x cos + rotate_half(x) sin, the sign in sin."""
        return torch.addcmul(x * cos, x.roll(self.half, -1), sin)

    def _mlp(self, w: _Layer, h: torch.Tensor) -> torch.Tensor:
        """h + down(silu(gate) * up) of rms_norm(h), the residual add fused into down. h: [rows, H]."""
        gate_up = w.gate_up(F.rms_norm(h, (h.shape[-1],), w.norm_post, self.eps))  # [rows, 2 I]
        return w.down.add_to(h, F.silu(gate_up[:, : self.inter]) * gate_up[:, self.inter :])

    @torch.inference_mode()
    def prefill(self, prompt_ids: torch.Tensor, first: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
        """Run each distinct prompt once and fill every row's cache with its K/V.

        prompt_ids: [B, P] (this batch's rows, left-padded); first [U]: a row of each distinct prompt; inverse
        [B]: row -> its prompt (`prompt_groups`). Returns next-token logits [B, V] at the last prompt column.
        """
        ids, mask = prompt_ids[first], self.prompt_mask[first]  # [U, P]
        (prompts, width), batch = ids.shape, prompt_ids.shape[0]
        nh, kv, d, hidden = self.num_heads, self.num_kv, self.head_dim, self.embed.shape[1]
        positions = position_ids_from_mask(mask)
        cos, sin = self.cos[positions][:, :, None], self.sin[positions][:, :, None]  # [U, P, 1, D] each
        # A column attends to the real columns up to itself. A padding column attends to itself alone, which
        # keeps its softmax finite; its K/V are masked out of every real column's attention, here and later.
        causal = torch.ones(width, width, dtype=torch.bool, device=ids.device).tril()
        allowed = (causal & mask[:, None, :].bool()) | torch.eye(width, dtype=torch.bool, device=ids.device)
        allowed = allowed[:, None]  # [U, 1, P, P], broadcast over heads
        h = F.embedding(ids, self.embed).view(prompts * width, hidden)  # [U P, H]
        for i, w in enumerate(self.layers):
            x = F.rms_norm(h, (hidden,), w.norm_in, self.eps)
            qkv = w.qkv(x).view(prompts, width, nh + 2 * kv, d)
            qk = self._rope(qkv[:, :, : nh + kv], cos, sin)
            q, k, v = qk[:, :, :nh].transpose(1, 2), qk[:, :, nh:].transpose(1, 2), qkv[:, :, nh + kv :].transpose(1, 2)
            self.cache[i, 0, :, :width].view(batch, kv, width, d).copy_(k.index_select(0, inverse))  # [B, nkv, P, D]
            self.cache[i, 1, :, :width].view(batch, kv, width, d).copy_(v.index_select(0, inverse))
            if nh != kv:  # each kv head serves its g query heads (SDPA's enable_gqa needs torch >= 2.5)
                k, v = k.repeat_interleave(nh // kv, dim=1), v.repeat_interleave(nh // kv, dim=1)
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=self.scale)
            h = self._mlp(w, w.o.add_to(h, attn.transpose(1, 2).reshape(prompts * width, nh * d)))  # [U P, H]
        self.length = width
        last = h.view(prompts, width, hidden)[:, -1]  # left padding: the last column is every prompt's last token
        return self.lm_head(F.rms_norm(last, (hidden,), self.final_norm, self.eps))[inverse]  # [B, V]

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Feed one token per row. tokens, positions: [B] long. Returns next-token logits [B, V]."""
        batch = tokens.shape[0]
        nh, kv, d = self.num_heads, self.num_kv, self.head_dim
        group = nh // kv
        col = self.length
        self.length += 1
        h = F.embedding(tokens, self.embed)  # [B, H]
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # [B, 1, D] each
        bias = self.bias[:, :, : col + 1]  # [B * nkv, 1, col + 1]
        for i, w in enumerate(self.layers):
            x = F.rms_norm(h, (h.shape[-1],), w.norm_in, self.eps)
            qkv = w.qkv(x)  # [B, (nh + 2 nkv) D]
            qk = qkv[:, : (nh + kv) * d].view(batch, nh + kv, d)
            qk = self._rope(qk, cos, sin)  # RoPE on q and k at once
            keys, values = self.cache[i, 0], self.cache[i, 1]  # [B * nkv, T, D]
            keys[:, col] = qk[:, nh:].reshape(batch * kv, d)
            values[:, col] = qkv[:, (nh + kv) * d :].reshape(batch * kv, d)
            q = qk[:, :nh].reshape(batch * kv, group, d)  # the g heads sharing a kv head: one matrix
            scores = torch.baddbmm(bias, q, keys[:, : col + 1].transpose(1, 2), alpha=self.scale)
            probs = _softmax(scores)  # [B * nkv, g, col + 1]
            attn = torch.bmm(probs, values[:, : col + 1]).view(batch, nh * d)
            h = self._mlp(w, w.o.add_to(h, attn))  # [B, H]
        h = F.rms_norm(h, (h.shape[-1],), self.final_norm, self.eps)
        return self.lm_head(h)  # [B, V]
