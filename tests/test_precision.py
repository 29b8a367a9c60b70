"""Mixed precision trains: float32 master weights with a bfloat16 autocast forward move like float32 (issue 10.1).

The failure it guards against: AdamW stepping bfloat16 weights directly at lr 1e-6 leaves almost every
weight unchanged, since a step of ~1e-6 is below bfloat16's resolution (8 bits of mantissa).
"""

from __future__ import annotations

import pytest
import torch

from hadw.core import policy_loss
from hadw.rollout import build_tiny_model, compute_logprobs
from hadw.train.config import ConfigError, load_config
from hadw.train.trainer import Trainer

STEPS = 10


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", hidden_size=64, num_layers=2, num_heads=2,
                            num_kv_heads=1, intermediate_size=128, seed=0)  # fmt: skip


def _trainer(tiny_path, out, compute_dtype: str) -> Trainer:
    return Trainer(load_config(None, [
        f"model.path={tiny_path}", "model.device=cpu", f"model.compute_dtype={compute_dtype}",
        "data.template=plain", "data.chat_template=never", "rollout.group_size=4", "rollout.max_new_tokens=6",
        "train.prompts_per_step=4", "train.mini_batch_prompts=4", "optim.lr=1e-6", "optim.warmup_steps=0",
        f"train.output_dir={out}", "logging.progress=false", "logging.sample_every=0",
    ]))  # fmt: skip


def _random_advantages(n: int) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(0))


def _changed_share(before: list[torch.Tensor], model) -> float:
    changed = sum(int((p.detach().float() != b).sum()) for p, b in zip(model.parameters(), before, strict=True))
    return changed / sum(b.numel() for b in before)


def _run(tiny_path, out, compute_dtype):
    trainer = _trainer(tiny_path, out, compute_dtype)
    rollout, _ = trainer.collect(0)
    advantages = _random_advantages(len(rollout.batch))
    before = [p.detach().float().clone() for p in trainer.model.parameters()]
    history = [trainer.update(rollout.batch, advantages, step) for step in range(STEPS)]
    return trainer, rollout, advantages, before, history


def test_bf16_autocast_changes_the_weights_like_fp32(tiny_path, tmp_path):
    fp32, rollout, advantages, before, hist32 = _run(tiny_path, tmp_path / "fp32", "float32")
    bf16, _, _, before16, hist16 = _run(tiny_path, tmp_path / "bf16", "bfloat16")
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())  # master weights stay float32
    assert all(torch.equal(a, b) for a, b in zip(before, before16, strict=True))  # same start
    share32, share16 = _changed_share(before, fp32.model), _changed_share(before16, bf16.model)
    print(f"changed-weight share after {STEPS} AdamW steps at lr 1e-6: fp32 {share32:.4f}, bf16 autocast {share16:.4f}")
    assert share32 >= 0.99 and share16 >= 0.99
    # The first step's loss and the model-dependent metrics agree with fp32 to bf16 accuracy
    assert hist16[0]["actor/pg_loss"] == pytest.approx(hist32[0]["actor/pg_loss"], rel=2e-2, abs=1e-3)
    assert hist16[0]["actor/entropy"] == pytest.approx(hist32[0]["actor/entropy"], rel=2e-2)
    assert hist16[0]["actor/grad_norm"] == pytest.approx(hist32[0]["actor/grad_norm"], rel=0.1)
    # auto recompute: the ratio starts at 1 under autocast too (old log-probs re-scored in bf16)
    assert hist16[0]["actor/ratio_mean"] == pytest.approx(1.0, abs=1e-6)

    # The counterfactual the config now refuses: the same updates applied to bfloat16 weights barely move them
    model = _trainer(tiny_path, tmp_path / "pure", "float32").model.to(torch.bfloat16).train()
    start = [p.detach().float().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.1)
    batch = rollout.batch
    for _ in range(STEPS):
        optimizer.zero_grad()
        logprobs = compute_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask)
        loss, _ = policy_loss(logprobs, logprobs.detach(), advantages, batch.response_mask, fp32.loss_spec)
        loss.backward()
        optimizer.step()
    pure = _changed_share(start, model)
    print(f"pure bf16 weights: {pure:.4f} changed")
    assert pure < 0.5


def test_pure_bf16_training_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="model.compute_dtype=bfloat16") as err:
        load_config(None, ["model.dtype=bfloat16"])
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="was removed"):
        load_config(None, ["rollout.engine=vllm"])
