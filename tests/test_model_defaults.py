"""Two default recipes: a real model (model.path) gets real-model defaults for every key the user did not set; the
tiny model keeps its own; `hadw train`'s first line says which, and a bare `hadw train` starts from a shipped warm
start instead of a silent 1500-step SFT."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hadw.train.config import Config, load_config
from hadw.train.model_defaults import REAL_MODEL_DEFAULTS, shipped_warm_start, start_line

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # not a folder here: a Hub id, never loaded by these tests


def _value(cfg: Config, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def test_a_real_model_gets_real_model_defaults_for_every_key_not_given(tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({"question": "1+1", "answer": "2"}) + "\n")
    cfg = load_config(None, [f"model.path={HUB_ID}", f"data.source={data}"])
    assert {k: _value(cfg, k) for k in REAL_MODEL_DEFAULTS} == REAL_MODEL_DEFAULTS
    assert cfg.rollout.max_new_tokens == 128 and cfg.optim.lr == 1e-5  # not the tiny 6 tokens and 1e-4
    # what the user sets stays theirs, in a file or as key=value
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("optim:\n  lr: 3.0e-6\n")
    cfg = load_config(recipe, [f"model.path={HUB_ID}", f"data.source={data}", "train.steps=7"])
    assert cfg.optim.lr == 3e-6 and cfg.train.steps == 7 and cfg.train.prompts_per_step == 4
    # a built-in task keeps short answers (its recipe's 16 tokens, as `hadw eval` gives it)
    assert load_config(None, [f"model.path={HUB_ID}"]).rollout.max_new_tokens == 16


def test_the_tiny_model_keeps_its_recipe(tiny_path):
    assert load_config(None, []).rollout.max_new_tokens == Config().rollout.max_new_tokens == 6
    cfg = load_config(None, [f"model.path={tiny_path}"])  # a tiny-vocabulary folder (hadw sft's output)
    assert cfg.optim.lr == Config().optim.lr and cfg.train.steps == Config().train.steps


def test_the_first_line_names_model_recipe_and_warm_start():
    cfg = load_config(None, [])
    assert shipped_warm_start(cfg) == "sums234-s0"  # the demo's start, made for exactly this task, shape and seed
    line = start_line(cfg)
    assert line.startswith("hadw train: the tiny built-in model") and "shipped sums234-s0 (no SFT)" in line
    other = load_config(None, ["train.seed=5"])
    assert shipped_warm_start(other) is None and "SFT here to greedy 0.3, at most 1500 steps" in start_line(other)
    assert "real-model recipe" in start_line(load_config(None, [f"model.path={HUB_ID}"]))


@pytest.mark.timeout(300)
def test_a_bare_hadw_train_says_what_it_trains_first_and_runs_rl_at_once(tmp_path, monkeypatch):
    from hadw.cli import build_app

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(build_app(), ["train", "train.steps=1", "data.eval_size=20", "logging.progress=off"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()  # the first line is the command's own report, like its last ("done: ...")
    assert lines[0].startswith("hadw train: the tiny built-in model") and "shipped sums234-s0" in lines[0]
    assert not any(line.startswith("sft:") for line in lines)  # no SFT before the first RL step
    assert (tmp_path / "runs" / "default" / "final_model").is_dir()
