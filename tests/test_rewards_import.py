"""The user's reward: import paths with TRL's signature (prompts, completions, dataset columns), per-item
functions isolated in the verifier pool, `math_any` (unboxed answers), and hadw's rewards as TRL rewards.

Module level stays light (no torch): pool workers import this module to unpickle `slow_item` and to call the
import-path rewards (they run in a pool process, so a reward records its calls in the file its `log` column names).
"""

from __future__ import annotations

import json
import time

import pytest

from hadw.rewards import RewardSpec, TRLReward, get_reward, resolve_reward, run_reward, score, trl_reward

CALLS: list[dict] = []  # not a function (test_import_path_errors_are_one_line_value_errors)
HERE = __name__  # "test_rewards_import" (pytest's rootdir-relative import)


def trl_accuracy(prompts, completions, solution, log=None, **kwargs):
    """Written for TRL: 1.0 when the completion's text equals the `solution` column. Records each call (its
    arguments) as a JSON line in the file the `log` column names."""
    if log:
        with open(log[0], "a", encoding="utf-8") as f:
            # default=str: TRL's trainer_state is an object, as in TRL
            f.write(json.dumps({"prompts": prompts, "solution": solution, **kwargs}, default=str) + "\n")
    return [float(c.strip() == str(s)) for c, s in zip(completions, solution, strict=True)]


def recorded_calls(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def named_only(completions, answer):  # no **kwargs: receives only what it names
    return [float(c == a) for c, a in zip(completions, answer, strict=True)]


def fails_on_boom(prompts, completions, **kwargs):
    if "boom" in completions:
        raise RuntimeError("boom")
    return [None if c == "skip" else 1.0 for c in completions]


def slow_item(completion: str, answer: str) -> float:  # per-item, picklable: runs in the pool
    if completion == "hang":
        time.sleep(60)
    return float(completion == answer)


def test_trl_signature_reward_gets_prompts_and_dataset_columns(tmp_path):
    log = tmp_path / "calls.jsonl"
    fn = resolve_reward(f"{HERE}:trl_accuracy")
    assert isinstance(fn, TRLReward) and fn.name == f"{HERE}:trl_accuracy"
    columns = {"solution": [3, 4], "meta": [{"d": 1}, {"d": 2}], "log": [str(log)] * 2}
    result = score(["3", "5"], ["3", "4"], [RewardSpec(fn.name)], fn.name, 1.0, ["1+2=", "2+2="], columns)
    assert result.correctness.tolist() == [1.0, 0.0]
    call = recorded_calls(log)[-1]
    assert call["prompts"] == ["1+2=", "2+2="] and call["solution"] == [3, 4] and call["answer"] == ["3", "4"]
    assert call["meta"] == [{"d": 1}, {"d": 2}]


def test_function_without_kwargs_receives_only_the_arguments_it_names():
    fn = resolve_reward(f"{HERE}:named_only")
    assert fn.run(["a", "b"], ["a", "c"], ["p", "q"], {"other": [1, 2]}).scores == [1.0, 0.0]


def test_a_raising_item_scores_zero_and_is_counted_none_scores_zero_and_is_counted():
    fn = resolve_reward(f"{HERE}:fails_on_boom")
    out = fn.run(["ok", "boom", "skip"], ["", "", ""])
    assert out.scores == [1.0, 0.0, 0.0] and out.num_errors == 2 and "RuntimeError: boom" in out.messages[0]
    assert out.kinds == {"raised": 1, "None": 1} and out.first_error.row == 1


def test_import_path_errors_are_one_line_value_errors():
    with pytest.raises(ValueError, match=r"cannot import module 'no_such_module_xyz': ModuleNotFoundError"):
        resolve_reward("no_such_module_xyz:f")
    with pytest.raises(ValueError, match=rf"'{HERE}' has no attribute 'nope'"):
        resolve_reward(f"{HERE}:nope")
    with pytest.raises(ValueError, match=r"'CALLS' is a list, not a function"):
        resolve_reward(f"{HERE}:CALLS")


def test_isolated_per_item_function_runs_in_the_pool_under_the_timeout():
    fn = resolve_reward(f"{HERE}:slow_item", isolated=True)
    start = time.perf_counter()
    out = run_reward(fn, ["7", "hang", "8"], ["7", "7", "7"], timeout_s=1.0)
    assert out.scores == [1.0, 0.0, 0.0] and out.num_timeouts == 1
    assert time.perf_counter() - start < 30  # not the 60 s the item sleeps


def test_config_accepts_import_paths_and_names_the_bad_key():
    from hadw.train.config import ConfigError, load_config

    path = f"{HERE}:trl_accuracy"
    cfg = load_config(None, [f"reward.functions=[math,{path}]", f"reward.correctness={path}"])
    assert cfg.reward.functions == ["math", path]
    with pytest.raises(ConfigError, match=r"reward.functions\[0\]='mod_xyz:f': reward 'mod_xyz:f': cannot import"):
        load_config(None, ["reward.functions=[mod_xyz:f]", "reward.correctness=mod_xyz:f"])
    with pytest.raises(ConfigError, match=r"reward.functions\[0\]='mat' is not allowed; allowed values: .*math_any"):
        load_config(None, ["reward.functions=[mat]", "reward.correctness=mat"])
    with pytest.raises(ConfigError, match=r"reward.isolated: 'x:y' must be an import path \(module:function\) in"):
        load_config(None, ["reward.isolated=[x:y]"])
    with pytest.raises(ConfigError, match=r"reward.isolated: 'exact' must be an import path"):
        load_config(None, ["reward.isolated=[exact]"])  # a built-in's isolation is fixed


@pytest.mark.parametrize(
    ("completion", "gold", "math_any", "math"),
    [
        ("So the answer is 3/4.", "\\frac{3}{4}", 1.0, 0.0),  # unboxed: only math_any reads it
        ("The final answer is $\\frac{14}{3}$", "\\frac{14}{3}", 1.0, 0.0),
        ("We get x = 5", "5", 1.0, 0.0),
        ("so \\boxed{0.5}", "\\frac{1}{2}", 1.0, 1.0),  # boxed: both agree
        ("The answer is 4.", "5", 0.0, 0.0),
        ("no number here", "5", 0.0, 0.0),
    ],
)
def test_math_any_accepts_an_unboxed_final_answer(completion, gold, math_any, math):
    assert run_reward(get_reward("math_any"), [completion], [gold], timeout_s=None).scores == [math_any]
    assert run_reward(get_reward("math"), [completion], [gold], timeout_s=None).scores == [math]


def test_hadw_reward_as_a_trl_reward_function():
    exact = trl_reward("exact")
    assert exact.__name__ == "exact"
    assert exact(prompts=["a", "b"], completions=["85", "\\boxed{7}"], answer=["85", "8"], extra=[0, 0]) == [1.0, 0.0]
    chat = [[{"role": "assistant", "content": "85"}]]  # a conversational dataset's completions
    assert exact(prompts=["a"], completions=chat, answer=["85"]) == [1.0]
    with pytest.raises(ValueError, match=r"reads the gold answer from the dataset column 'solution'"):
        trl_reward("exact", answer_column="solution")(prompts=["a"], completions=["1"], answer=["1"])


def test_training_on_a_user_jsonl_with_user_fields_and_a_trl_reward(tmp_path):
    """The new user's path: own JSONL with nested field names, own TRL-style reward, two steps."""
    from hadw.train.config import load_config
    from hadw.train.trainer import Trainer

    log = tmp_path / "calls.jsonl"
    rows = [
        {"query": f"{a}+{a}", "solution": 2 * a, "meta": {"difficulty": 1 + a % 3}, "log": str(log)} for a in range(10)
    ]
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = f"{HERE}:trl_accuracy"
    overrides = [
        f"data.source={tmp_path / 'mine.jsonl'}",
        "data.fields.prompt=query",
        "data.fields.answer=solution",
        "data.fields.level=meta.difficulty",
        "data.eval_size=2",
        f"reward.functions=[{path},format]",
        f"reward.correctness={path}",
        "train.steps=2",
        "train.prompts_per_step=2",
        "train.mini_batch_prompts=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=3",
        "model.tiny.num_layers=1",
        "model.tiny.hidden_size=32",
        "model.tiny.intermediate_size=64",
        "logging.progress=false",
        f"train.output_dir={tmp_path / 'run'}",
    ]
    Trainer(load_config(None, overrides)).train()
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if "critic/score/mean" in s] == [1, 2]
    train_calls = [c for c in recorded_calls(log) if len(c["prompts"]) == 4]  # 2 prompts x 2 responses per step
    assert len(train_calls) == 2
    by_prompt = dict(zip(train_calls[0]["prompts"], train_calls[0]["solution"], strict=True))
    assert all(by_prompt[f"{a}+{a}="] == 2 * a for a in range(10) if f"{a}+{a}=" in by_prompt)  # plain template
    assert all(isinstance(s, int) for s in train_calls[0]["solution"])  # the raw column, not the mapped string
    assert set(train_calls[0]["meta"][0]) == {"difficulty"}
    assert train_calls[0]["trainer_state"].startswith("RewardState(global_step=0")  # TRL 1.x's extra arguments
    assert len(train_calls[0]["completion_ids"]) == 4


def test_a_reward_module_that_exits_or_reads_argv_on_import(tmp_path, monkeypatch):
    """Issue 31, item 13: a script turned reward module (`sys.exit(main())`, argparse at the top level)."""
    from hadw.train.config import ConfigError, load_config

    (tmp_path / "script_reward.py").write_text(
        "import sys\ndef f(prompts, completions, **kw): return [1.0] * len(completions)\n"
        "def main(): return 3\nsys.exit(main())\n"
    )
    (tmp_path / "argv_reward.py").write_text(
        "import argparse\nARGS = argparse.ArgumentParser().parse_args()\n"
        "def f(prompts, completions, **kw): return [1.0] * len(completions)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("sys.argv", ["hadw", "train", "reward.functions=[argv_reward:f]"])
    with pytest.raises(ConfigError, match=r"importing module 'script_reward' called sys.exit\(3\)"):
        load_config(None, ["reward.functions=[script_reward:f]", "reward.correctness=script_reward:f"])
    assert resolve_reward("argv_reward:f").run(["a"], ["1"]).scores == [1.0]  # argv is the module's, not hadw's
