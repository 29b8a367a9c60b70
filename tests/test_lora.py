"""LoRA through peft on the native trainer (model.lora.*): adapters trained, base frozen; the KL reference is the
base with the adapter switched off; checkpoints hold the adapter and its optimiser state; resume is bit-exact;
`hadw eval RUN_DIR` loads base + adapter; merged_model/ on request."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from hadw.rewards import RewardFunction, register_reward
from hadw.rewards.base import REWARDS
from hadw.rollout import compute_logprobs, load_model
from hadw.rollout.lora import is_lora, reference_policy
from hadw.train.config import ConfigError, load_config
from hadw.train.trainer import Trainer

pytest.importorskip("peft")


def _has_digit(completion: str, answer: str) -> float:
    """A reward the random tiny model earns now and then: every group is not all-zero, so there is a gradient."""
    return float(any(c.isdigit() for c in completion))


if "test_lora_digit" not in REWARDS:
    register_reward(RewardFunction("test_lora_digit", _has_digit))


def _overrides(tiny_path, out_dir, *extra: str) -> list[str]:
    return [
        f"model.path={tiny_path}",
        "data.source=task:addition",
        "data.template=plain",
        "data.chat_template=never",
        "data.eval_size=4",
        "reward.functions=[test_lora_digit]",
        "reward.correctness=test_lora_digit",
        "rollout.group_size=4",
        "rollout.max_new_tokens=5",
        "train.prompts_per_step=4",
        "train.mini_batch_prompts=2",
        f"train.output_dir={out_dir}",
        "optim.lr=1e-2",
        "optim.warmup_steps=0",
        "logging.progress=off",
        "logging.sample_every=0",
        "train.num_threads=1",
        "model.lora.enabled=true",
        "model.lora.rank=4",
        "algorithm.kl_coef=0.05",
        *extra,
    ]


def _logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    mask = torch.ones_like(ids)
    response = torch.ones(ids.shape[0], 5, dtype=torch.long)  # the last 5 tokens are the response
    with torch.no_grad():
        return compute_logprobs(model, ids, mask, response, temperature=1.0)


def test_lora_trains_the_adapters_only_with_the_base_as_kl_reference(tiny_path, tmp_path):
    trainer = Trainer(load_config(None, _overrides(tiny_path, tmp_path / "run", "train.steps=2", "checkpoint.every=1")))
    assert is_lora(trainer.model) and trainer.ref_model is None  # no second copy of the weights
    assert trainer.engine.resolved_decoder() == "fused"  # the adapters merged into the fused weights (CPU fp32)
    base = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    adapters = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert adapters and all("lora_" in n for n in adapters)
    trainer.train()

    after = dict(trainer.model.named_parameters())
    assert all(torch.equal(after[n], p) for n, p in base.items())  # the base is frozen
    assert any(not torch.equal(after[n], p) for n, p in adapters.items())  # the adapters moved
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(r["actor/kl_loss"]) for r in records) and records[-1]["actor/kl_loss"] > 0

    # the reference: the adapter switched off is exactly the base model as loaded from its folder
    ids = torch.randint(3, 60, (2, 9))
    fresh, _ = load_model(tiny_path, device="cpu")
    with reference_policy(trainer.model) as reference:
        assert torch.equal(_logprobs(reference, ids), _logprobs(fresh, ids))
    assert not torch.equal(_logprobs(trainer.model, ids), _logprobs(fresh, ids))

    # a checkpoint holds the adapter and the adapters' optimiser state only
    folder = tmp_path / "run" / "checkpoint-000002" / "model"
    assert (folder / "adapter_config.json").is_file() and not (folder / "model.safetensors").exists()
    assert set(load_file(folder / "adapter_model.safetensors")) and all(
        "lora_" in k for k in load_file(folder / "adapter_model.safetensors")
    )
    optimizer = torch.load(folder.parent / "trainer_state.pt", weights_only=True)["optimizer"]
    assert len(optimizer["state"]) == len(adapters)


def test_lora_resume_is_bit_for_bit(tiny_path, tmp_path):
    straight = Trainer(load_config(None, _overrides(tiny_path, tmp_path / "a", "train.steps=4", "hadw.enabled=true")))
    straight.train()
    first = Trainer(load_config(None, _overrides(tiny_path, tmp_path / "b", "train.steps=2", "hadw.enabled=true")))
    first.train()
    resumed = Trainer(
        load_config(None, _overrides(tiny_path, tmp_path / "b", "train.steps=4", "hadw.enabled=true")), resume=True
    )
    assert resumed.start_step == 2
    resumed.train()
    for (name, p), (_, q) in zip(straight.model.named_parameters(), resumed.model.named_parameters(), strict=True):
        assert torch.equal(p, q), name
    a = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["actor/pg_loss"] for r in a] == [r["actor/pg_loss"] for r in b]


def test_eval_of_a_lora_run_loads_base_plus_adapter_and_merged_model_matches(tiny_path, tmp_path):
    from typer.testing import CliRunner

    from hadw.cli import build_app
    from hadw.eval.run_recipe import read_run

    run = tmp_path / "run"
    trainer = Trainer(load_config(None, _overrides(tiny_path, run, "train.steps=1", "model.lora.save_merged=true")))
    trainer.train()
    assert read_run(run).model == run / "final_model"
    merged, _ = load_model(run / "final_model", device="cpu")  # base + adapter, merged: a plain model
    assert not is_lora(merged)
    ids = torch.randint(3, 60, (2, 9))
    trained = _logprobs(trainer.model, ids)
    torch.testing.assert_close(_logprobs(merged, ids), trained, atol=1e-5, rtol=0)
    saved, _ = load_model(run / "merged_model", device="cpu")  # model.lora.save_merged: a normal model folder
    assert (run / "merged_model" / "config.json").is_file()
    torch.testing.assert_close(_logprobs(saved, ids), trained, atol=1e-5, rtol=0)

    result = CliRunner().invoke(build_app(), ["eval", str(run), "--limit", "2", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "final_model" in "".join(result.output.split())  # rich wraps a long path (pytest-xdist's tmp is longer)


def test_an_adapter_whose_base_is_gone_is_one_line(tiny_path, tmp_path):
    from hadw.rollout.models import ModelNotFoundError

    run = tmp_path / "run"
    Trainer(load_config(None, _overrides(tiny_path, run, "train.steps=1"))).train()
    config = run / "final_model" / "adapter_config.json"
    data = json.loads(config.read_text())
    data["base_model_name_or_path"] = str(tmp_path / "gone")
    config.write_text(json.dumps(data))
    with pytest.raises(ModelNotFoundError, match="LoRA adapter whose base model .*gone is not there"):
        load_model(run / "final_model")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.lora.rank=0", "model.lora.rank=0 is out of range"),
        ("model.lora.dropout=1", "model.lora.dropout=1.0 is out of range"),
        ("model.lora.target_modules=", "model.lora.target_modules is empty"),
    ],
)
def test_lora_settings_are_checked(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["model.lora.enabled=true", override])


def test_lora_without_peft_is_one_line_naming_the_extra(tiny_path, tmp_path, monkeypatch):
    import sys

    from hadw.errors import MissingExtraError

    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` fails as when it is not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'hadw\[lora\]'"):
        Trainer(load_config(None, _overrides(tiny_path, tmp_path / "run", "train.steps=1")))


def test_lora_with_gradient_checkpointing_trains_the_adapters(tiny_path, tmp_path):
    """LoRA and gradient checkpointing together still train the adapters. (transformers 5 checkpoints without
    re-entrance; with 4.x's re-entrant default the frozen embeddings' output needs requires_grad, which the trainer
    sets: enable_input_require_grads.)"""
    extra = ["train.steps=2", "model.gradient_checkpointing=true", "algorithm.kl_coef=0"]
    cfg = load_config(None, _overrides(tiny_path, tmp_path / "run", *extra))
    trainer = Trainer(cfg)
    adapters = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(after[n], p) for n, p in adapters.items())


def test_a_lora_model_generates_and_scores_without_future_warnings(tiny_path):
    """hadw's own calls into transformers use the current API: a LoRA model's KV cache went through
    `past_key_values=` (deprecated, removed in transformers 5.40) on every decode step, with a FutureWarning each."""
    import warnings

    from hadw.rollout import HFRolloutEngine, SamplingParams
    from hadw.rollout.lora import LoraSettings, add_lora

    model, tokenizer = load_model(tiny_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        lora = add_lora(model, LoraSettings(4, 8.0, 0.0, "all-linear"), str(tiny_path))
        for decoder in ("hf", "auto", "fused"):
            batch = HFRolloutEngine(lora, tokenizer, decoder=decoder).generate([[5, 6, 7]], SamplingParams(n=2))
            assert batch.response_mask.shape[0] == 2


def test_an_adapter_refuses_another_model_at_its_base_path(tmp_path):
    """A LoRA run records its base's fingerprint: another model at that path is refused in one line by eval and by
    --resume (the adapter was merged silently into whatever sat there)."""
    import shutil

    from hadw.rollout import build_tiny_model
    from hadw.rollout.models import ModelNotFoundError
    from hadw.train.checkpoint import CheckpointError

    shape = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64)
    base = build_tiny_model(tmp_path / "base", seed=0, **shape)
    run = tmp_path / "run"
    Trainer(load_config(None, _overrides(base, run, "train.steps=2", "checkpoint.every=1"))).train()
    load_model(run / "final_model")  # the same base: loads
    shutil.rmtree(base)
    build_tiny_model(tmp_path / "base", seed=1, **shape)  # another model, same path, same shape
    with pytest.raises(ModelNotFoundError, match="is not the one the LoRA adapter .* was trained on"):
        load_model(run / "final_model")
    with pytest.raises(CheckpointError, match="is not the one the LoRA adapter"):
        Trainer(load_config(None, _overrides(base, run, "train.steps=3", "checkpoint.every=1")), resume=True)


def _middle_tensor_bytes(path):
    """(start, end) of the largest tensor of the weights file whose bytes lie past the first and before the last MiB
    (what the first fingerprint read); the largest: a weight matrix, not a bias of zeros."""
    raw = path.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + length])
    spans = [(8 + length + v["data_offsets"][0], 8 + length + v["data_offsets"][1])
             for k, v in header.items() if k != "__metadata__"]  # fmt: skip
    inside = [(low, high) for low, high in spans if low > 1 << 20 and len(raw) - high > 1 << 20]
    assert inside, "the tiny base is too small for this test"
    return max(inside, key=lambda span: span[1] - span[0])


def test_the_base_check_cannot_be_dodged(tmp_path):
    """Issue 49, finding 4: deleting hadw_base_model.json, or making it a link, skipped the check; a base whose
    weights differ only in the middle of the file passed (only the first and last MiB were read)."""
    import shutil

    from hadw.rollout import build_tiny_model
    from hadw.rollout.lora import BASE_RECORD, _edge_fingerprint, base_fingerprint, check_base
    from hadw.rollout.models import ModelNotFoundError
    from hadw.train.checkpoint import CheckpointError

    base = build_tiny_model(tmp_path / "base", seed=0, hidden_size=128, num_layers=4, intermediate_size=512)
    run = tmp_path / "run"
    Trainer(load_config(None, _overrides(base, run, "train.steps=1", "checkpoint.every=1"))).train()
    adapter = run / "final_model"
    record = json.loads((adapter / BASE_RECORD).read_text())
    assert record["fingerprint"] == base_fingerprint(base) and record["fingerprint"].startswith("v2:")

    # the same base, other weights in the middle of its file (same size, same header, same first and last MiB)
    original = tmp_path / "original"
    shutil.copytree(base, original)
    weights = base / "model.safetensors"
    low, high = _middle_tensor_bytes(weights)
    raw = bytearray(weights.read_bytes())
    raw[low:high] = (torch.frombuffer(bytes(raw[low:high]), dtype=torch.float32) * 1.5).numpy().tobytes()
    weights.write_bytes(bytes(raw))
    assert _edge_fingerprint(base) == _edge_fingerprint(original)  # what the old check saw: the same
    with pytest.raises(ModelNotFoundError, match="is not the one the LoRA adapter .* was trained on"):
        load_model(adapter)
    shutil.rmtree(base)
    shutil.copytree(original, base)
    load_model(adapter)  # the right base: loads

    # the record made a link, then deleted: refused in eval and on --resume, never skipped
    (adapter / BASE_RECORD).rename(tmp_path / "record.json")
    (adapter / BASE_RECORD).symlink_to(tmp_path / "record.json")
    with pytest.raises(ModelNotFoundError, match=rf"{BASE_RECORD} is a link, not the record hadw writes"):
        load_model(adapter)
    (adapter / BASE_RECORD).unlink()
    with pytest.raises(ModelNotFoundError, match=rf"has no {BASE_RECORD}, so the base model at .* cannot be checked"):
        load_model(adapter)
    checkpoint_model = run / "checkpoint-000001" / "model"
    (checkpoint_model / BASE_RECORD).unlink()
    with pytest.raises(CheckpointError, match=rf"has no {BASE_RECORD}"):
        Trainer(load_config(None, _overrides(base, run, "train.steps=2", "checkpoint.every=1")), resume=True)

    # an adapter from elsewhere (no run around it) has no record: used, with a warning naming the risk
    elsewhere = tmp_path / "downloaded"
    shutil.copytree(adapter, elsewhere)
    with pytest.warns(UserWarning, match="another model there would be merged into silently"):
        check_base(elsewhere, base, required=False)


def test_a_record_of_the_first_fingerprint_is_still_checked_as_written(tmp_path):
    from hadw.rollout import build_tiny_model
    from hadw.rollout.lora import BASE_RECORD, _edge_fingerprint, check_base

    shape = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    base = build_tiny_model(tmp_path / "base", seed=0, **shape)
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / BASE_RECORD).write_text(json.dumps({"fingerprint": _edge_fingerprint(base)}))
    check_base(tmp_path / "adapter", base)  # an older run's record: still matches its base
    other = build_tiny_model(tmp_path / "other", seed=1, **shape)
    with pytest.raises(ValueError, match="is not the one the LoRA adapter"):
        check_base(tmp_path / "adapter", other)
