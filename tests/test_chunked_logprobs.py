"""Chunked log-probs (issue 38.6): the LM head + log-softmax over chunks of tokens equals the one-pass forward
(values and gradients), and no full-vocabulary tensor of the whole micro-batch exists, forward or backward."""

from __future__ import annotations

import pytest
import torch

from hadw.rollout import build_tiny_model, compute_logprobs, load_model
from hadw.rollout import logprobs as L

VOCAB = 2000  # vocabulary-heavy for its size: the head's output dominates, as in a real model
N, P, R = 4, 5, 7
UNCHUNKED = 10**9  # more tokens than any batch here: the one-pass forward


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("vocab") / "model", hidden_size=32, num_layers=2, num_heads=2,
                            num_kv_heads=1, intermediate_size=64, vocab_size=VOCAB, seed=0)  # fmt: skip
    return load_model(path)[0]


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows 0 and 1 share a prompt (the shared-prompt path has a group); row 2 is left-padded; row 3's
    response ends early (masked)."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (N, P + R), generator=gen)
    ids[1, :P] = ids[0, :P]
    mask = torch.ones_like(ids)
    mask[2, :2] = 0
    response_mask = torch.ones(N, R)
    response_mask[3, 5:] = 0
    return ids, mask, response_mask


def _run(model, chunk: int, share: bool, entropy_grad: bool):
    """(logprobs, entropy, every parameter's gradient) of a loss using both outputs."""
    ids, mask, response_mask = _batch()
    model.zero_grad(set_to_none=True)
    logprobs, entropy = compute_logprobs(
        model, ids, mask, response_mask, 0.7, return_entropy=True, entropy_grad=entropy_grad, share_prompts=share,
        chunk_tokens=chunk,
    )  # fmt: skip
    loss = (logprobs * torch.linspace(-1, 1, R)).sum() + (0.3 * entropy.sum() if entropy_grad else 0.0)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    return logprobs.detach(), entropy.detach(), grads


@pytest.mark.parametrize("share", [False, True], ids=["one-pass", "shared-prompts"])
@pytest.mark.parametrize("entropy_grad", [False, True], ids=["entropy-metric", "entropy-bonus"])
def test_chunks_give_the_unchunked_values_and_gradients(model, share, entropy_grad):
    want_logprobs, want_entropy, want_grads = _run(model, UNCHUNKED, share, entropy_grad)
    assert len(want_grads) == len(list(model.parameters()))
    for chunk in (1, 5, 13):  # one token, a divisor-free size, a chunk straddling rows
        logprobs, entropy, grads = _run(model, chunk, share, entropy_grad)
        torch.testing.assert_close(logprobs, want_logprobs, rtol=0, atol=1e-5)
        torch.testing.assert_close(entropy, want_entropy, rtol=0, atol=1e-5)
        assert logprobs[3, 5:].eq(0).all() and entropy[3, 5:].eq(0).all()  # the response mask still applies
        for got, want in zip(grads, want_grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_chunks_with_lora_match_and_train_the_adapters_only(model):
    pytest.importorskip("peft")
    import copy

    from hadw.rollout.lora import LoraSettings, add_lora

    lora = add_lora(copy.deepcopy(model), LoraSettings(4, 8, 0.0, "all-linear"))
    want_logprobs, _, want_grads = _run(lora, UNCHUNKED, True, False)
    logprobs, _, grads = _run(lora, 6, True, False)
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora" in n for n in trainable) and len(grads) == len(trainable)
    torch.testing.assert_close(logprobs, want_logprobs, rtol=0, atol=1e-5)
    for got, want in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def _vocab_tensors(model, monkeypatch, budget_tokens: int, with_grad: bool) -> tuple[list, list]:
    """Rows of every head output, and shapes of every tensor saved for backward with a vocabulary axis, in
    one compute_logprobs + backward at the default chunk size with LOGITS_CHUNK_BYTES = budget_tokens rows."""
    monkeypatch.setattr(L, "LOGITS_CHUNK_BYTES", budget_tokens * 4 * VOCAB)
    head_rows, saved = [], []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda module, args, out: head_rows.append(out.shape[:-1].numel())
    )

    def pack(tensor):
        if tensor.dim() and tensor.shape[-1] == VOCAB:
            saved.append(tuple(tensor.shape))
        return tensor

    ids, mask, response_mask = _batch()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.set_grad_enabled(with_grad):
            logprobs, _ = compute_logprobs(model, ids, mask, response_mask, return_entropy=True)
            if with_grad:
                logprobs.sum().backward()
    finally:
        hook.remove()
    return head_rows, saved


@pytest.mark.parametrize("with_grad", [True, False], ids=["update", "reference-pass"])
def test_no_full_vocabulary_tensor_of_the_batch_is_ever_held(model, monkeypatch, with_grad):
    head_rows, saved = _vocab_tensors(model, monkeypatch, budget_tokens=6, with_grad=with_grad)
    assert len(head_rows) >= (N * R) // 6 and max(head_rows) <= 6  # the head only ever sees a chunk
    assert saved == []  # nothing [., V]-shaped waits for the backward: each chunk recomputes its own logits


def test_a_batch_under_the_budget_keeps_the_one_pass_forward(model, monkeypatch):
    head_rows, saved = _vocab_tensors(model, monkeypatch, budget_tokens=N * R, with_grad=True)
    assert head_rows == [N * (R + 1)]  # the model's own forward, as before chunking: bit for bit
    assert saved  # (and it keeps its logits for the backward: what the budget bounds)


def test_a_model_whose_forward_transforms_the_logits_is_not_split(model, monkeypatch):
    assert L.body_and_head(model) is not None
    monkeypatch.setattr(model.config, "final_logit_softcapping", 30.0, raising=False)
    assert L.body_and_head(model) is None  # the bare head would skip the softcap: keep the one-pass forward
