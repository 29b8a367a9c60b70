"""Rollouts: load/build models, sample G responses per prompt with log-probs, re-score them.

model, tok = load_model(build_tiny_model("/tmp/tiny"))
engine = make_engine("hf", model, tok)
batch = engine.generate([tok("1+1=").input_ids], SamplingParams(n=8, seed=0))
new_logprobs = compute_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask)
"""

from hadw.rollout.batch import RolloutBatch, RolloutEngine
from hadw.rollout.engine import ENGINES, HFRolloutEngine, make_engine
from hadw.rollout.logprobs import compute_logprobs, position_ids_from_mask, token_logprobs_from_logits
from hadw.rollout.models import build_tiny_model, build_tiny_tokenizer, load_model
from hadw.rollout.sampling import SamplingParams, sample_next_token, top_k_filter, top_p_filter

__all__ = [
    "ENGINES",
    "HFRolloutEngine",
    "RolloutBatch",
    "RolloutEngine",
    "SamplingParams",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "compute_logprobs",
    "load_model",
    "make_engine",
    "position_ids_from_mask",
    "sample_next_token",
    "token_logprobs_from_logits",
    "top_k_filter",
    "top_p_filter",
]
