"""One reward call everywhere: a TRL-style reward that names its own gold column (`gold`, not `answer`) scores the
same completions the same way in training, the trainer's final evaluation, `hadw eval RUN`, `hadw eval MODEL
--reward` and `hadw probe`; a reward that fails on every completion is an error there, never an accuracy of 0.000.

Module level stays light: pool workers import this module to call its rewards.
"""

from __future__ import annotations

import json

import pytest

HERE = __name__

# 40 rows, 20 with an even gold. The reward scores the gold's parity, whatever the completion, so every evaluation of
# any model has a known accuracy: the share of even gold among the problems it scored.
# The trainer holds out the first 8 rows (a fifth): 6 of them even; the first 10 rows: 6 even.
GOLD = [0, 2, 4, 6, 8, 10, 1, 3, 5, 7] + [12 + 2 * i for i in range(14)] + [9 + 2 * i for i in range(16)]
ROWS = [{"problem_text": f"What is {a} plus zero?", "gold": a} for a in GOLD]


def gold_is_even(prompts, completions, gold, **kwargs):
    """Reads the data's own `gold` column, as a TRL user's reward does (no `answer`)."""
    return [1.0 if int(g) % 2 == 0 else 0.0 for g in gold]


def uses_trl_extras(prompts, completions, completion_ids, trainer_state, **kwargs):
    """TRL 1.x's extra reward arguments: 1.0 when they are what TRL would pass (a state in training, None in an
    evaluation; every completion's token ids)."""
    ids_ok = len(completion_ids) == len(completions) and all(isinstance(t, int) for ids in completion_ids for t in ids)
    in_training = trainer_state is not None and trainer_state.global_step == 0 and trainer_state.max_steps == 1
    return [1.0 if ids_ok and (in_training or trainer_state is None) else 0.0 for _ in completions]


def needs_a_missing_column(prompts, completions, no_such_column, **kwargs):
    return [1.0] * len(completions)


def _data(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def _train(tmp_path, reward: str, steps: int = 1):
    from hadw.train.config import load_config
    from hadw.train.trainer import Trainer

    overrides = [
        f"data.source={_data(tmp_path)}",
        "data.fields.prompt=problem_text",
        "data.fields.answer=gold",
        "data.eval_size=10",
        f"reward.functions=[{reward}]",
        f"train.steps={steps}",
        "train.prompts_per_step=2",
        "train.mini_batch_prompts=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=2",
        "model.tiny.num_layers=1",
        "model.tiny.hidden_size=32",
        "model.tiny.intermediate_size=64",
        "model.tiny.warm_start_accuracy=0",
        "logging.progress=off",
        f"train.output_dir={tmp_path / 'run'}",
    ]
    return Trainer(load_config(None, overrides)).train()


def _invoke(args: list[str]):
    from typer.testing import CliRunner

    from hadw.cli import build_app

    return CliRunner().invoke(build_app(), args)


def test_a_reward_naming_its_gold_column_scores_alike_in_train_eval_and_probe(tmp_path):
    result = _train(tmp_path, f"{HERE}:gold_is_even")
    run = tmp_path / "run"
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[0].get("reward/errors", 0) == 0 and steps[0].get("reward/timeouts", 0) == 0
    final = result.final_eval["all"]
    assert result.eval_failure is None and final["count"] == 8  # a file keeps at most a fifth of its rows out
    # the held-out problems' share of even gold: known from the problems the trainer evaluated
    saved = json.loads((run / "final_eval.json").read_text())
    assert saved["all"]["greedy"] == final["greedy"]
    assert final["greedy"] == 0.75  # the held-out rows' share of even gold; before: 0.000 (TypeError: no 'gold')

    out = tmp_path / "eval_run.json"
    done = _invoke(["eval", str(run), "--json", str(out), "--no-progress"])
    assert done.exit_code == 0, done.output
    buckets = json.loads(out.read_text())["buckets"]  # the rows the trainer held out, not the file's first 10
    assert buckets["all"]["count"] == 8 and buckets["all"]["greedy"] == 0.75

    out = tmp_path / "eval_model.json"
    args = ["eval", str(run / "final_model"), "-d", str(_data(tmp_path)), "--prompt-field", "problem_text"]
    args += ["--answer-field", "gold", "--reward", f"{HERE}:gold_is_even", "--max-new-tokens", "2"]
    done = _invoke([*args, "--json", str(out), "--no-progress"])
    assert done.exit_code == 0, done.output
    assert json.loads(out.read_text())["buckets"]["all"]["greedy"] == 0.5  # 20 of 40 gold answers are even

    out = tmp_path / "probe.json"
    args = ["probe", str(run), "-G", "2", "-N", "2", "--limit", "8", "--png", str(tmp_path / "p.png")]
    done = _invoke([*args, "--json", str(out)])
    assert done.exit_code == 0, done.output
    buckets = json.loads(out.read_text())["buckets"]
    # p_ref is 0 (odd gold) or 1 (even gold) for every prompt, never a reward failure
    assert "failed on every completion" not in done.output
    assert sum(b.get("prompts", 0) for k, b in buckets.items() if k != "all") == pytest.approx(8)


def test_a_reward_that_fails_on_every_item_is_an_error_never_a_zero_accuracy(tmp_path):
    result = _train(tmp_path, f"{HERE}:needs_a_missing_column")
    assert result.eval_failure is not None and "no_such_column" in result.eval_failure
    import math

    assert math.isnan(result.final_eval["all"]["greedy"]) and result.final_eval["all"]["reward_failed"] == 1.0
    saved = json.loads((tmp_path / "run" / "final_eval.json").read_text())
    assert saved["all"]["greedy"] is None  # null in JSON, never 0.0

    done = _invoke(["eval", str(tmp_path / "run"), "--no-progress"])
    assert done.exit_code == 1, done.output
    text = " ".join(done.output.split())
    assert "error: the reward failed on every completion" in text and "no_such_column" in text
    assert "0.000" not in text and "needs SFT" not in text  # no accuracy, no diagnosis about the model

    done = _invoke(["probe", str(tmp_path / "run"), "-G", "2", "-N", "2", "--limit", "4"])
    assert done.exit_code == 2 and "failed on every completion" in " ".join(done.output.split())


def test_a_run_folder_is_data_its_reward_runs_only_when_trusted(tmp_path, monkeypatch):
    """A received run folder whose config names `subprocess:getoutput` runs nothing on --resume, eval or probe; a
    reward module shipped inside the folder is never imported; a reward you named yourself resumes and evaluates
    without asking, until its file changes."""
    import shutil

    from hadw.rewards import trust
    from hadw.train.config import ConfigError, load_config

    _train(tmp_path, f"{HERE}:gold_is_even")
    run = tmp_path / "run"
    config = run / "config.yaml"
    cfg = load_config(config)  # yours (remembered when you named it): trusted, no question asked
    assert cfg.reward.correctness == f"{HERE}:gold_is_even"

    received = tmp_path / "received"
    shutil.copytree(run, received)
    marker = tmp_path / "pwned"
    (received / "data.jsonl").write_text(json.dumps({"q": "x", "a": 1, "cmd": f"touch {marker}"}) + "\n")
    text = config.read_text().replace(f"{HERE}:gold_is_even", "subprocess:getoutput")
    (received / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"standard library, not a reward"):
        load_config(received / "config.yaml")
    done = _invoke(["eval", str(received), "--no-progress"])
    assert done.exit_code == 2 and "standard library" in done.output and not marker.exists()

    # a module inside the run folder: never imported, whatever its name
    evil = f"open({str(marker)!r}, 'w')\ndef f(prompts, completions, **k): return []\n"
    (received / "evil_reward.py").write_text(evil)
    (received / "config.yaml").write_text(text.replace("subprocess:getoutput", "evil_reward:f"))
    monkeypatch.chdir(received)  # `cd RUN && hadw eval .`
    done = _invoke(["eval", ".", "--no-progress"])
    assert done.exit_code == 2 and not marker.exists(), done.output
    with pytest.raises(ConfigError):
        load_config(received / "config.yaml", ["train.steps=2"])
    assert not marker.exists()

    # a module you never ran here, beside the run: one line saying how to confirm it; confirmed, it runs
    (tmp_path / "theirs.py").write_text("def f(prompts, completions, **k):\n    return [1.0] * len(completions)\n")
    (received / "config.yaml").write_text(text.replace("subprocess:getoutput", "theirs:f"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"not one you have run on this machine.*HADW_TRUST_REWARDS=theirs:f"):
        load_config(received / "config.yaml")
    monkeypatch.setenv(trust.TRUST_ENV, "theirs:f")
    assert load_config(received / "config.yaml").reward.correctness == "theirs:f"


def test_trl_extra_reward_arguments_in_training_and_evaluation(tmp_path):
    result = _train(tmp_path, f"{HERE}:uses_trl_extras")
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps[0]["critic/score/mean"] == 1.0 and result.final_eval["all"]["greedy"] == 1.0
