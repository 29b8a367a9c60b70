"""Models from the Hub: `load_model` takes a Hub id (the download is simulated: tests never reach the
Hub), reports an uncached id offline in one line naming HF_HUB_OFFLINE, and passes trust_remote_code."""

from __future__ import annotations

import huggingface_hub
import pytest
from huggingface_hub import constants

import hadw.rollout.models as models
from hadw.rollout import build_tiny_model, load_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), num_layers=1, hidden_size=32, intermediate_size=64)


def test_uncached_hub_id_offline_is_one_line_naming_hf_hub_offline(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError) as err:
        load_model("no-such-org/no-such-model-xyz")
    message = str(err.value)
    assert "\n" not in message and "HF_HUB_OFFLINE=1" in message
    assert "hf download no-such-org/no-such-model-xyz --local-dir DIR" in message


def test_a_missing_path_that_is_no_hub_id_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"is neither a model folder nor a Hub id \(ORG/NAME\)"):
        load_model(tmp_path / "runs" / "x" / "final_model")


def test_hub_id_loads_the_snapshot_and_passes_trust_remote_code(tiny_dir, monkeypatch):
    downloads, seen = [], []
    fake_download = lambda repo, **kw: downloads.append((repo, kw)) or tiny_dir  # a cached snapshot
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)

    class Spy:
        def __init__(self, real):
            self.real = real

        def from_pretrained(self, path, **kwargs):
            seen.append((path, kwargs["trust_remote_code"]))
            return self.real.from_pretrained(path, **kwargs)

    monkeypatch.setattr(models, "AutoModelForCausalLM", Spy(models.AutoModelForCausalLM))
    monkeypatch.setattr(models, "AutoTokenizer", Spy(models.AutoTokenizer))
    _, tokenizer = load_model("me/tiny", device="cpu")
    assert downloads[0][0] == "me/tiny" and "*.safetensors" in downloads[0][1]["allow_patterns"]
    assert seen == [(tiny_dir, False), (tiny_dir, False)] and tokenizer.padding_side == "left"
    seen.clear()
    load_model("me/tiny", device="cpu", trust_remote_code=True)
    assert seen == [(tiny_dir, True), (tiny_dir, True)]


def test_train_with_an_uncached_hub_model_offline_exits_2_with_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from hadw.cli import build_app

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    args = ["train", "model.path=no-such-org/model-xyz", "train.steps=1", f"train.output_dir={tmp_path / 'run'}"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]  # stdout: the first line, what it trains
    assert result.stdout.startswith("hadw train: model no-such-org/model-xyz (real-model recipe")
    assert len(lines) == 1 and lines[0].startswith("model error: load_model: no-such-org/model-xyz: no such folder")
    assert "HF_HUB_OFFLINE=1" in lines[0]
