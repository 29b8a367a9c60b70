"""Token sampler: top-k / top-p filters (hand-computed, and against transformers' warpers), sampled
frequencies match the filtered distribution, log-probs follow the full-vocabulary convention."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from hadw.rollout import SamplingParams, sample_next_token, top_k_filter, top_p_filter

PROBS = torch.tensor([[0.5, 0.3, 0.15, 0.05]])


LOGITS = PROBS.log()


def kept(logits: torch.Tensor) -> list[int]:
    return torch.isfinite(logits[0]).nonzero().flatten().tolist()


@pytest.mark.parametrize(("p", "expected"), [(0.4, [0]), (0.75, [0, 1]), (0.9, [0, 1, 2]), (0.99, [0, 1, 2, 3])])
def test_top_p_keeps_smallest_prefix_reaching_p(p, expected):
    assert kept(top_p_filter(LOGITS, p)) == expected
    # Same when the vocabulary is shuffled: the filter follows probabilities, not positions.
    perm = torch.tensor([2, 0, 3, 1])
    assert sorted(perm[kept(top_p_filter(LOGITS[:, perm], p))].tolist()) == expected


@pytest.mark.parametrize(("k", "expected"), [(1, [0]), (2, [0, 1]), (3, [0, 1, 2]), (0, [0, 1, 2, 3])])
def test_top_k_keeps_k_largest(k, expected):
    assert kept(top_k_filter(LOGITS, k)) == expected


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    p=st.floats(0.01, 0.99),
    k=st.integers(1, 40),
    scale=st.floats(0.1, 5.0),
)
def test_filters_agree_with_transformers_warpers(seed, p, k, scale):
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(seed)) * scale
    ours = top_p_filter(logits, p)
    theirs = TopPLogitsWarper(top_p=p)(None, logits.clone())
    assert torch.equal(torch.isfinite(ours), torch.isfinite(theirs))
    assert torch.equal(torch.isfinite(top_k_filter(logits, k)), torch.isfinite(TopKLogitsWarper(top_k=k)(None, logits)))


def test_sampled_frequencies_match_filtered_tempered_distribution():
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    params = SamplingParams(temperature=0.8, top_k=4, top_p=0.9)
    rows = 40_000
    tokens, logprobs = sample_next_token(logits.expand(rows, -1), params, torch.Generator().manual_seed(0))
    # Hand computation: tempered probs, keep the top 4, then the nucleus of mass 0.9 within them.
    tempered = (logits / 0.8).softmax(-1)
    top4 = tempered[:4] / tempered[:4].sum()
    cum_above = torch.cumsum(top4, 0) - top4
    nucleus = top4 * (cum_above < 0.9)
    expected = torch.zeros(6)
    expected[:4] = nucleus / nucleus.sum()
    freq = torch.bincount(tokens, minlength=6).double() / rows
    assert torch.allclose(freq, expected.double(), atol=4 * math.sqrt(0.25 / rows))
    assert freq[4:].sum() == 0
    # Recorded log-probs are of the full tempered distribution, not the renormalised nucleus.
    assert torch.allclose(logprobs, tempered.log()[tokens])


def test_greedy_logprobs_use_temperature_one_and_generator_is_the_only_randomness():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]])
    tokens, logprobs = sample_next_token(logits, SamplingParams(temperature=0), None)
    assert tokens.tolist() == [1, 0]
    assert torch.allclose(logprobs, logits.log_softmax(-1)[[0, 1], [1, 0]])
    state = torch.get_rng_state()
    a, _ = sample_next_token(
        logits.expand(64, 2, 3).reshape(128, 3), SamplingParams(), torch.Generator().manual_seed(1)
    )
    b, _ = sample_next_token(
        logits.expand(64, 2, 3).reshape(128, 3), SamplingParams(), torch.Generator().manual_seed(1)
    )
    assert torch.equal(a, b) and torch.equal(torch.get_rng_state(), state)
