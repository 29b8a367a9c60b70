"""Rollouts: load/build models, sample G responses per prompt with log-probs, re-score them.

Typical use (tests/test_rollout.py has more):

>>> model, tok = load_model(build_tiny_model("/tmp/tiny"), device="cpu")
>>> batch = make_engine("hf", model, tok).generate([tok("1+1=").input_ids], SamplingParams(n=8, seed=0))
>>> new = compute_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask, temperature=1.0)
"""

from hadw.rollout.batch import RolloutBatch, RolloutEngine
from hadw.rollout.engine import DECODERS, ENGINES, HFRolloutEngine, make_engine
from hadw.rollout.fused import FusedDecoder, fused_unsupported
from hadw.rollout.graphed import GraphedDecoder
from hadw.rollout.logprobs import compute_logprobs, position_ids_from_mask, token_logprobs_from_logits
from hadw.rollout.models import build_tiny_model, build_tiny_tokenizer, load_model, model_device, to_model_device
from hadw.rollout.sampling import SamplingParams, sample_next_token, top_k_filter, top_p_filter

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
