"""End-to-end trainer checks on a very small model (a few seconds each)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from hadw.rewards import RewardFunction, register_reward
from hadw.train import trainer as trainer_module
from hadw.train.checkpoint import latest_checkpoint, load_model_weights
from hadw.train.config import ConfigError, load_config
from hadw.train.metrics_log import read_jsonl
from hadw.train.trainer import NonFiniteLossError, Trainer


def _has_digit(completion: str, answer: str) -> float:
    # A random model emits random bytes: about half its responses contain a digit, so groups are
    # mixed and the anchor has something to track.
    return float(any(c.isdigit() for c in completion))


def _flaky(completion: str, answer: str) -> float:
    if len(completion) % 2:
        raise RuntimeError("verifier crashed on this item")
    return 1.0


register_reward(RewardFunction("test_has_digit", _has_digit))
register_reward(RewardFunction("test_flaky", _flaky))


def _overrides(tiny_path, out_dir, *extra: str) -> list[str]:
    return [
        f"model.path={tiny_path}",
        "data.source=task:addition",
        "data.template=plain",
        "data.chat_template=never",
        "data.eval_size=8",
        "reward.functions=[test_has_digit]",
        "reward.correctness=test_has_digit",
        "rollout.group_size=4",
        "rollout.max_new_tokens=5",
        "train.prompts_per_step=4",
        "train.mini_batch_prompts=2",
        "train.steps=3",
        f"train.output_dir={out_dir}",
        "optim.lr=1e-3",
        "optim.warmup_steps=0",
        "logging.progress=false",
        "logging.sample_every=1",
        "train.num_threads=1",
        *extra,
    ]


@pytest.mark.parametrize("preset", ["grpo", "gspo", "dapo"])
@pytest.mark.parametrize("hadw", [False, True])
def test_three_steps_of_each_preset(tiny_path, tmp_path, preset, hadw):
    extra = [f"algorithm.preset={preset}", f"hadw.enabled={str(hadw).lower()}"]
    if preset == "dapo":
        extra += ["algorithm.dynamic_sampling=true", "algorithm.overlong=penalty", "algorithm.overlong_buffer=2"]
    trainer = Trainer(load_config(None, _overrides(tiny_path, tmp_path / "run", *extra)))
    initial = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    records = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")]
    assert [r["step"] for r in records] == [1, 2, 3]
    for r in records:
        assert math.isfinite(r["actor/pg_loss"]) and math.isfinite(r["actor/grad_norm"])
        for key in ("critic/score/mean", "hadw/anchor", "actor/pg_clipfrac", "timing_s/gen", "perf/throughput"):
            assert key in r
    history = trainer.anchor.state_dict()["history"]
    assert len(history) == 3 and len(set(history)) > 1  # one observation per step, and it moved
    assert [r["hadw/anchor"] for r in records] == pytest.approx([sum(history[: i + 1]) / (i + 1) for i in range(3)])
    if hadw:
        assert any(r["hadw/phi_max"] != r["hadw/phi_min"] for r in records)
    else:
        assert all("hadw/phi_mean" not in r for r in records)  # Φ = 1: nothing to report
    assert any(not torch.equal(a, b) for a, b in zip(initial, trainer.model.parameters(), strict=True))
    if preset == "dapo":
        assert all("batch/refill_rounds" in r for r in records)
    assert (tmp_path / "run" / "final_model" / "config.json").is_file()
    assert read_jsonl(tmp_path / "run" / "samples.jsonl")


def test_resume_is_bit_for_bit(tiny_path, tmp_path):
    straight = Trainer(load_config(None, _overrides(tiny_path, tmp_path / "a", "train.steps=6", "hadw.enabled=true")))
    straight.train()

    first = Trainer(load_config(None, _overrides(tiny_path, tmp_path / "b", "train.steps=3", "hadw.enabled=true")))
    first.train()
    resumed = Trainer(
        load_config(None, _overrides(tiny_path, tmp_path / "b", "train.steps=6", "hadw.enabled=true")), resume=True
    )
    assert resumed.start_step == 3
    resumed.train()

    for p, q in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert straight.anchor.state_dict() == resumed.anchor.state_dict()
    a = [r for r in read_jsonl(tmp_path / "a" / "metrics.jsonl")]
    b = [r for r in read_jsonl(tmp_path / "b" / "metrics.jsonl")]
    assert [r["step"] for r in b] == [1, 2, 3, 4, 5, 6]
    assert [r["actor/pg_loss"] for r in a] == [r["actor/pg_loss"] for r in b]


def test_evaluation_does_not_touch_the_anchor(tiny_path, tmp_path):
    trainer = Trainer(load_config(None, _overrides(tiny_path, tmp_path / "run", "hadw.enabled=true")))
    trainer.train_step(0)
    before = trainer.anchor.state_dict()
    trainer.evaluate()
    trainer.evaluate()
    assert trainer.anchor.state_dict() == before


def test_a_raising_reward_is_counted_not_fatal(tiny_path, tmp_path):
    cfg = load_config(
        None, _overrides(tiny_path, tmp_path / "run", "reward.functions=[test_has_digit,test_flaky]", "train.steps=2")
    )
    Trainer(cfg).train()
    records = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")]
    assert sum(r["reward/errors"] for r in records) > 0


def test_non_finite_loss_stops_and_keeps_last_checkpoint(tiny_path, tmp_path, monkeypatch):
    cfg = load_config(None, _overrides(tiny_path, tmp_path / "run", "train.steps=4", "checkpoint.every=1"))
    trainer = Trainer(cfg)
    real_loss, calls = trainer_module.policy_loss, {"n": 0}

    def poisoned(*args, **kwargs):
        loss, metrics = real_loss(*args, **kwargs)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] > 4 else loss), metrics  # 2 mini-batches a step

    monkeypatch.setattr(trainer_module, "policy_loss", poisoned)
    with pytest.raises(NonFiniteLossError, match="step 2: loss is nan"):
        trainer.train()
    checkpoint = latest_checkpoint(tmp_path / "run")
    assert checkpoint is not None and checkpoint.name == "checkpoint-000002"
    load_model_weights(trainer.model, checkpoint / "model")  # loadable
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_config_errors_name_key_and_allowed_values(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'hadw.lam'"):
        load_config(None, ["hadw.lamda=1.0"])
    with pytest.raises(ConfigError, match=r"algorithm.preset='ppo' is not allowed; allowed values: grpo, gspo, dapo"):
        load_config(None, ["algorithm.preset=ppo"])
    with pytest.raises(ConfigError, match=r"rollout.top_p=1.5 is out of range"):
        load_config(None, ["rollout.top_p=1.5"])
    with pytest.raises(ConfigError, match="train.steps"):
        load_config(None, ["train.steps=many"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("hadw:\n  anchr: window\n")
    with pytest.raises(ConfigError, match="did you mean 'hadw.anchor'"):
        load_config(bad)


def test_presets_fill_the_loss_from_table_8():
    assert load_config(None, ["algorithm.preset=gspo"]).algorithm.loss_spec().clip_high == 4e-4
    spec = load_config(None, ["algorithm.preset=dapo", "algorithm.clip_high=0.3"]).algorithm.loss_spec()
    assert (spec.clip_low, spec.clip_high, spec.aggregation) == (0.2, 0.3, "token-mean")


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[1] / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_load(path):
    cfg = load_config(path)
    assert cfg.algorithm.preset in ("grpo", "gspo", "dapo")


def test_tiny_example_is_the_demos_rl_recipe():
    """The quick start's examples/tiny_grpo_hadw.yaml trains what `hadw demo` measured (task, levels, lr, optimiser
    steps per batch, ...), so a user following the README gets the recipe whose results the README shows."""
    from hadw.experiments.demo import DemoSettings, rl_overrides

    paths = ["model.path=m", "train.output_dir=o"]
    example = load_config(Path(__file__).parents[1] / "examples" / "tiny_grpo_hadw.yaml", paths)
    demo = load_config(None, rl_overrides(DemoSettings(), Path("m"), Path("o"), hadw=True))
    for section in ("model", "data", "reward", "rollout", "algorithm", "hadw", "optim"):
        assert getattr(example, section) == getattr(demo, section), section
    fields = ("steps", "prompts_per_step", "mini_batch_prompts", "seed", "output_dir", "num_threads")
    assert [getattr(example.train, f) for f in fields] == [getattr(demo.train, f) for f in fields]


def test_the_demos_warm_start_does_not_depend_on_the_machines_speed(tmp_path, monkeypatch):
    # A 300 s wall-clock limit once cut SFT short on a busy machine: another warm start, another table.
    from hadw.experiments import demo
    from hadw.train import sft

    clock = iter(range(0, 10**9, 1000))  # every reading 1000 s later: the slowest machine there is
    monkeypatch.setattr(sft.time, "perf_counter", lambda: float(next(clock)))
    lines = []
    settings = demo.DemoSettings()
    from hadw.train.warm_starts import WarmStartError

    with pytest.raises(WarmStartError, match="below the floor"):  # 3 steps reach no level floor: refused after them
        demo.warm_start(tmp_path, settings.sft_seconds, target=2.0, max_steps=3, log=lines.append)
    assert lines[-1].startswith("warm start: rebuilt on this CPU") and ", 3 SFT steps," in lines[-1]


def test_reference_kl_and_tensorboard(tiny_path, tmp_path):
    cfg = load_config(
        None,
        _overrides(
            tiny_path,
            tmp_path / "run",
            "algorithm.kl_coef=0.05",
            "train.steps=2",
            "algorithm.kl_estimator=k3",
            "logging.tensorboard=true",
        ),
    )
    trainer = Trainer(cfg)
    reference = [p.detach().clone() for p in trainer.ref_model.parameters()]
    assert all(torch.equal(p, q) for p, q in zip(reference, trainer.model.parameters(), strict=True))
    trainer.train()
    records = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")]
    assert all(r["actor/kl_loss"] > 0 and math.isfinite(r["actor/kl_loss"]) for r in records)  # k3 >= 0, policy moved
    # the reference stays frozen while the policy moves
    assert all(torch.equal(p, q) for p, q in zip(reference, trainer.ref_model.parameters(), strict=True))
    assert any(not torch.equal(p, q) for p, q in zip(reference, trainer.model.parameters(), strict=True))
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("preset", ["grpo", "dapo"])  # sequence- and token-level aggregation
def test_micro_batches_accumulate_to_the_unsplit_update(tiny_path, tmp_path, preset):
    """The accumulated gradient equals the unsplit one, on any device.

    Compared before the optimiser step: Adam's first step is g/(|g|+eps)·lr, which turns a rounding-level
    gradient (~1e-8, where summation order decides the sign) into an update of up to lr, on a GPU far more
    often than on a CPU. Tolerance: float32 sums over the mini-batch's rows in another order agree to a few
    hundred ulps of the largest gradient of the tensor (2**-23 ≈ 1.2e-7 each): 1e-5 · max|g|.
    """

    def grads_of_one_step(extra):
        trainer = Trainer(
            load_config(
                None,
                _overrides(tiny_path, tmp_path / extra, f"algorithm.preset={preset}", "optim.grad_clip=1000", extra),
            )
        )
        grads, step = [], trainer.optimizer.step
        trainer.optimizer.step = lambda *a, **k: (
            grads.append([p.grad.clone() for p in trainer.model.parameters()]),
            step(*a, **k),
        )[1]
        metrics = trainer.train_step(0)
        return grads, metrics

    whole, m_whole = grads_of_one_step("train.micro_batch_size=0")
    split, m_split = grads_of_one_step("train.micro_batch_size=3")  # 8 rows per mini-batch: 3 + 3 + 2
    assert len(whole) == len(split) >= 1
    for step_whole, step_split in zip(whole, split, strict=True):
        for g, h in zip(step_whole, step_split, strict=True):
            torch.testing.assert_close(h, g, rtol=1e-4, atol=1e-5 * float(g.abs().max()) + 1e-12)
    assert m_split["actor/pg_loss"] == pytest.approx(m_whole["actor/pg_loss"], rel=1e-4, abs=1e-6)
    assert m_split["actor/grad_norm"] == pytest.approx(m_whole["actor/grad_norm"], rel=1e-4)


@pytest.mark.parametrize("kind", ["per_level", "per_prompt"])
def test_keyed_anchors_see_each_response_key_and_checkpoint(tiny_path, tmp_path, kind):
    """The trainer passes each response's level / prompt uid to the anchor: one history per level seen,
    one count list per prompt seen, each with one visit per step it was sampled in."""
    cfg = load_config(None, _overrides(tiny_path, tmp_path / "run", "hadw.enabled=true", f"hadw.anchor={kind}"))
    trainer = Trainer(cfg)
    seen: list = []
    original = trainer.source.batch
    trainer.source.batch = lambda *a, **k: seen.extend(original(*a, **k)) or seen[-cfg.train.prompts_per_step :]
    trainer.train()
    state = trainer.anchor.state_dict()
    assert len(state["batch"]["history"]) == 3
    if kind == "per_level":
        assert sorted(state["per_key"]) == sorted({str(p.level) for p in seen})
        assert all(len(a["history"]) >= 1 for a in state["per_key"].values())
    else:
        assert {k for k, _ in state["counts"]} == {p.uid for p in seen}
        assert all(total == cfg.rollout.group_size for _, visits in state["counts"] for _, total in visits)


def test_keyed_anchor_refuses_prompts_without_the_column():
    from hadw.core import make_anchor
    from hadw.data import Problem
    from hadw.errors import UserError
    from hadw.train.trainer import anchor_keys

    rows = [Problem("1+1", "2", None, "file.jsonl", "file.jsonl:0")]
    assert anchor_keys(make_anchor("window"), rows) is None
    assert anchor_keys(make_anchor("per_source"), rows) == ["file.jsonl"]
    assert anchor_keys(make_anchor("per_prompt"), rows) == ["file.jsonl:0"]
    with pytest.raises(UserError, match="hadw.anchor=per_level needs a level for every prompt"):
        anchor_keys(make_anchor("per_level"), rows)


def test_per_prompt_anchor_resumes_from_its_checkpoint(tiny_path, tmp_path):
    """The keyed state (batch anchor + prompt-id -> recent counts) is checkpointed: 2 + 2 steps hold the
    same anchor as 4 straight (a fresh anchor after the resume would hold 2 batch observations)."""
    extra = ("hadw.enabled=true", "hadw.anchor=per_prompt", "hadw.prompt_visits=2")
    straight = Trainer(load_config(None, _overrides(tiny_path, tmp_path / "a", "train.steps=4", *extra)))
    straight.train()
    Trainer(load_config(None, _overrides(tiny_path, tmp_path / "b", "train.steps=2", *extra))).train()
    resumed = Trainer(load_config(None, _overrides(tiny_path, tmp_path / "b", "train.steps=4", *extra)), resume=True)
    resumed.train()
    assert len(resumed.anchor.state_dict()["batch"]["history"]) == 4
    assert resumed.anchor.state_dict() == straight.anchor.state_dict()


def _weights_after(tiny_path, out_dir, *extra: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(initial, final) flat weights of a 3-step HA-DW run with a reward that has signal."""
    trainer = Trainer(load_config(None, _overrides(tiny_path, out_dir, "hadw.enabled=true", "logging.sample_every=0",
                                                   "optim.grad_clip=0", *extra)))  # fmt: skip
    initial = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    trainer.train()
    return initial, torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


def test_lambda_cancels_under_adamw_and_acts_under_sgd_or_kl(tiny_path, tmp_path):
    """Φ = λ·exp(D·M): λ is a global factor of every advantage. AdamW's step m̂/(√v̂+ε) is unchanged by it up to
    ε, so with no KL / entropy term and no clip λ = 1 and λ = 1.5 train the same weights (to a tolerance that
    shrinks with ε: it is ε that breaks the invariance); under plain SGD λ is a learning rate, and with a KL term it
    changes the policy loss's weight relative to the KL's. Measured: 4e-4 (ε = 1e-8), 3e-6 (ε = 1e-12), 0.8 (SGD),
    0.04 (KL 5), as a share of the update's norm."""

    def relative_gap(*extra: str) -> float:
        w0, a = _weights_after(tiny_path, tmp_path / f"a{len(list(tmp_path.iterdir()))}", "hadw.lam=1.0", *extra)
        _, b = _weights_after(tiny_path, tmp_path / f"b{len(list(tmp_path.iterdir()))}", "hadw.lam=1.5", *extra)
        return float((a - b).norm() / (a - w0).norm())

    assert relative_gap() < 2e-3  # AdamW, ε = 1e-8 (the default)
    assert relative_gap("optim.eps=1e-12") < 5e-5  # the gap is ε's: float32 rounding is all that is left
    assert relative_gap("optim.name=sgd", "optim.lr=0.05") > 0.2
    assert relative_gap("algorithm.kl_coef=5.0") > 0.01
    assert relative_gap("hadw.normalize=batch", "optim.name=sgd", "optim.lr=0.05") < 1e-5  # Φ's mean, λ, removed


def test_advantage_scale_is_lambda_as_a_step_size(tiny_path, tmp_path):
    """algorithm.advantage_scale=1.5 with λ = 1 trains exactly what λ = 1.5 does (both multiply Â·Φ by 1.5)."""
    _, scaled = _weights_after(tiny_path, tmp_path / "s", "hadw.lam=1.0", "algorithm.advantage_scale=1.5",
                               "optim.name=sgd", "optim.lr=0.05")  # fmt: skip
    _, lam = _weights_after(tiny_path, tmp_path / "l", "hadw.lam=1.5", "optim.name=sgd", "optim.lr=0.05")
    torch.testing.assert_close(scaled, lam, rtol=1e-5, atol=1e-7)


def test_default_optimiser_and_options_are_the_previous_ones(tiny_path, tmp_path):
    """The new options' defaults are today's trainer: fused AdamW with torch's ε, advantages unscaled, Φ not
    normalised, and a run with them spelled out is bit-for-bit the default run. (Checked once against the
    commit before these options existed: identical weights after 3 steps with and without HA-DW.)"""
    cfg = load_config(None, _overrides(tiny_path, tmp_path / "d", "hadw.enabled=true"))
    assert (cfg.optim.name, cfg.optim.eps, cfg.algorithm.advantage_scale, cfg.hadw.normalize) == (
        "adamw", 1e-8, 1.0, "none")  # fmt: skip
    trainer = Trainer(cfg)
    opt = trainer.optimizer
    assert type(opt) is torch.optim.AdamW and opt.defaults["fused"] and opt.defaults["eps"] == 1e-8
    trainer.train()
    default = [p.detach().clone() for p in trainer.model.parameters()]
    explicit = Trainer(load_config(None, _overrides(tiny_path, tmp_path / "e", "hadw.enabled=true", "optim.name=adamw",
                                                    "optim.eps=1e-8", "algorithm.advantage_scale=1.0",
                                                    "hadw.normalize=none")))  # fmt: skip
    explicit.train()
    assert all(torch.equal(p, q) for p, q in zip(default, explicit.model.parameters(), strict=True))
    sgd = Trainer(load_config(None, _overrides(tiny_path, tmp_path / "g", "optim.name=sgd")))
    assert type(sgd.optimizer) is torch.optim.SGD and sgd.optimizer.defaults["momentum"] == 0
    sgd._lock.release()
    with pytest.raises(ConfigError, match="optim.name='adam'"):
        load_config(None, ["optim.name=adam"])
    with pytest.raises(ConfigError, match="hadw.normalize"):
        load_config(None, ["hadw.normalize=mean"])


def test_a_tiny_warm_start_below_the_level_floor_is_said(tmp_path, capsys):
    # Before, a warm start with a level RL cannot learn from (all-wrong groups) was used without a word.
    cfg = load_config(
        None,
        [
            "model.path=",
            "data.source=task:sums",
            "data.levels=[2,3,4]",
            "model.tiny.warm_start_max_steps=50",  # far too few steps to reach the floor on any level
            "model.tiny.warm_start=sft",  # an SFT here, not the shipped start that fits this task
            "train.steps=0",
            f"train.output_dir={tmp_path / 'run'}",
            "logging.progress=off",
        ],
    )
    Trainer(cfg)
    err = capsys.readouterr().err
    assert "warm start: 50 SFT steps" in err
    assert "warning: the warm start is below greedy 0.15 on L2" in err and "L4" in err
