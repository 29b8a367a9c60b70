"""VLLMRolloutEngine on the tiny model (GPU + vllm only; skipped elsewhere with the reason)."""

from __future__ import annotations

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vllm is not installed (GPU-only optional engine)")
if not torch.cuda.is_available():
    pytest.skip("VLLMRolloutEngine needs a CUDA GPU", allow_module_level=True)

from hadw.rollout import SamplingParams, build_tiny_model, compute_logprobs, load_model, make_engine  # noqa: E402


def test_vllm_engine_layout_and_logprobs_match_teacher_forcing(tmp_path):
    path = build_tiny_model(tmp_path / "tiny")
    model, tok = load_model(path, device="cuda")
    engine = make_engine("vllm", str(path), tok, gpu_memory_utilization=0.2)
    prompts = [tok("1+1=").input_ids, tok("What is 12*3?").input_ids]
    batch = engine.generate(prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=16, seed=0))
    assert batch.prompt_index.tolist() == [0, 0, 0, 1, 1, 1]
    assert set(batch.finish_reasons) <= {"stop", "length"}
    batch = batch.to("cuda")
    with torch.no_grad():
        expected = compute_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask, 1.0)
    torch.testing.assert_close(batch.logprobs, expected, rtol=0, atol=1e-3)
