"""HFRolloutEngine: log-probs vs teacher forcing, seeding, greedy vs HF generate, stop handling, masks."""

from __future__ import annotations

import copy

import pytest
import torch

from hadw.rollout import (
    HFRolloutEngine,
    RolloutBatch,
    SamplingParams,
    build_tiny_model,
    compute_logprobs,
    load_model,
    make_engine,
)

QUESTIONS = ["1+1=", "What is 12*3? Put the answer in \\boxed{}.", "7/8"]  # three different lengths


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def tiny(request, tmp_path_factory):
    return load_model(build_tiny_model(tmp_path_factory.mktemp(request.param), arch=request.param), device="cpu")


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    return load_model(build_tiny_model(tmp_path_factory.mktemp("qwen"), arch="qwen2"), device="cpu")


def prompts_of(tokenizer) -> list[list[int]]:
    return [tokenizer(q).input_ids for q in QUESTIONS]


def rescore(model, batch: RolloutBatch, temperature: float) -> torch.Tensor:
    with torch.no_grad():
        return compute_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask, temperature)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=0),
        SamplingParams(n=3, temperature=0.7, top_p=0.8, max_new_tokens=12, seed=1),
        SamplingParams(n=2, temperature=1.5, top_k=7, top_p=0.9, max_new_tokens=12, seed=2),
        SamplingParams(n=2, temperature=0.0, max_new_tokens=12),
    ],
    ids=["T1", "T0.7-top_p", "T1.5-top_k-top_p", "greedy"],
)
def test_generated_logprobs_equal_teacher_forced_logprobs(tiny, params):
    model, tok = tiny
    batch = HFRolloutEngine(model, tok).generate(prompts_of(tok), params)
    assert batch.prompt_mask.sum(1).unique().numel() == len(QUESTIONS)  # really left-padded
    expected = rescore(model, batch, params.temperature)
    torch.testing.assert_close(batch.logprobs, expected, rtol=0, atol=1e-5)
    assert bool((batch.logprobs[batch.response_mask.bool()] < 0).all())


def test_chunked_generation_matches_logprobs_and_layout(qwen):
    model, tok = qwen
    # Stop on a common character so rows end at different steps in different chunks.
    params = SamplingParams(n=4, max_new_tokens=10, seed=3, stop_token_ids=tok(" ").input_ids)
    batch = HFRolloutEngine(model, tok, max_batch_size=5).generate(prompts_of(tok), params)
    assert batch.response_ids.shape[0] == 12
    torch.testing.assert_close(batch.logprobs, rescore(model, batch, 1.0), rtol=0, atol=1e-5)


def test_same_seed_same_samples_different_seed_different(qwen):
    model, tok = qwen
    engine = HFRolloutEngine(model, tok)
    run = lambda seed: engine.generate(prompts_of(tok), SamplingParams(n=2, max_new_tokens=16, seed=seed))
    a, b, c = run(7), run(7), run(8)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logprobs, b.logprobs)
    assert a.response_texts == b.response_texts
    assert not torch.equal(a.response_ids, c.response_ids)
    # Samples within a group differ too (G draws, not one draw copied G times).
    assert not torch.equal(a.response_ids[0], a.response_ids[1])


def test_engine_leaves_global_rng_and_training_mode_alone(qwen):
    model, tok = qwen
    model.train()
    state = torch.get_rng_state()
    HFRolloutEngine(model, tok).generate(prompts_of(tok), SamplingParams(n=2, max_new_tokens=8, seed=0))
    HFRolloutEngine(model, tok).generate(prompts_of(tok), SamplingParams(n=2, max_new_tokens=8))  # seed=None
    assert torch.equal(torch.get_rng_state(), state)
    assert model.training
    model.eval()


def test_unseeded_runs_differ(qwen):
    model, tok = qwen
    engine = HFRolloutEngine(model, tok)
    runs = [engine.generate(prompts_of(tok), SamplingParams(n=1, max_new_tokens=16)) for _ in range(2)]
    assert not torch.equal(runs[0].response_ids, runs[1].response_ids)


def hf_greedy(model, tok, prompts, max_new_tokens, eos_ids) -> list[list[int]]:
    """Reference: transformers' own generate on the same left-padded batch, cut after the first EOS."""
    enc = tok.pad({"input_ids": prompts}, return_tensors="pt")
    out = model.generate(
        **enc, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos_ids, pad_token_id=tok.pad_token_id
    )
    rows = []
    for row in out[:, enc["input_ids"].shape[1] :].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos_ids), len(row))
        rows.append(row[:cut])
    return rows


def engine_rows(batch: RolloutBatch) -> list[list[int]]:
    return [ids[:n] for ids, n in zip(batch.response_ids.tolist(), batch.response_lengths.tolist(), strict=True)]


def test_greedy_equals_hf_generate(tiny):
    model, tok = tiny
    prompts = prompts_of(tok)
    batch = HFRolloutEngine(model, tok).generate(prompts, SamplingParams(n=1, temperature=0, max_new_tokens=24))
    assert engine_rows(batch) == hf_greedy(model, tok, prompts, 24, [tok.eos_token_id])


def test_stop_tokens_finish_reasons_and_masks_match_hf_generate(qwen):
    model, tok = qwen
    prompts = prompts_of(tok)
    greedy = HFRolloutEngine(model, tok).generate(prompts, SamplingParams(n=1, temperature=0, max_new_tokens=24))
    # A token that greedy decoding of prompt 0 emits at step 3 (and not before) becomes a stop token.
    row0 = greedy.response_ids[0].tolist()
    step = next(i for i in range(2, 24) if row0[i] not in row0[:i])
    stop = row0[step]
    params = SamplingParams(n=1, temperature=0, max_new_tokens=24, stop_token_ids=[stop])
    batch = HFRolloutEngine(model, tok).generate(prompts, params)
    assert engine_rows(batch) == hf_greedy(model, tok, prompts, 24, [tok.eos_token_id, stop])

    lengths = batch.response_lengths.tolist()
    assert lengths[0] == step + 1 and batch.response_ids[0, step] == stop
    for k, reason in enumerate(batch.finish_reasons):
        ends_on_stop = batch.response_ids[k, lengths[k] - 1].item() == stop
        assert reason == ("stop" if ends_on_stop else "length")
        assert reason == "stop" or lengths[k] == 24
        assert batch.response_mask[k].tolist() == [1] * lengths[k] + [0] * (batch.response_ids.shape[1] - lengths[k])
        assert set(batch.response_ids[k, lengths[k] :].tolist()) <= {tok.pad_token_id}
        assert set(batch.logprobs[k, lengths[k] :].tolist()) <= {0.0}
        assert batch.response_texts[k] == tok.decode(batch.response_ids[k, : lengths[k]], skip_special_tokens=True)


def test_all_rows_stopping_ends_generation_early(qwen):
    model, tok = qwen
    prompts = prompts_of(tok)
    greedy = HFRolloutEngine(model, tok).generate(prompts, SamplingParams(n=1, temperature=0, max_new_tokens=6))
    # Make every row's 2nd greedy token the model's EOS (via generation_config, as a checkpoint would).
    eos_model = copy.deepcopy(model)
    eos_model.generation_config.eos_token_id = sorted(set(greedy.response_ids[:, 1].tolist()))
    batch = HFRolloutEngine(eos_model, tok).generate(prompts, SamplingParams(n=1, temperature=0, max_new_tokens=50))
    assert batch.response_ids.shape[1] <= 2 < 50
    assert batch.finish_reasons == ["stop"] * len(prompts)
    # ignore_eos runs to max_new_tokens regardless.
    forced = HFRolloutEngine(eos_model, tok).generate(
        prompts, SamplingParams(n=1, temperature=0, max_new_tokens=9, ignore_eos=True)
    )
    assert forced.response_lengths.tolist() == [9] * len(prompts) and forced.finish_reasons == ["length"] * 3


def test_top_k_one_and_tiny_top_p_reduce_to_greedy(qwen):
    model, tok = qwen
    engine = HFRolloutEngine(model, tok)
    greedy = engine.generate(prompts_of(tok), SamplingParams(n=2, temperature=0, max_new_tokens=10))
    for params in (
        SamplingParams(n=2, top_k=1, max_new_tokens=10, seed=0),
        SamplingParams(n=2, top_p=1e-6, max_new_tokens=10, seed=5),
    ):
        batch = engine.generate(prompts_of(tok), params)
        assert torch.equal(batch.response_ids, greedy.response_ids)
        # Log-probs stay those of the full T = 1 distribution, not of the one-token nucleus (which would be 0).
        torch.testing.assert_close(batch.logprobs, greedy.logprobs, rtol=0, atol=1e-6)


def test_batch_layout_and_helpers(qwen):
    model, tok = qwen
    prompts = prompts_of(tok)
    batch = make_engine("hf", model, tok).generate(prompts, SamplingParams(n=2, max_new_tokens=5, seed=0))
    n_rows, width = len(prompts) * 2, max(map(len, prompts))
    assert batch.prompt_index.tolist() == [0, 0, 1, 1, 2, 2] and len(batch) == n_rows
    for k in range(n_rows):
        p = prompts[k // 2]
        assert batch.prompt_ids[k, width - len(p) :].tolist() == p
        assert batch.prompt_ids[k, : width - len(p)].tolist() == [tok.pad_token_id] * (width - len(p))
        assert batch.prompt_mask[k].tolist() == [0] * (width - len(p)) + [1] * len(p)
    assert batch.input_ids.shape == (n_rows, width + batch.response_ids.shape[1])
    assert torch.equal(batch.attention_mask[:, width:], batch.response_mask)
    assert batch.logprobs.dtype == torch.float32 and batch.response_ids.dtype == torch.long
    moved = batch.to("cpu")
    assert torch.equal(moved.input_ids, batch.input_ids) and moved.finish_reasons == batch.finish_reasons


def test_bad_inputs_name_the_problem(qwen):
    model, tok = qwen
    engine = HFRolloutEngine(model, tok)
    with pytest.raises(ValueError, match=r"prompts\[1\] is empty"):
        engine.generate([[5], []], SamplingParams(n=1))
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1.0)
    with pytest.raises(ValueError, match="unknown engine 'sglang'"):
        make_engine("sglang", model, tok)


def test_compute_logprobs_entropy_int_length_and_gradients(qwen):
    model, tok = qwen
    batch = HFRolloutEngine(model, tok).generate(prompts_of(tok), SamplingParams(n=1, max_new_tokens=6, seed=0))
    r = batch.response_ids.shape[1]
    logprobs, entropy = compute_logprobs(
        model, batch.input_ids, batch.attention_mask, r, temperature=0.5, return_entropy=True
    )
    # Reference: the full forward pass with the textbook formulas.
    with torch.no_grad():
        full = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=(batch.attention_mask.cumsum(-1) - 1).clamp(min=0),
        ).logits
        logp = (full[:, -r - 1 : -1] / 0.5).log_softmax(-1)
    torch.testing.assert_close(logprobs, logp.gather(-1, batch.response_ids[..., None]).squeeze(-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy, -(logp.exp() * logp).sum(-1), atol=1e-5, rtol=0)
    logprobs.sum().backward()
    assert model.model.embed_tokens.weight.grad is not None
    model.zero_grad(set_to_none=True)
    with pytest.raises(ValueError, match="response length"):
        compute_logprobs(model, batch.input_ids, batch.attention_mask, batch.input_ids.shape[1])
