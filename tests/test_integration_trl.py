"""HA-DW inside TRL's GRPOTrainer, on a tiny offline Qwen2 model, on CPU.

Also the worker of the 2-process test: `accelerate launch ... tests/test_integration_trl.py MODEL OUT`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl", reason="TRL not installed: pip install 'hadw[trl]'")

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from hadw.core import apply_hadw, compute_advantages, make_anchor
from hadw.integrations.trl import (
    ANCHOR_STATE_NAME,
    HADWGRPOConfig,
    HADWGRPOTrainer,
    resolve_reward_index,
)
from hadw.rollout.models import build_tiny_model
from hadw.train.engines.trl_launch import _free_port as free_port

G = 4  # completions per prompt
TRL_EPS = 1e-4  # TRL divides by (sample std + 1e-4)


def correct(prompts, completions, **kwargs) -> list[float]:
    """A 0/1 'correctness' a random policy passes about half the time, varying within groups."""
    return [float((ord(c[0]) + ord(p[1])) % 2) if c else 0.0 for p, c in zip(prompts, completions, strict=True)]


def brevity(completions, **kwargs) -> list[float]:
    """A shaped reward (length penalty): part of the total reward, never of correctness."""
    return [-0.05 * len(c) for c in completions]


def dataset(n: int = 16, levels: bool = False) -> Dataset:
    columns = {"prompt": [f"q{chr(97 + i % 26)}{i}:" for i in range(n)]}
    if levels:  # a difficulty column, as MATH has (per_level anchors read it)
        columns["level"] = [1 + i % 3 for i in range(n)]
    return Dataset.from_dict(columns)


class Recorder:
    """Mixin recording, per generation batch, the gathered rewards and the advantages handed to training,
    and, per optimiser step, the advantages the loss actually consumed."""

    def _calculate_rewards(self, *args, **kwargs):
        rewards = super()._calculate_rewards(*args, **kwargs)
        if self.model.training:
            self.rec_rewards.append(rewards.clone())
        return rewards

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.rec_advantages.append(output["advantages"].clone())
            self.rec_levels.append([row.get("level") for row in inputs])
        return output

    def _compute_loss(self, model, inputs):
        if self.model.training:
            self.rec_trained.append(inputs["advantages"].detach().clone())
        return super()._compute_loss(model, inputs)


class RecGRPO(Recorder, GRPOTrainer):
    pass


class RecHADW(Recorder, HADWGRPOTrainer):
    pass


def make_trainer(
    cls, model_dir: Path, out: Path, config_cls=HADWGRPOConfig, train_n: int = 16, levels: bool = False, **overrides
):
    options = dict(
        output_dir=str(out),
        per_device_train_batch_size=8,
        num_generations=G,
        max_completion_length=8,
        max_steps=2,
        learning_rate=1e-3,  # large enough that a different advantage would change the next batch
        report_to=[],
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    options.update(overrides)
    trainer = cls(
        model=str(model_dir),
        reward_funcs=[correct, brevity],
        args=config_cls(**options),
        train_dataset=dataset(train_n, levels),
        eval_dataset=dataset(8) if options.get("eval_strategy", "no") != "no" else None,
    )
    trainer.rec_rewards, trainer.rec_advantages, trainer.rec_trained, trainer.rec_levels = [], [], [], []
    return trainer


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """A tiny model gains nothing from intra-op threads, and on a shared CI box they contend (2-3x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "model",
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
    )


def losses(trainer) -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_disabled_equals_plain_grpo_trainer(tiny_model, tmp_path):
    plain = make_trainer(RecGRPO, tiny_model, tmp_path / "plain", config_cls=GRPOConfig)
    plain.train()
    off = make_trainer(RecHADW, tiny_model, tmp_path / "off", hadw_enabled=False)
    off.train()
    assert len(plain.rec_advantages) == len(off.rec_advantages) == 2
    for a, b in zip(plain.rec_rewards, off.rec_rewards, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(plain.rec_advantages, off.rec_advantages, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert losses(off) == pytest.approx(losses(plain), rel=1e-6, abs=1e-9)
    # disabled still tracks accuracy (window anchor, one observation per generation batch) and logs it
    accuracies = [float((r[:, 0] > 0.5).float().mean()) for r in off.rec_rewards]
    assert off.hadw_anchor.state_dict()["history"] == pytest.approx(accuracies)
    assert [e["hadw/batch_accuracy"] for e in off.state.log_history if "loss" in e] == pytest.approx(accuracies)


def reference_advantages(
    rewards_per_func: list[torch.Tensor], anchor, lam: float, scale: bool, keys=None, normalize: str = "none"
):
    """Â·Φ and Φ from hadw.core alone, replaying the anchor over the recorded generation batches."""
    out = []
    for b, rewards in enumerate(rewards_per_func):
        total = rewards.nansum(dim=1)  # reward_weights are all 1
        ids = torch.arange(total.numel()) // G
        if scale:
            adv = compute_advantages(total, ids, std="sample", std_floor=0.0, eps=TRL_EPS).advantages
        else:
            adv = compute_advantages(total, ids, estimator="drgrpo").advantages
        correct = (rewards[:, 0] > 0.5).float()
        out.append(apply_hadw(adv, correct, ids, anchor, lam, keys=keys and keys[b], normalize=normalize))
    return [r.advantages for r in out], [r.weights[r.advantages != 0] for r in out]


@pytest.mark.parametrize(
    ("loss_type", "level", "scale_rewards", "anchor", "normalize"),
    [
        ("dapo", "token", "group", "window", "none"),  # TRL's default loss
        ("grpo", "sequence", "group", "kalman", "none"),  # GSPO
        ("dr_grpo", "token", "none", "ema", "none"),
        ("grpo", "token", "group", "window", "batch"),  # hadw_normalize: Φ to mean 1 over informative responses
    ],
)
def test_enabled_advantages_equal_hadw_core(tiny_model, tmp_path, loss_type, level, scale_rewards, anchor, normalize):
    with_eval = loss_type == "dapo"
    trainer = make_trainer(
        RecHADW,
        tiny_model,
        tmp_path,
        loss_type=loss_type,
        importance_sampling_level=level,
        scale_rewards=scale_rewards,
        hadw_anchor=anchor,
        hadw_correctness_reward="correct",
        hadw_normalize=normalize,
        **(dict(eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=8) if with_eval else {}),
    )
    trainer.train()
    ref_anchor = make_anchor(anchor, **trainer.args.hadw_anchor_options())
    expected, weights = reference_advantages(
        trainer.rec_rewards, ref_anchor, 1.3, scale=scale_rewards != "none", normalize=normalize
    )
    assert len(expected) == 2
    assert all(w.numel() > 0 and w.max() - w.min() > 0.05 for w in weights)  # Φ is not a constant λ here
    if normalize == "batch":  # re-weighting only: Φ averages 1 over the responses it acts on, whatever λ
        assert all(float(w.mean()) == pytest.approx(1.0, abs=1e-5) for w in weights)
    for got, want in zip(trainer.rec_advantages, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # the loss consumed exactly these advantages (TRL shuffles within the generation batch)
    for used, want in zip(trainer.rec_trained, expected, strict=True):
        torch.testing.assert_close(used.sort().values, want.sort().values, rtol=1e-5, atol=1e-6)
    if not with_eval:  # the completions table shows the trained-on advantages (eval would overwrite it)
        assert list(trainer._logs["advantages"]) == pytest.approx(expected[-1].tolist(), rel=1e-5, abs=1e-6)
    # one anchor update per training generation batch, none from evaluation; anchor state identical
    assert trainer.hadw_anchor.state_dict() == ref_anchor.state_dict()
    if with_eval:
        assert any("eval_loss" in e for e in trainer.state.log_history)
    logged = [e for e in trainer.state.log_history if "loss" in e]
    assert all("hadw/anchor" in e and "hadw/phi_mean" in e for e in logged)


def test_per_level_anchor_reads_the_level_column(tiny_model, tmp_path):
    """per_level in TRL: each completion's level comes from the dataset's `level` column; the advantages
    equal hadw.core replayed with those keys, and the anchor holds one history per level seen."""
    trainer = make_trainer(RecHADW, tiny_model, tmp_path, levels=True, hadw_anchor="per_level", max_steps=3)
    trainer.train()
    ref_anchor = make_anchor("per_level", **trainer.args.hadw_anchor_options())
    expected, _ = reference_advantages(trainer.rec_rewards, ref_anchor, 1.3, scale=True, keys=trainer.rec_levels)
    for got, want in zip(trainer.rec_advantages, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    state = trainer.hadw_anchor.state_dict()
    assert state == ref_anchor.state_dict()
    assert sorted(state["per_key"]) == sorted({str(k) for keys in trainer.rec_levels for k in keys})
    # without the column: one clear line naming it
    missing = make_trainer(HADWGRPOTrainer, tiny_model, tmp_path / "m", hadw_anchor="per_source", max_steps=1)
    with pytest.raises(ValueError, match="needs a 'source' column in the training dataset"):
        missing.train()


def test_anchor_observes_once_per_generation_batch(tiny_model, tmp_path):
    # 2 optimiser steps share one generation batch of 8 completions: one observation, one Φ for both
    trainer = make_trainer(RecHADW, tiny_model, tmp_path, per_device_train_batch_size=4, steps_per_generation=2)
    trainer.train()
    assert len(trainer.rec_advantages) == 1 and len(trainer.rec_trained) == 2
    assert len(trainer.hadw_anchor.state_dict()["history"]) == 1
    used = torch.cat(trainer.rec_trained).sort().values
    torch.testing.assert_close(used, trainer.rec_advantages[0].sort().values, rtol=0, atol=0)


def test_checkpoint_resume_restores_anchor(tiny_model, tmp_path):
    straight = make_trainer(HADWGRPOTrainer, tiny_model, tmp_path / "straight", max_steps=3)
    straight.train()
    first = make_trainer(
        HADWGRPOTrainer, tiny_model, tmp_path / "run", max_steps=2, save_strategy="steps", save_steps=2
    )
    first.train()
    checkpoint = tmp_path / "run" / "checkpoint-2"
    saved = json.loads((checkpoint / ANCHOR_STATE_NAME).read_text())
    assert saved == first.hadw_anchor.state_dict() and len(saved["history"]) == 2

    resumed = make_trainer(HADWGRPOTrainer, tiny_model, tmp_path / "run", max_steps=3)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    history = resumed.hadw_anchor.state_dict()["history"]
    assert len(history) == 3 and history[:2] == saved["history"]  # a fresh anchor would hold 1 value
    assert history == pytest.approx(straight.hadw_anchor.state_dict()["history"])


def test_config_validation_and_reward_resolution(tmp_path):
    common = dict(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, report_to=[], use_cpu=True
    )
    with pytest.raises(ValueError, match=r"hadw_anchor='median'.*allowed: window"):
        HADWGRPOConfig(**common, hadw_anchor="median")
    with pytest.raises(ValueError, match="kalman anchor needs"):
        HADWGRPOConfig(**common, hadw_anchor="kalman", hadw_anchor_m=1)
    kalman = HADWGRPOConfig(**common, hadw_anchor="kalman", hadw_anchor_eta=0.5, hadw_anchor_m=4)
    assert kalman.hadw_anchor_options() == {"eta": 0.5, "m": 4, "eta_min": 0.2}
    assert HADWGRPOConfig(**common, hadw_anchor="fixed", hadw_anchor_value=0.4).hadw_anchor_options() == {"value": 0.4}
    names = ["brevity", "correct"]
    assert resolve_reward_index(None, names) == 0
    assert resolve_reward_index("correct", names) == 1
    assert resolve_reward_index("1", names) == 1 and resolve_reward_index(1, names) == 1
    with pytest.raises(ValueError, match="out of range"):
        resolve_reward_index(2, names)
    with pytest.raises(ValueError, match="not a reward function"):
        resolve_reward_index("accuracy", names)


# --------------------------------------------------------------------------------------------------
# Two processes (gloo on CPU): every rank must hold the same anchor, computed from the gathered rewards.


def _ddp_worker(model_dir: str, out_dir: str) -> None:
    trainer = make_trainer(RecHADW, Path(model_dir), Path(out_dir) / "trainer", per_device_train_batch_size=4)
    trainer.train()
    rank = trainer.accelerator.process_index
    n_local = 4
    local_accuracy = [
        float((r[rank * n_local : (rank + 1) * n_local, 0] > 0.5).float().mean()) for r in trainer.rec_rewards
    ]
    state = {"anchor": trainer.hadw_anchor.state_dict(), "local_accuracy": local_accuracy}
    (Path(out_dir) / f"anchor_rank{rank}.json").write_text(json.dumps(state))
    trainer.accelerator.wait_for_everyone()


@pytest.mark.slow
def test_two_processes_share_one_anchor(tiny_model, tmp_path):
    accelerate = Path(sys.executable).with_name("accelerate")
    if shutil.which(str(accelerate)) is None:
        pytest.skip(f"accelerate launcher not found beside {sys.executable}")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "OMP_NUM_THREADS": "1"}
    # accelerate's --cpu flag starts ONE process; --multi_gpu uses torchrun, and with no GPU (and the
    # trainer's use_cpu=True) the two processes talk over gloo on CPU.
    cmd = [
        str(accelerate),
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",  # a free port: another test (another pytest-xdist worker) may hold accelerate's 29500
        str(free_port()),
        __file__,
        str(tiny_model),
        str(tmp_path),
    ]
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"anchor_rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["anchor"] == ranks[1]["anchor"]
    history = ranks[0]["anchor"]["history"]
    assert len(history) == 2
    # the anchor saw the global batch (the mean of both ranks' halves), not either rank's own half
    for t, y in enumerate(history):
        assert y == pytest.approx((ranks[0]["local_accuracy"][t] + ranks[1]["local_accuracy"][t]) / 2)
    assert any(a != b for a, b in zip(ranks[0]["local_accuracy"], ranks[1]["local_accuracy"], strict=True))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    _ddp_worker(sys.argv[1], sys.argv[2])
    # Both ranks have written their file and met at a barrier. Leave without C++ teardown: rank 0 hosts the TCP
    # store, and when it exits first the other rank's gloo threads can abort ("terminate called without an active
    # exception": 1 in 12 runs under load, and CI stop 36), while destroy_process_group() instead hung 2 in 30.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def test_anchor_state_is_in_the_checkpoint_before_it_is_pushed(tiny_model, tmp_path, monkeypatch):
    """Issue 14: transformers pushes a checkpoint to the Hub inside _save_checkpoint; the anchor file must
    already be in the folder then (it was written after the push before)."""
    seen = []
    record = lambda self, folder: seen.append((Path(folder) / ANCHOR_STATE_NAME).is_file())
    monkeypatch.setattr(GRPOTrainer, "_push_from_checkpoint", record)
    trainer = make_trainer(HADWGRPOTrainer, tiny_model, tmp_path / "run", max_steps=2, save_strategy="steps",
                           save_steps=2)  # fmt: skip
    trainer.args.push_to_hub = True  # no network: the push itself is replaced above
    trainer.train()
    assert seen == [True]


def test_a_peft_config_passes_through_to_trl_unchanged(tiny_model, tmp_path):
    """LoRA with TRL: HADWGRPOTrainer hands `peft_config` to GRPOTrainer as is; TRL's own LoRA path trains the
    adapters (with Â·Φ) and leaves the base weights alone."""
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    args = HADWGRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=G,
                          max_completion_length=8, max_steps=1, learning_rate=1e-3, report_to=[], use_cpu=True,
                          save_strategy="no", seed=0, disable_tqdm=True, hadw_enabled=True)  # fmt: skip
    trainer = HADWGRPOTrainer(model=str(tiny_model), reward_funcs=[correct, brevity], args=args,
                              train_dataset=dataset(8), peft_config=config)  # fmt: skip
    assert isinstance(trainer.model, peft.PeftModel)
    assert trainer.model.peft_config["default"] is config  # unchanged: the very object given
    base = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    trainer.train()
    after = dict(trainer.model.named_parameters())
    assert all(torch.equal(after[n], p) for n, p in base.items())
    assert len(trainer.hadw_anchor.state_dict()["history"]) == 1  # HA-DW ran on TRL's LoRA policy
