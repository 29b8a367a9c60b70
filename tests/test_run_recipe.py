"""One prompt recipe per run: resolved once by the trainer, saved in config.yaml, used by `hadw eval RUN_DIR`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.errors import UserError
from hadw.rollout import build_tiny_model
from hadw.train.config import config_to_yaml, load_config

runner = CliRunner()


def test_train_resolves_the_same_defaults_as_eval_and_saves_them():
    task = load_config(None, [])
    assert (task.data.template, task.reward.functions, task.reward.correctness) == ("plain", ["exact"], "exact")
    data = load_config(None, ["data.source=mine.jsonl", "data.fields.prompt=q", "data.fields.answer=a"])
    assert (data.data.template, data.reward.functions, data.reward.correctness) == ("paper", ["math"], "math")
    # naming rewards: correctness is the first of them (as TRL), not "exact"
    named = load_config(None, ["reward.functions=[format,math]"])
    assert named.reward.correctness == "format"


def test_a_real_model_runs_config_leaves_out_the_tiny_keys():
    tiny = yaml.safe_load(config_to_yaml(load_config(None, [])))
    assert "tiny" in tiny["model"] and tiny["data"]["levels"] == [2, 3, 4]
    overrides = ["model.path=/m", "data.source=mine.jsonl", "data.fields.prompt=q", "data.fields.answer=a"]
    real = yaml.safe_load(config_to_yaml(load_config(None, overrides)))
    assert "tiny" not in real["model"] and "levels" not in real["data"]
    assert real["data"]["template"] == "paper" and real["reward"]["correctness"] == "math"


@pytest.fixture(scope="module")
def file_run(tmp_path_factory):
    """A 1-step run of a tiny model on a JSONL file with its own fields, template and reward."""
    tmp = tmp_path_factory.mktemp("recipe")
    rows = [{"query": f"{a}+{b}", "solution": str(a + b), "meta": {"terms": 2}} for a in range(6) for b in range(4)]
    (tmp / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = build_tiny_model(tmp / "m", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    run = tmp / "run"
    result = runner.invoke(build_app(), [
        "train", f"model.path={model}", f"train.output_dir={run}", f"data.source={tmp / 'mine.jsonl'}",
        "data.fields.prompt=query", "data.fields.answer=solution", "data.template=Q: {question} A:",
        "data.chat_template=never", "reward.functions=[exact]", "data.eval_size=5", "train.steps=1",
        "train.prompts_per_step=2", "train.mini_batch_prompts=1", "rollout.group_size=2", "rollout.max_new_tokens=3",
        "logging.progress=false",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    return run


def test_eval_of_a_run_folder_prompts_and_scores_like_the_run(file_run, tmp_path):
    samples, out = tmp_path / "samples.jsonl", tmp_path / "eval.json"
    result = runner.invoke(build_app(), ["eval", str(file_run), "--samples", str(samples), "--json", str(out),
                                         "--no-progress"])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    # the trainer's held-out rows: min(data.eval_size=5, a fifth of the 24 rows), not the whole file nor its first 5
    assert len(rows) == 4 == json.loads((file_run / "final_eval.json").read_text())["all"]["count"]
    assert all(r["prompt"].startswith("Q: ") and r["prompt"].endswith(" A:") for r in rows)  # run's template, no chat
    assert all(r["tokens"] <= 3 for r in rows)  # rollout.max_new_tokens
    (recipe,) = json.loads(out.read_text())["recipes"].values()
    assert recipe == {"template": "Q: {question} A:", "reward": "exact", "max_new_tokens": 3}
    # the same held-out problems and score as the trainer's final evaluation
    final = json.loads((file_run / "final_eval.json").read_text())
    assert json.loads(out.read_text())["buckets"]["all"]["greedy"] == final["all"]["greedy"]


def test_an_explicit_option_overrides_the_runs_recipe(file_run, tmp_path):
    samples = tmp_path / "samples.jsonl"
    result = runner.invoke(build_app(), ["eval", str(file_run), "--template", "question", "--limit", "2",
                                         "--samples", str(samples), "--no-progress"])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(rows) == 2 and not rows[0]["prompt"].startswith("Q: ")


def test_eval_without_data_or_run_is_one_line(tmp_path):
    model = build_tiny_model(tmp_path / "m", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                             intermediate_size=64)  # fmt: skip
    result = runner.invoke(build_app(), ["eval", str(model)])
    assert result.exit_code == 2 and "--data" in result.output


def test_an_unfinished_runs_newest_checkpoint_is_what_eval_reads(tmp_path):
    """No final_model/ yet: `hadw eval RUN_DIR` reads the newest checkpoint's model/ (full weights or a LoRA
    adapter), not the start model (it looked for checkpoint-*/config.json, which no checkpoint has)."""
    import yaml

    from hadw.eval.run_recipe import read_run
    from hadw.train.config import Config

    run = tmp_path / "run"
    (run / "init_model").mkdir(parents=True)
    (run / "init_model" / "config.json").write_text("{}")
    cfg = Config().to_dict()
    cfg["data"]["template"], cfg["reward"]["functions"] = "plain", ["exact"]
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert read_run(run).model == run / "init_model"
    for step, marker in ((1, "config.json"), (2, "adapter_config.json")):  # full weights, then a LoRA adapter
        (run / f"checkpoint-00000{step}" / "model").mkdir(parents=True)
        (run / f"checkpoint-00000{step}" / "model" / marker).write_text("{}")
        assert read_run(run).model == run / f"checkpoint-00000{step}" / "model"


def test_eval_of_a_running_run_survives_its_checkpoint_being_pruned(file_run, tmp_path, monkeypatch):
    """Issue 31, item 6: `hadw eval RUN_DIR` picks the newest checkpoint; the trainer saves the next one and prunes
    it (checkpoint.keep_last=1) before eval has read it. Eval loads the newer one instead of failing."""
    import shutil

    import hadw.rollout as rollout

    run = tmp_path / "running"
    shutil.copytree(file_run, run)
    shutil.rmtree(run / "final_model")  # still training: its newest weights are checkpoint-000001
    (run / "final_eval.json").unlink()
    real_load, loaded = rollout.load_model, []

    def trainer_prunes_first(path, *args, **kwargs):
        if not loaded:  # the trainer's next checkpoint lands, the one eval picked is pruned
            shutil.copytree(run / "checkpoint-000001", run / "checkpoint-000002")
            shutil.rmtree(run / "checkpoint-000001")
        loaded.append(str(path))
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(rollout, "load_model", trainer_prunes_first)
    out = tmp_path / "eval.json"
    result = runner.invoke(build_app(), ["eval", str(run), "--limit", "2", "--json", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert [p.split("/")[-2] for p in loaded] == ["checkpoint-000001", "checkpoint-000002"]  # .../model
    assert json.loads(out.read_text())["model"] == str(run / "checkpoint-000002" / "model")


def _run_with_checkpoints(tmp_path: Path, steps: int) -> Path:
    import yaml

    from hadw.train.config import Config

    run = tmp_path / "run"
    run.mkdir()
    cfg = Config().to_dict()
    cfg["data"]["template"], cfg["reward"]["functions"] = "plain", ["exact"]
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    for step in range(1, steps + 1):
        (run / f"checkpoint-{step:06d}" / "model").mkdir(parents=True)
        (run / f"checkpoint-{step:06d}" / "model" / "config.json").write_text("{}")
    return run


def test_eval_of_a_run_never_reads_weights_through_a_link(tmp_path):
    """Issue 39, finding 8: `hadw eval RUN` followed a `checkpoint-*/model` link out of the run (and a final_model/
    or checkpoint folder link alike): one line instead."""
    from hadw.eval.run_recipe import read_run

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.json").write_text("{}")
    for link in ("checkpoint-000003/model", "checkpoint-000004", "final_model"):
        (tmp_path / link.replace("/", "_")).mkdir()
        run = _run_with_checkpoints(tmp_path / link.replace("/", "_"), 2)
        (run / link).parent.mkdir(parents=True, exist_ok=True)
        (run / link).symlink_to(elsewhere)
        with pytest.raises(UserError, match="symbolic link.*never reads a run's weights through a link"):
            read_run(run)


def test_eval_of_a_run_whose_newest_checkpoint_is_broken_says_so(tmp_path):
    """It skipped the broken newest checkpoint for an older one without a word; now one line naming both."""
    from hadw.eval.run_recipe import read_run

    run = _run_with_checkpoints(tmp_path, 2)
    (run / "checkpoint-000010").mkdir()  # newest by step (and 10 > 2 as numbers)
    with pytest.raises(
        UserError, match=r"checkpoint-000010: the run's newest checkpoint holds no model.*checkpoint-000002"
    ):
        read_run(run)
    (run / "checkpoint-000010").rmdir()
    assert read_run(run).model == run / "checkpoint-000002" / "model"
