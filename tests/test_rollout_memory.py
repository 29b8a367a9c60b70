"""Generation sizes its chunks by memory: the probe that asked for 106 GB on a 135 M model now fits."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from hadw.rollout import HFRolloutEngine, SamplingParams, build_tiny_model, load_model
from hadw.rollout.memory import bytes_per_row, rows_per_chunk

# SmolLM2-135M's shapes
SMOL = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                   num_attention_heads=9, num_key_value_heads=3)  # fmt: skip


def test_bytes_per_row_is_the_kv_cache_plus_the_logits():
    # K and V: 2 × 30 layers × 3 heads × 64 dims × 4 bytes = 46 080 bytes a position; logits 49 152 × 4 B × 4
    assert bytes_per_row(SMOL, 1, 4) == 46_080 + 786_432
    # the failing probe: 8 prompts × (8 + 128) samples × ~2 100 positions in one chunk needed ~106 GB
    assert 100e9 < 8 * 136 * bytes_per_row(SMOL, 2100, 4) < 112e9


def test_rows_per_chunk_fits_the_budget():
    class Fake(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.config = SMOL

    budget = 12 * 1024**3
    rows = rows_per_chunk(Fake(), 2100, budget)
    assert rows * bytes_per_row(SMOL, 2100, 4) <= budget < (rows + 1) * bytes_per_row(SMOL, 2100, 4)
    assert rows_per_chunk(Fake(), 10**9, budget) == 1  # never zero rows


def test_a_small_budget_splits_generation_into_chunks(tmp_path, monkeypatch):
    model, tok = load_model(build_tiny_model(tmp_path / "m", num_layers=1, hidden_size=32, intermediate_size=64),
                            device="cpu")  # fmt: skip
    params = SamplingParams(n=8, max_new_tokens=4, seed=0)
    one_row = bytes_per_row(model.config, len(tok("12+3=").input_ids) + 4, 4)
    engine = HFRolloutEngine(model, tok, memory_budget_gb=3.5 * one_row / 1024**3)
    sizes = []
    chunk = engine._generate_chunk
    monkeypatch.setattr(engine, "_generate_chunk", lambda ids, *a: (sizes.append(len(ids)), chunk(ids, *a))[1])
    batch = engine.generate([tok("12+3=").input_ids], params)
    assert sizes == [3, 3, 2] and len(batch) == 8
    with pytest.raises(ValueError, match="memory_budget_gb"):
        HFRolloutEngine(model, tok, memory_budget_gb=0)


def test_the_budget_is_an_option_of_the_trainer_eval_and_probe(tmp_path):
    from typer.testing import CliRunner

    from hadw.cli import build_app
    from hadw.train.config import ConfigError, load_config

    assert load_config(None, ["rollout.memory_budget_gb=2.5"]).rollout.memory_budget_gb == 2.5
    with pytest.raises(ConfigError, match="rollout.memory_budget_gb"):
        load_config(None, ["rollout.memory_budget_gb=0"])
    model = build_tiny_model(tmp_path / "m", num_layers=1, hidden_size=32, intermediate_size=64)
    runner = CliRunner()
    for command in ("eval", "probe"):
        result = runner.invoke(build_app(), [command, str(model), "--data", "task:sums", "--limit", "2",
                                             "--memory-budget-gb", "0"])  # fmt: skip
        assert result.exit_code == 2 and "--memory-budget-gb" in result.output
    out = tmp_path / "probe.json"
    result = runner.invoke(build_app(), ["probe", str(model), "--data", "task:sums", "--limit", "2", "--reference",
                                         "8", "--batch-size", "4", "--memory-budget-gb", "0.5", "--json", str(out),
                                         "--png", str(tmp_path / "p.png")])  # fmt: skip
    assert result.exit_code == 0, result.output
