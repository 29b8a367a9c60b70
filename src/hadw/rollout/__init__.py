"""Rollouts: load/build models, sample G responses per prompt with log-probs, re-score them.

Typical use (tests/test_rollout.py has more):

>>> model, tok = load_model(build_tiny_model("/tmp/tiny"), device="cpu")
>>> batch = make_engine("hf", model, tok).generate([tok("1+1=").input_ids], SamplingParams(n=8, seed=0))
>>> new = compute_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask, temperature=1.0)
"""

import importlib

# Loaded on first use (PEP 562): `hadw.rollout.names` (the options' allowed values, Hub ids) is imported by config
# validation without torch or transformers, which the other submodules need.
_HOMES = {
    "DECODERS": "names",
    "ENGINES": "engine",
    "FusedDecoder": "fused",
    "GraphedDecoder": "graphed",
    "HFRolloutEngine": "engine",
    "RolloutBatch": "batch",
    "RolloutEngine": "batch",
    "SamplingParams": "sampling",
    "build_tiny_model": "models",
    "build_tiny_tokenizer": "models",
    "compute_logprobs": "logprobs",
    "fused_unsupported": "fused",
    "load_model": "models",
    "make_engine": "engine",
    "model_device": "models",
    "position_ids_from_mask": "logprobs",
    "sample_next_token": "sampling",
    "to_model_device": "models",
    "token_logprobs_from_logits": "logprobs",
    "top_k_filter": "sampling",
    "top_p_filter": "sampling",
}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'hadw.rollout' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"hadw.rollout.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "DECODERS",
    "ENGINES",
    "FusedDecoder",
    "GraphedDecoder",
    "HFRolloutEngine",
    "RolloutBatch",
    "RolloutEngine",
    "SamplingParams",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "compute_logprobs",
    "fused_unsupported",
    "load_model",
    "make_engine",
    "model_device",
    "position_ids_from_mask",
    "sample_next_token",
    "to_model_device",
    "token_logprobs_from_logits",
    "top_k_filter",
    "top_p_filter",
]
