"""FusedDecoder (issue 13.3): the fused decode loop samples what transformers' forward samples.

Checked on Qwen2 and Llama shapes that exercise every branch of the fused maths: GQA groups of 1, 2
and 4, q/k/v biases (Qwen2), attention and MLP biases (Llama), an explicit head_dim != hidden/heads,
llama3 RoPE scaling, left padding, stop tokens. The reference is a teacher-forced re-scoring through
transformers' own forward (`compute_logprobs`), and the sampled tokens of the `hf` decoder.
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from hadw.rollout import (
    FusedDecoder,
    HFRolloutEngine,
    SamplingParams,
    build_tiny_tokenizer,
    compute_logprobs,
    fused_unsupported,
)
from hadw.rollout import engine as engine_module
from hadw.rollout import fused as fused_module
from hadw.rollout import graphed as graphed_module
from hadw.rollout.logprobs import position_ids_from_mask
from hadw.rollout.sampling import draw

QUESTIONS = ["1+1=", "What is 12*3? Put the answer in \\boxed{}.", "7/8", "1+1="]  # lengths differ; one repeats

SHAPES = {
    "qwen2-gqa2": (Qwen2Config, dict(num_attention_heads=4, num_key_value_heads=2)),
    "qwen2-mha": (Qwen2Config, dict(num_attention_heads=4, num_key_value_heads=4)),
    "llama-gqa4-biases-headdim": (
        LlamaConfig,
        dict(num_attention_heads=8, num_key_value_heads=2, head_dim=24, attention_bias=True, mlp_bias=True),
    ),
    "llama3-rope": (
        LlamaConfig,
        dict(
            num_attention_heads=4,
            num_key_value_heads=1,
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=10000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
        ),
    ),
}


def make_model(name: str, **extra):
    config_cls, kwargs = SHAPES[name]
    tok = build_tiny_tokenizer()
    config = config_cls(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        **kwargs,
        **extra,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # biases and norms away from their init, so a dropped term would show
        for name_, p in model.named_parameters():
            if name_.endswith("bias") or "norm" in name_:
                p.add_(0.3 * torch.randn_like(p))
    return model, tok


def prompts_of(tok) -> list[list[int]]:
    return [tok(q).input_ids for q in QUESTIONS]


@pytest.fixture(scope="module", params=list(SHAPES))
def model_tok(request):
    return make_model(request.param)


def set_packing(monkeypatch, pack: str) -> None:
    """ "all": every projection (LM head included) through oneDNN's packed linear, as real-size weights and
    batches take it; "none": MKL's F.linear for all. The test models and batches are below the thresholds."""
    monkeypatch.setattr(fused_module, "PACK_MIN_WEIGHTS", 0 if pack == "all" else 10**12)
    monkeypatch.setattr(fused_module, "PACKING", "always" if pack == "all" else "never")


@pytest.mark.parametrize("decoder", ["fused", "graph"])
@pytest.mark.parametrize("pack", ["none", "all"])
@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_fused_logprobs_equal_teacher_forcing_and_tokens_equal_hf(model_tok, temperature, pack, decoder, monkeypatch):
    # "graph" on a CPU runs GraphedDecoder's static-shape step eagerly: the maths the CUDA graph records.
    set_packing(monkeypatch, pack)
    model, tok = model_tok
    assert fused_unsupported(model) is None
    params = SamplingParams(n=3, temperature=temperature, max_new_tokens=20, seed=5)
    fused = HFRolloutEngine(model, tok, decoder=decoder).generate(prompts_of(tok), params)
    hf = HFRolloutEngine(model, tok, decoder="hf").generate(prompts_of(tok), params)
    with torch.no_grad():
        forced = compute_logprobs(model, fused.input_ids, fused.attention_mask, fused.response_mask, 1.0)
    torch.testing.assert_close(fused.logprobs, forced * fused.response_mask, rtol=0, atol=1e-5)
    assert torch.equal(fused.response_ids, hf.response_ids)
    torch.testing.assert_close(fused.logprobs, hf.logprobs, rtol=0, atol=1e-5)


@pytest.mark.parametrize("pack", ["none", "all"])
def test_fused_step_logits_equal_the_models_forward(pack, monkeypatch):
    # One step, compared on full logits (not just the sampled token's log-prob).
    set_packing(monkeypatch, pack)
    model, _ = make_model("llama-gqa4-biases-headdim")
    ids = torch.tensor([[0, 0, 5, 9, 12], [7, 8, 9, 10, 11]])
    mask = (ids != 0).long()
    with torch.inference_mode():
        decoder = FusedDecoder(model, mask, max_new_tokens=4)
        assert all((p.packed is not None) == (pack == "all") for p in [decoder.lm_head, decoder.layers[0].down])
        logits = decoder.prefill(ids, torch.tensor([0, 1]), torch.tensor([0, 1]))
        prompt_reference = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask))
        nxt = logits.argmax(-1)
        fused_logits = decoder.step(nxt, mask.sum(1))
        full = torch.cat([ids, nxt[:, None]], 1)
        full_mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1)
        reference = model(input_ids=full, attention_mask=full_mask, position_ids=position_ids_from_mask(full_mask))
    torch.testing.assert_close(logits, prompt_reference.logits[:, -1], rtol=0, atol=1e-5)  # the fused prefill
    torch.testing.assert_close(fused_logits, reference.logits[:, -1], rtol=0, atol=1e-5)  # one step on its cache


@pytest.mark.parametrize("decoder", ["hf", "fused"])
def test_prefill_runs_each_distinct_prompt_once(decoder, monkeypatch):
    # 4 prompts (2 identical, but not adjacent groups: each group of 8 rows is prefilled once) -> 4 rows:
    # through the model's forward (hf), or through SDPA once per layer inside FusedDecoder.prefill.
    model, tok = make_model("qwen2-gqa2")
    seen = []
    if decoder == "hf":
        forward = model.forward

        @functools.wraps(forward)  # keeps the signature the engine reads the cache's name from
        def spy(*args, **kwargs):
            if kwargs["input_ids"].shape[1] > 1:  # the prefill; the steps feed one column
                seen.append(kwargs["input_ids"].shape[0])
            return forward(*args, **kwargs)

        monkeypatch.setattr(model, "forward", spy)
    else:
        sdpa = F.scaled_dot_product_attention
        monkeypatch.setattr(
            F, "scaled_dot_product_attention", lambda q, *a, **k: seen.append(len(q)) or sdpa(q, *a, **k)
        )
    HFRolloutEngine(model, tok, decoder=decoder).generate(prompts_of(tok), SamplingParams(n=8, max_new_tokens=3))
    assert seen == [4] * (1 if decoder == "hf" else model.config.num_hidden_layers)


def test_a_torch_without_onednn_packing_decodes_unpacked(monkeypatch):
    # A build whose oneDNN op is missing (or raises) must not break generation: the check fails once and
    # every projection runs through F.linear, sampling what the unpacked decoder samples.
    model, tok = make_model("qwen2-gqa2")
    params = SamplingParams(n=3, max_new_tokens=6, seed=1)
    unpacked = HFRolloutEngine(model, tok, decoder="fused").generate(prompts_of(tok), params)

    def missing(*args, **kwargs):
        raise RuntimeError("mkldnn::_reorder_linear_weight: not available on this build")

    set_packing(monkeypatch, "all")
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", missing)
    fused_module.packing_available.cache_clear()
    try:
        assert not fused_module.packing_available()
        out = HFRolloutEngine(model, tok, decoder="fused").generate(prompts_of(tok), params)
    finally:
        monkeypatch.undo()
        fused_module.packing_available.cache_clear()
    assert torch.equal(out.response_ids, unpacked.response_ids)
    torch.testing.assert_close(out.logprobs, unpacked.logprobs, rtol=0, atol=0)


def test_packed_decoding_leaves_the_global_rng_alone(monkeypatch):
    # The one-off oneDNN check runs inside generate(); like sampling, it must not draw from torch's RNG.
    model, tok = make_model("qwen2-gqa2")
    set_packing(monkeypatch, "all")
    fused_module.packing_available.cache_clear()
    state = torch.get_rng_state()
    HFRolloutEngine(model, tok, decoder="fused").generate(prompts_of(tok), SamplingParams(n=2, max_new_tokens=4))
    assert torch.equal(torch.get_rng_state(), state)


def test_unsupported_models_fall_back_or_refuse():
    model, tok = make_model("qwen2-gqa2", use_sliding_window=True, sliding_window=8, max_window_layers=0)
    reason = fused_unsupported(model)
    assert reason is not None and "sliding" in reason
    assert not HFRolloutEngine(model, tok).uses_fused()  # auto -> transformers' forward
    with pytest.raises(ValueError, match="cannot run this model: .*sliding"):
        HFRolloutEngine(model, tok, decoder="fused")
    bf16, _ = make_model("qwen2-gqa2")
    assert not HFRolloutEngine(bf16.to(torch.bfloat16), tok).uses_fused()  # auto: float32 on a CPU only
    gelu, _ = make_model("llama3-rope", hidden_act="gelu")
    assert "hidden_act" in fused_unsupported(gelu)
    plain, _ = make_model("qwen2-gqa2")
    plain.model.layers[0].mlp.up_proj = torch.nn.Sequential(plain.model.layers[0].mlp.up_proj)  # a wrapper
    assert "up_proj" in fused_unsupported(plain)
    with pytest.raises(ValueError, match="decoder='graph' cannot run this model: .*sliding"):
        HFRolloutEngine(model, tok, decoder="graph")
    with pytest.raises(ValueError, match="decoder='vllm'"):
        HFRolloutEngine(model, tok, decoder="vllm")


def test_auto_picks_fused_on_a_cpu_and_the_graph_only_when_asked(monkeypatch):
    model, tok = make_model("qwen2-gqa2")
    sliding, _ = make_model("qwen2-gqa2", use_sliding_window=True, sliding_window=8, max_window_layers=0)
    assert HFRolloutEngine(model, tok).resolved_decoder() == "fused"
    assert HFRolloutEngine(sliding, tok).resolved_decoder() == "hf"  # unsupported: transformers' forward
    assert HFRolloutEngine(model, tok, decoder="graph").resolved_decoder() == "graph"
    monkeypatch.setattr(engine_module, "model_device", lambda m: torch.device("cuda"))  # where the model is
    assert HFRolloutEngine(model, tok).resolved_decoder() == "hf"  # "graph" is opt-in until measured on a GPU
    assert HFRolloutEngine(model, tok, decoder="graph").resolved_decoder() == "graph"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: CUDA graphs")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_cuda_graph_samples_what_the_eager_static_step_samples(dtype, monkeypatch):
    # TF32 off: a float32 rollout is compared with a float32 teacher-forced re-scoring to 1e-4 (GPU
    # reductions differ from each other in the last bits, ~1e-6 relative, not by TF32's 1e-3).
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    model, tok = make_model("llama-gqa4-biases-headdim")
    model.cuda()
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=20, seed=5)

    def rollout(graphs: bool):
        monkeypatch.setattr(graphed_module, "USE_CUDA_GRAPHS", graphs)
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):  # the trainer's mixed precision
            return HFRolloutEngine(model, tok, decoder="graph").generate(prompts_of(tok), params)

    graphed, eager = rollout(True), rollout(False)
    same = graphed.response_ids == eager.response_ids
    assert same.float().mean() >= (1.0 if dtype == torch.float32 else 0.95)
    diff = (graphed.logprobs - eager.logprobs)[same & graphed.response_mask.bool()].abs().max()
    assert diff <= (1e-5 if dtype == torch.float32 else 1e-2)
    if dtype == torch.float32:
        with torch.no_grad():
            forced = compute_logprobs(
                model, graphed.input_ids.cuda(), graphed.attention_mask.cuda(), graphed.response_mask.cuda(), 1.0
            ).cpu()
        torch.testing.assert_close(graphed.logprobs, forced * graphed.response_mask, rtol=0, atol=1e-4)


def test_draw_never_picks_a_zero_probability_token_and_follows_the_distribution():
    gen = torch.Generator().manual_seed(0)
    probs = torch.tensor([[0.0, 0.2, 0.0, 0.8, 0.0], [0.5, 0.0, 0.0, 0.0, 0.5]]).repeat(20000, 1)
    tokens = draw(probs, gen)
    first, second = tokens[0::2], tokens[1::2]
    assert set(first.tolist()) == {1, 3} and set(second.tolist()) == {0, 4}
    assert abs((first == 3).float().mean().item() - 0.8) < 0.01  # 5 sigma at n = 20000 is 0.014
    assert abs((second == 4).float().mean().item() - 0.5) < 0.015


@pytest.mark.parametrize("shape", ["qwen2-gqa2", "llama-gqa4-biases-headdim"])
def test_under_bf16_autocast_the_fused_weights_are_cast_once_and_match_the_autocast_forward(shape, monkeypatch):
    """model.compute_dtype=bfloat16 (the trainer generates under bf16 autocast): the fused decoder gets its
    projections in bf16 once per generate call and runs with autocast off (before, every decode step ran under
    autocast, which re-cast every fp32 weight on every step: slower than float32). Its log-probs are those of the
    model's forward under the same autocast, to bf16's rounding, and not the float32 ones."""
    model, tok = make_model(shape)
    built, steps_under_autocast = [], []
    decoder_class = engine_module.FusedDecoder

    class Recording(decoder_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append({p.weight.dtype for p in [self.lm_head, *(layer.qkv for layer in self.layers)]})
            built.append(self.embed.dtype)

        def step(self, tokens, positions):
            steps_under_autocast.append(torch.is_autocast_enabled("cpu"))
            return super().step(tokens, positions)

    monkeypatch.setattr(engine_module, "FusedDecoder", Recording)
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=5)
    engine = HFRolloutEngine(model, tok, decoder="auto")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = engine.generate(prompts_of(tok), params)
        with torch.no_grad():
            forced = compute_logprobs(model, mixed.input_ids, mixed.attention_mask, mixed.response_mask, 1.0)
    assert built == [{torch.bfloat16}, torch.float32]  # projections bf16, the residual stream's embeddings fp32
    assert steps_under_autocast and not any(steps_under_autocast)
    with torch.no_grad():
        full = compute_logprobs(model, mixed.input_ids, mixed.attention_mask, mixed.response_mask, 1.0)
    real = mixed.response_mask.bool()
    to_autocast = (mixed.logprobs - forced)[real].abs()
    to_fp32 = (mixed.logprobs - full)[real].abs()
    assert float(to_autocast.max()) < 0.1 and float(to_autocast.mean()) < 0.02, float(to_autocast.max())
    assert float(to_fp32.mean()) > 1e-4  # bf16 did run: not the float32 numbers


# LoRA (peft): the adapters are merged into the fused weights once per generate call, never into the model's.


def make_lora(name: str, **lora):
    """A tiny model of SHAPES[name] wrapped by peft with LoRA on every linear layer. lora_B (zero at init, so the
    adapter would change nothing and no test could fail) and any lora_B bias are random."""
    peft = pytest.importorskip("peft")
    base, tok = make_model(name)
    config = peft.LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM", **{"target_modules": "all-linear", **lora})
    model = wrap(base, config)
    randomize_lora_b(model)
    return model.eval(), tok


def wrap(base, config):
    """peft.get_peft_model, quiet: peft reads transformers 5's deprecated `is_gradient_checkpointing`."""
    import peft

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return peft.get_peft_model(base, config)


def randomize_lora_b(model, std: float = 0.2) -> None:
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * std)


@pytest.mark.parametrize("name", ["qwen2-gqa2", "llama-gqa4-biases-headdim"])
@pytest.mark.parametrize("decoder", ["auto", "graph"])
@pytest.mark.parametrize("pack", ["none", "all"])
@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_lora_fused_logprobs_equal_teacher_forcing_and_tokens_equal_hf(name, decoder, pack, temperature, monkeypatch):
    set_packing(monkeypatch, pack)
    model, tok = make_lora(name)
    assert fused_unsupported(model) is None
    engine = HFRolloutEngine(model, tok, decoder=decoder)
    assert engine.resolved_decoder() == ("fused" if decoder == "auto" else "graph")  # auto: fused on a CPU, fp32
    params = SamplingParams(n=3, temperature=temperature, max_new_tokens=20, seed=5)
    fused = engine.generate(prompts_of(tok), params)
    hf = HFRolloutEngine(model, tok, decoder="hf").generate(prompts_of(tok), params)
    with torch.no_grad():
        forced = compute_logprobs(model, fused.input_ids, fused.attention_mask, fused.response_mask, 1.0)
    torch.testing.assert_close(fused.logprobs, forced * fused.response_mask, rtol=0, atol=1e-5)
    assert torch.equal(fused.response_ids, hf.response_ids)
    torch.testing.assert_close(fused.logprobs, hf.logprobs, rtol=0, atol=1e-5)


def test_lora_two_active_adapters_with_bias_and_rslora_are_summed():
    # Each active adapter's delta (its own scaling: rsLoRA's alpha / sqrt(r)) and its lora_B bias are added.
    peft = pytest.importorskip("peft")
    model, tok = make_lora("llama-gqa4-biases-headdim")
    second = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "down_proj"], lora_bias=True, use_rslora=True)
    model.add_adapter("second", second)
    model.base_model.set_adapter(["default", "second"])  # both active in every layer
    randomize_lora_b(model)
    assert fused_unsupported(model) is None
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=12, seed=3)
    fused = HFRolloutEngine(model, tok).generate(prompts_of(tok), params)
    with torch.no_grad():
        forced = compute_logprobs(model, fused.input_ids, fused.attention_mask, fused.response_mask, 1.0)
    torch.testing.assert_close(fused.logprobs, forced * fused.response_mask, rtol=0, atol=1e-5)


def test_lora_inside_disable_adapter_samples_the_base_model():
    # hadw's reference_policy (peft's disable_adapter): the fused weights are the base weights, not base + delta.
    from hadw.rollout.lora import reference_policy

    model, tok = make_lora("qwen2-gqa2")
    base, _ = make_model("qwen2-gqa2")  # the same seed: the same weights, no peft
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=16, seed=7)
    with reference_policy(model) as reference:
        assert HFRolloutEngine(reference, tok).resolved_decoder() == "fused"
        off = HFRolloutEngine(reference, tok).generate(prompts_of(tok), params)
    plain = HFRolloutEngine(base, tok, decoder="hf").generate(prompts_of(tok), params)
    assert torch.equal(off.response_ids, plain.response_ids)
    torch.testing.assert_close(off.logprobs, plain.logprobs, rtol=0, atol=1e-5)
    on = HFRolloutEngine(model, tok).generate(prompts_of(tok), params)  # the adapter back on: another policy
    assert (on.logprobs - off.logprobs).abs().max() > 1e-2


def test_lora_generate_leaves_the_models_weights_bit_identical():
    # The adapters are merged into copies: no peft merge/unmerge, whose float round trip is not exact.
    model, tok = make_lora("llama-gqa4-biases-headdim")
    before = {name: p.detach().clone() for name, p in model.state_dict().items()}
    HFRolloutEngine(model, tok, decoder="fused").generate(prompts_of(tok), SamplingParams(n=2, max_new_tokens=8))
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert not any(getattr(m, "merged", False) for m in model.modules())


def test_lora_linear_weights_follow_peft_forward():
    # linear_weights gives the W, b of what each projection's forward computes: adapters on, off, merged.
    model, _ = make_lora("llama-gqa4-biases-headdim")
    layer = model.get_base_model().model.layers[0].self_attn.q_proj
    x = torch.randn(5, layer.in_features)

    def check():
        weight, bias = fused_module.linear_weights(layer)
        with torch.no_grad():
            torch.testing.assert_close(F.linear(x, weight, bias), layer(x), rtol=0, atol=1e-5)
        return weight

    on = check()
    assert not torch.equal(on, layer.base_layer.weight)
    with model.disable_adapter():
        assert check() is layer.base_layer.weight  # the base weight itself, not a copy
    model.merge_adapter()  # merged (adapters on): the base layer already holds W + delta
    try:
        assert check() is layer.base_layer.weight
        assert fused_unsupported(model) is None
    finally:
        model.unmerge_adapter()


def test_lora_variants_and_other_adapters_are_refused_and_auto_falls_back():
    peft = pytest.importorskip("peft")
    dora, tok = make_lora("qwen2-gqa2", use_dora=True)
    assert "DoRA" in fused_unsupported(dora)
    assert HFRolloutEngine(dora, tok).resolved_decoder() == "hf"
    with pytest.raises(ValueError, match="cannot run this model: .*DoRA"):
        HFRolloutEngine(dora, tok, decoder="fused")
    embed, _ = make_lora("qwen2-gqa2", target_modules=["q_proj", "embed_tokens"])
    assert "embed_tokens is a peft Embedding" in fused_unsupported(embed)
    head, _ = make_lora("qwen2-gqa2", modules_to_save=["lm_head"])
    assert "lm_head is a peft ModulesToSaveWrapper" in fused_unsupported(head)
    base, _ = make_model("qwen2-gqa2")
    ia3 = wrap(base, peft.IA3Config(target_modules=["k_proj", "down_proj"], task_type="CAUSAL_LM"))
    assert "only LoRA" in fused_unsupported(ia3)
    merged, _ = make_lora("qwen2-gqa2")
    merged.merge_adapter()
    with merged.disable_adapter():  # peft's forward would unmerge in place; refused, auto falls back
        assert "merged" in fused_unsupported(merged)
        assert HFRolloutEngine(merged, tok).resolved_decoder() == "hf"


@pytest.mark.parametrize("rows", [8, 16, 64])
def test_packing_is_chosen_by_measured_speed_at_any_row_count(rows, monkeypatch):
    """Each projection is packed when packing (its one-off reorder included) is measured faster over the batch's
    calls: at 8 and 16 rows too (before: never below 32 rows, whatever this CPU measured)."""
    model, _ = make_model("qwen2-gqa2")
    monkeypatch.setattr(fused_module, "PACK_MIN_WEIGHTS", 0)
    mask = torch.ones(rows, 3, dtype=torch.long)

    def decoder_with(reorder_s, linear_s, packed_s, new_tokens=15):
        timings = iter([reorder_s, linear_s, packed_s] * 100)
        monkeypatch.setattr(fused_module, "_best_seconds", lambda fn, repeats=5: next(timings))
        fused_module.packing_pays.cache_clear()
        decoder = FusedDecoder(model, mask, max_new_tokens=new_tokens)
        return [p.packed is not None for p in [decoder.lm_head, *(layer.qkv for layer in decoder.layers)]]

    if not fused_module.packing_available():
        pytest.skip("this torch build has no oneDNN packed linear")
    assert all(decoder_with(reorder_s=1.0, linear_s=2.0, packed_s=1.0))  # 1 + 16 x 1 < 16 x 2
    assert not any(decoder_with(reorder_s=1.0, linear_s=1.0, packed_s=2.0))  # slower per call
    assert not any(decoder_with(reorder_s=50.0, linear_s=2.0, packed_s=1.0))  # the reorder is not won back
    assert all(decoder_with(reorder_s=50.0, linear_s=2.0, packed_s=1.0, new_tokens=99))  # over 100 calls it is
    fused_module.packing_pays.cache_clear()


def test_bf16_weights_pack_and_sample_what_unpacked_bf16_samples(monkeypatch):
    """Under bf16 autocast the fused projections are bf16; packed for oneDNN (AMX / avx512_bf16 where the CPU has
    them) they give the unpacked bf16 log-probs to bf16's rounding, and greedy tokens alike."""
    if not fused_module.packing_available(torch.bfloat16):
        pytest.skip("this torch build has no oneDNN packed bf16 linear")
    model, tok = make_model("llama-gqa4-biases-headdim")
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=8, seed=1)
    out = {}
    for pack in ("none", "all"):
        set_packing(monkeypatch, pack)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out[pack] = HFRolloutEngine(model, tok, decoder="fused").generate(prompts_of(tok), params)
    real = out["none"].response_mask.bool()
    assert float((out["all"].logprobs - out["none"].logprobs)[real].abs().max()) < 0.05
    agree = (out["all"].response_ids == out["none"].response_ids)[real].float().mean()
    assert float(agree) > 0.9
