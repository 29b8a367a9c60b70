"""`probe`, `eval`, `sft` and `train` at their defaults on a 135 M-shaped model (SmolLM2's shapes: 30 layers,
a 49 152-row vocabulary, a chat template) stay within this machine's memory.

`hadw probe` at its defaults once asked for 106 GB in one generate call (8 prompts × 136 samples × 2 100
positions of K/V cache). Here every generate chunk the commands make is checked against the engine's memory
budget; the decode loop itself is replaced by a stub (a random 49 k-vocabulary model never stops, and 2 048
real decode steps of a 135 M model are minutes of CPU), so the test covers the sizing at the defaults.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.rollout import HFRolloutEngine, build_tiny_model
from hadw.rollout.memory import BUDGET_FRACTION, available_bytes, bytes_per_row

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_models import MODELS

runner = CliRunner()


@pytest.fixture(scope="module")
def model_135m(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("m135") / "model", **MODELS["135M"])


@pytest.fixture
def chunks(monkeypatch):
    """Record (rows, positions) of every generate chunk, check it fits the budget, and return 1-token answers."""
    seen: list[tuple[int, int]] = []

    def chunk(self, prompt_ids, prompt_mask, params, stop, generator, on_rows_done=None):
        rows, positions = prompt_ids.shape[0], prompt_ids.shape[1] + params.max_new_tokens
        need = rows * bytes_per_row(self.model.config, positions, 4)
        budget = self.memory_budget or available_bytes(prompt_ids.device) * BUDGET_FRACTION
        assert need <= budget, f"a chunk of {rows} rows x {positions} positions needs {need / 1e9:.1f} GB"
        seen.append((rows, positions))
        if on_rows_done is not None:
            on_rows_done(rows)
        return torch.full((rows, 1), 17), torch.zeros(rows, 1), torch.ones(rows, dtype=torch.long)

    monkeypatch.setattr(HFRolloutEngine, "_generate_chunk", chunk)
    return seen


def test_the_model_has_a_real_models_shape_and_chat_template(model_135m):
    config = json.loads((model_135m / "config.json").read_text())
    assert config["vocab_size"] == 49152 and config["num_hidden_layers"] == 30
    assert (
        "chat_template" in (model_135m / "tokenizer_config.json").read_text()
        or (model_135m / "chat_template.jinja").is_file()
    )


def test_probe_and_eval_at_their_defaults_on_a_dataset(model_135m, chunks, tmp_path):
    data = tmp_path / "mine.jsonl"
    rows = [{"problem": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(8)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["probe", str(model_135m), "--data", str(data), "--png", str(tmp_path / "p.png")]
    result = runner.invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    # defaults: 8 prompts x (1 group of 8 + 128 reference) samples x (prompt + 2048 new tokens): ~100 GB in one
    # chunk, so the rows are split into several chunks, each within the budget (checked in the stub)
    assert sum(rows for rows, _ in chunks) == 8 * (8 + 128)
    assert len(chunks) > 8 and {positions - 2048 for _, positions in chunks} <= set(range(1, 200))
    chunks.clear()
    result = runner.invoke(build_app(), ["eval", str(model_135m), "--data", str(data), "-k", "4", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert sum(rows for rows, _ in chunks) == 8 + 8 * 4


def test_sft_and_train_at_their_defaults(model_135m, chunks, tmp_path):
    result = runner.invoke(build_app(), ["sft", str(tmp_path / "warm"), "--model", str(model_135m), "--max-steps", "1"])
    assert result.exit_code == 0, result.output
    assert chunks  # its evaluation generated, in chunks that fit
    result = runner.invoke(build_app(), ["train", f"model.path={model_135m}", f"train.output_dir={tmp_path / 'run'}",
                                         "train.steps=1", "logging.progress=false"])  # fmt: skip
    assert result.exit_code == 0, result.output
    # a model.path gets the real-model recipe (hadw.train.model_defaults): 100 held-out problems, not the tiny 200
    assert json.loads((tmp_path / "run" / "final_eval.json").read_text())["all"]["count"] == 100
