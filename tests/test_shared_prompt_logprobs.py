"""compute_logprobs(share_prompts=True): one prompt forward per group, same values and gradients.

The reference is the one-pass forward over every row (share_prompts=False). Rows are left-padded
prompts of different lengths, G responses each, right-padded with a response mask; Qwen2 and Llama.
"""

from __future__ import annotations

import functools

import pytest
import torch

from hadw.rollout import build_tiny_model, compute_logprobs, load_model
from hadw.rollout.logprobs import prompt_groups


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def model(request, tmp_path_factory):
    model, _ = load_model(build_tiny_model(tmp_path_factory.mktemp(request.param), arch=request.param), device="cpu")
    return model


def grouped_batch(group_size=4, response_len=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(4, 200, (n,), generator=gen) for n in (3, 7, 5)]
    width = max(len(p) for p in prompts)
    rows, masks = [], []
    for p in prompts:
        for _ in range(group_size):
            rows.append(torch.cat([torch.zeros(width - len(p), dtype=torch.long), p]))
            masks.append(
                torch.cat([torch.zeros(width - len(p), dtype=torch.long), torch.ones(len(p), dtype=torch.long)])
            )
    prompt_ids, prompt_mask = torch.stack(rows), torch.stack(masks)
    response = torch.randint(4, 200, (len(rows), response_len), generator=gen)
    response_mask = (
        torch.arange(response_len) < torch.randint(1, response_len + 1, (len(rows), 1), generator=gen)
    ).long()
    input_ids = torch.cat([prompt_ids, response], 1)
    attention_mask = torch.cat([prompt_mask, response_mask], 1)
    return input_ids, attention_mask, response_mask


def logprobs_and_grads(model, batch, share):
    model.zero_grad(set_to_none=True)
    lp, ent = compute_logprobs(
        model, *batch, temperature=0.8, return_entropy=True, entropy_grad=True, share_prompts=share
    )
    weights = torch.linspace(-1, 1, lp.numel()).view_as(lp)
    ((lp * weights).sum() + ent.sum()).backward()
    return lp.detach(), ent.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("response_len", [1, 5])
def test_shared_prompts_give_the_same_logprobs_and_gradients(model, response_len):
    model.train()
    batch = grouped_batch(response_len=response_len)
    lp_a, ent_a, grads_a = logprobs_and_grads(model, batch, share=False)
    lp_b, ent_b, grads_b = logprobs_and_grads(model, batch, share=True)
    torch.testing.assert_close(lp_b, lp_a, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent_b, ent_a, rtol=0, atol=1e-5)
    # Gradients: the shared prompt's K/V gradient is the sum of its G rows' in another order. float32 sums in
    # another order agree to a few hundred ulps (2**-23 each) of the tensor's largest entry, whatever the CPU's
    # vector width (an AVX-512 machine failed the old atol=1e-6): 1e-5 · max|g|.
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5 * float(a.abs().max()) + 1e-12)


def test_prompt_forward_runs_once_per_group(model, monkeypatch):
    batch = grouped_batch(group_size=4)
    shapes = []
    forward = model.forward

    @functools.wraps(forward)  # keeps the signature, so the cache keyword is still found
    def recording(*args, **kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", recording)
    with torch.no_grad():
        compute_logprobs(model, *batch, share_prompts=True)
    assert shapes == [(3, 7), (12, 4)]  # 3 distinct prompts (width 7), then 12 rows x (R - 1) tokens


def test_prompt_groups_finds_runs_of_identical_rows():
    ids = torch.tensor([[0, 5], [0, 5], [5, 5], [0, 5], [0, 5]])
    mask = torch.tensor([[0, 1], [0, 1], [1, 1], [1, 1], [0, 1]])  # row 3: same ids, different mask
    first, inverse = prompt_groups(ids, mask)
    assert first.tolist() == [0, 2, 3, 4] and inverse.tolist() == [0, 0, 1, 2, 3]


def test_a_forward_without_a_cache_argument_falls_back_to_one_pass(model):
    class NoCache(torch.nn.Module):  # e.g. a remote-code model whose forward takes no KV cache
        def __init__(self, inner):
            super().__init__()
            self.inner, self.config = inner, inner.config

        def forward(self, input_ids, attention_mask, position_ids, use_cache, logits_to_keep):
            return self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=use_cache,
                logits_to_keep=logits_to_keep,
            )

    batch = grouped_batch()
    with torch.no_grad():
        wrapped = compute_logprobs(NoCache(model), *batch, share_prompts=True)
        plain = compute_logprobs(model, *batch)
    assert torch.equal(wrapped, plain)
