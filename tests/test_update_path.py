"""The trainer's inner loop (issue 12.4): MiniBatch rows, the entropy term, old log-prob recomputation."""

from __future__ import annotations

import pytest
import torch

from hadw.rollout import build_tiny_model, token_logprobs_from_logits
from hadw.train.config import load_config
from hadw.train.trainer import MiniBatch, Trainer


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", hidden_size=32, num_layers=1, num_heads=2,
                            num_kv_heads=1, intermediate_size=64)  # fmt: skip


def _trainer(tiny_path, out, *extra) -> Trainer:
    return Trainer(load_config(None, [
        f"model.path={tiny_path}", "data.template=plain", "data.chat_template=never", "rollout.group_size=4",
        "rollout.max_new_tokens=5", "train.prompts_per_step=2", "train.mini_batch_prompts=2", "optim.lr=1e-2",
        "optim.warmup_steps=0", f"train.output_dir={out}", "logging.progress=false", "logging.sample_every=0", *extra,
    ]))  # fmt: skip


def test_minibatch_selects_rows_of_every_field():
    n = torch.arange(6)
    mb = MiniBatch(n[:, None].repeat(1, 4), n[:, None].repeat(1, 4), n[:, None].repeat(1, 2), n[:, None] * 1.0,
                   n * 2.0)  # fmt: skip
    sub = mb[torch.tensor([4, 1])]
    assert len(sub) == 2 and sub.input_ids[:, 0].tolist() == [4, 1] and sub.advantages.tolist() == [8.0, 2.0]
    assert sub.old_logprobs[:, 0].tolist() == [4.0, 1.0] and sub.ref_logprobs is None
    assert mb[2:4].response_mask[:, 0].tolist() == [2, 3]


def test_entropy_without_a_graph_equals_the_differentiable_one():
    logits = torch.randn(3, 5, 300, dtype=torch.float64).float()
    tokens = torch.randint(0, 300, (3, 5))
    for t in (1.0, 0.7):
        lp_a, h_a = token_logprobs_from_logits(logits, tokens, t, with_entropy=True, entropy_grad=True, chunk=4)
        lp_b, h_b = token_logprobs_from_logits(logits, tokens, t, with_entropy=True, entropy_grad=False, chunk=4)
        torch.testing.assert_close(h_a, h_b) and torch.testing.assert_close(lp_a, lp_b)
        p = torch.softmax(logits / t, dim=-1)
        torch.testing.assert_close(h_b, -(p * p.log()).sum(-1), rtol=1e-5, atol=1e-5)


def test_the_entropy_bonus_moves_the_weights(tiny_path, tmp_path):
    # Before issue 12.4 the trainer passed entropy.detach() to the loss, so entropy_coef changed nothing.
    def weights_after_update(coef):
        trainer = _trainer(tiny_path, tmp_path / str(coef), f"algorithm.entropy_coef={coef}")
        rollout, _ = trainer.collect(0)
        trainer.update(rollout.batch, torch.zeros(len(rollout.batch)), 0)  # no policy signal at all
        return [p.detach().clone() for p in trainer.model.parameters()]

    without, with_bonus = weights_after_update(0.0), weights_after_update(0.5)
    assert any(not torch.equal(a, b) for a, b in zip(without, with_bonus, strict=True))


@pytest.mark.parametrize("mode, recomputed", [("auto", False), ("never", False), ("always", True)])
def test_recompute_logprobs_is_an_explicit_choice(tiny_path, tmp_path, monkeypatch, mode, recomputed):
    trainer = _trainer(tiny_path, tmp_path / mode, f"rollout.recompute_logprobs={mode}")
    rollout, _ = trainer.collect(0)
    calls = []
    monkeypatch.setattr(trainer, "_score", lambda model, data: calls.append(model) or data.old_logprobs)
    trainer._minibatch_source(rollout.batch, torch.zeros(len(rollout.batch)))
    assert bool(calls) == recomputed  # float32: auto trusts the sampler's log-probs (equal to ~1e-6)
    assert _trainer(tiny_path, tmp_path / "bf", "model.compute_dtype=bfloat16")._recompute_logprobs


def test_the_first_mini_batch_is_its_own_pi_old(tiny_path, tmp_path, monkeypatch):
    """With a π_old re-score (recompute_logprobs=always), the first mini-batch's rows are not re-scored: they are
    on-policy, their π_old is their own forward's log-probs (ratio exactly 1, TRL's shortcut when steps align).
    The update lands where re-scoring every row lands (float32: the re-score equals the forward to ~1e-6)."""

    def run(name, shortcut):
        trainer = _trainer(tiny_path, tmp_path / name, "rollout.recompute_logprobs=always",
                           "train.prompts_per_step=4", "train.mini_batch_prompts=2")  # fmt: skip
        rollout, _ = trainer.collect(0)
        scored = []
        score = trainer._score
        monkeypatch.setattr(trainer, "_score", lambda model, data: scored.append(len(data)) or score(model, data))
        if not shortcut:  # every row re-scored first, as before
            source = trainer._minibatch_source
            monkeypatch.setattr(trainer, "_minibatch_source", lambda b, a, on_policy_rows=None: source(b, a))
        advantages = torch.linspace(-1, 1, len(rollout.batch))
        metrics = trainer.update(rollout.batch, advantages, 0)
        return scored, [p.detach().clone() for p in trainer.model.parameters()], metrics, len(rollout.batch)

    scored, weights, _, rows = run("shortcut", True)
    assert scored == [rows // 2]  # only the second mini-batch's rows
    everything, reference, _, _ = run("all", False)
    assert everything == [rows]
    for a, b in zip(weights, reference, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("native", [True, False])
def test_compute_dtype_auto_is_bf16_where_the_cpu_multiplies_bf16(tiny_path, tmp_path, monkeypatch, native):
    """model.compute_dtype=auto: bf16 autocast (and the π_old re-score) on a CPU with AVX512-BF16 / AMX, float32
    elsewhere, where bf16 is converted around each multiply and costs more than it saves."""
    from hadw.rollout import precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    trainer = _trainer(tiny_path, tmp_path / str(native), "model.compute_dtype=auto")
    assert trainer.compute_dtype == ("bfloat16" if native else "float32")
    assert trainer._recompute_logprobs == native
    with trainer.autocast():
        assert torch.is_autocast_enabled("cpu") == native
    assert precision.resolve_compute_dtype("float32", torch.device("cpu")) == "float32"  # an explicit choice stays


def test_native_bf16_reads_this_cpu():
    """The check agrees with the CPU's own flags (avx512_bf16 / amx_bf16 in /proc/cpuinfo), on whatever CPU runs it."""
    from pathlib import Path

    from hadw.rollout import precision

    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        pytest.skip("no /proc/cpuinfo here")
    flags = next((line.split() for line in cpuinfo.read_text().splitlines() if line.startswith("flags")), [])
    precision.cpu_has_native_bf16.cache_clear()
    assert precision.cpu_has_native_bf16() == any(f in flags for f in precision.BF16_CPU_FLAGS)
