"""Issue 23, item 2: every reward is bounded and visible, import-path (in-process) rewards included. A hang,
NaN / inf / None / a non-number / a wrong length / an out-of-range correctness score, sys.exit and os._exit
each score 0 and are counted by kind; each reward's first error is shown once and saved in the run folder;
a reward that fails on every item for reward.max_failed_steps steps stops the run in one line."""

from __future__ import annotations

import json
import math
import os
import sys
import time

import pytest

from hadw.rewards import RewardSpec, resolve_reward, score, trl_reward
from hadw.rewards.base import RewardFailure

HERE = __name__


def sleeps(prompts, completions, **kwargs):
    time.sleep(60)  # a hang: killed with its pool process when it overruns, never waited for
    return [1.0] * len(completions)


def nans(prompts, completions, **kwargs):
    return [math.nan] * len(completions)


def infs(prompts, completions, **kwargs):
    return [math.inf, 1.0][: len(completions)] + [1.0] * max(len(completions) - 2, 0)


def nones(prompts, completions, **kwargs):
    return [None] * len(completions)


def strings(prompts, completions, **kwargs):
    return ["high"] * len(completions)


def short(prompts, completions, **kwargs):
    return [1.0]


def halves(prompts, completions, **kwargs):
    return [0.5] * len(completions)


def returns_dict(prompts, completions, **kwargs):  # issue 35: list() of it would score its keys 0, 1, ...
    return {row: 1.0 for row in range(len(completions))}


def huge(prompts, completions, **kwargs):  # issue 35: finite in float64, inf in the trainer's float32 tensors
    return [1e39] * len(completions)


def exits(prompts, completions, **kwargs):
    sys.exit(3)


def hard_exits(prompts, completions, **kwargs):
    os._exit(3)


def some_rows_raise(prompts, completions, **kwargs):
    if any(c == "bad" for c in completions):
        raise ValueError("cannot read 'bad'")
    return [1.0] * len(completions)


KINDS = [
    ("sleeps", "timeout"),
    ("nans", "nan/inf"),
    ("nones", "None"),
    ("strings", "not a number"),
    ("short", "wrong length"),
    ("exits", "exit"),
    ("hard_exits", "exit"),
    ("returns_dict", "not a number"),
    ("huge", "nan/inf"),
]


@pytest.mark.parametrize(("fn", "kind"), KINDS, ids=[k[0] for k in KINDS])
def test_an_import_path_reward_that_fails_is_scored_zero_and_counted_by_kind(fn, kind):
    reward = resolve_reward(f"{HERE}:{fn}")
    start = time.monotonic()
    out = reward.run(["a", "b"], ["1", "1"], timeout_s=0.2)
    # bounded: never the 60 s sleep, never the end of the process (a killed worker's restart, ~2 s, is not
    # charged to a timeout but takes time)
    assert time.monotonic() - start < 15
    assert out.scores == [0.0, 0.0] and out.kinds == {kind: 2} and out.all_failed
    assert out.first_error.row == 0 and out.first_error.kind == kind


def test_a_reward_that_hangs_on_everything_costs_a_few_timeouts_not_one_per_item():
    reward = resolve_reward(f"{HERE}:sleeps")
    start = time.monotonic()
    out = reward.run(["a"] * 20, ["1"] * 20, timeout_s=0.05)  # the batch call (1 s), then 2 items, not 20
    assert time.monotonic() - start < 1.0 + 2 * 0.05 + 10  # + worker restarts (each ~2 s; not 20 items' worth)
    assert out.kinds == {"timeout": 20} and "in a row" in out.messages[-1]


def test_only_the_bad_items_fail():
    inf = resolve_reward(f"{HERE}:infs").run(["a", "b", "c"], ["1"] * 3)
    assert inf.scores == [0.0, 1.0, 1.0] and inf.kinds == {"nan/inf": 1} and not inf.all_failed
    mixed = resolve_reward(f"{HERE}:some_rows_raise").run(["ok", "bad", "ok"], ["1"] * 3)
    assert mixed.scores == [1.0, 0.0, 1.0] and mixed.kinds == {"raised": 1} and mixed.first_error.row == 1
    assert "cannot read 'bad'" in mixed.first_error.message


def test_an_out_of_range_correctness_is_counted_not_a_traceback():
    name = f"{HERE}:halves"
    result = score(["a", "b"], ["1", "1"], [RewardSpec(name)], name, 1.0)
    assert result.correctness.tolist() == [0.0, 0.0] and result.errors == {name: {"out of range": 2}}
    assert result.failed_all == [name]


def test_the_trl_adapter_reward_counts_reports_once_and_stops(monkeypatch, caplog):
    from hadw.rewards import RewardFunction, register_reward

    register_reward(RewardFunction("test_nan_item", lambda c, a: math.nan), replace=True)
    fn = trl_reward("test_nan_item", max_failed_calls=2)
    with caplog.at_level("WARNING", logger="hadw.rewards"):
        assert fn(completions=["a", "b"], answer=["1", "1"]) == [0.0, 0.0]
        with pytest.raises(RewardFailure, match="'test_nan_item' failed on every item for 2 consecutive calls"):
            fn(completions=["a"], answer=["1"])
    assert fn.error_counts == {"nan/inf": 3}
    assert sum("first error (nan/inf)" in r.message for r in caplog.records) == 1


# ---------------------------------------------------------------------------------------- through the trainer


def _train(tiny_path, run, *extra):
    from typer.testing import CliRunner

    from hadw.cli import build_app

    args = [
        "train",
        f"model.path={tiny_path}",
        f"train.output_dir={run}",
        "train.steps=4",
        "train.prompts_per_step=2",
        "train.mini_batch_prompts=1",
        "rollout.group_size=2",
        "rollout.max_new_tokens=2",
        "data.eval_size=0",
        "logging.progress=false",
        "train.num_threads=1",
        "data.chat_template=never",
        "reward.timeout_s=0.2",
        *extra,
    ]
    return CliRunner().invoke(build_app(), args)


@pytest.mark.parametrize("fn", ["nans", "exits", "hard_exits", "sleeps", "huge"])
def test_a_broken_reward_stops_the_run_in_one_line_naming_it_and_saves_its_first_error(tiny_path, tmp_path, fn):
    name = f"{HERE}:{fn}"
    result = _train(tiny_path, tmp_path / "run", f"reward.functions=[exact,{name}]", "reward.max_failed_steps=2")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: reward '{name}' failed on every item for 2 consecutive steps"), lines
    assert "reward.max_failed_steps=0" in lines[-1]
    assert sum("first error" in line for line in lines) == 1  # shown once
    saved = [json.loads(line) for line in (tmp_path / "run" / "reward_errors.jsonl").read_text().splitlines()]
    assert [r["reward"] for r in saved] == [name] and {"prompt", "answer", "completion"} <= set(saved[0]["row"])


def test_max_failed_steps_zero_trains_on_and_counts(tiny_path, tmp_path):
    name = f"{HERE}:nones"
    result = _train(tiny_path, tmp_path / "run", f"reward.functions=[exact,{name}]", "reward.max_failed_steps=0")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["reward/errors"] for r in rows] == [4.0] * 4


def test_the_progress_line_shows_the_error_count(tiny_path, tmp_path, monkeypatch):
    from hadw.train import trainer as trainer_module

    seen: list[dict] = []

    class Bar:
        def __init__(self, *args, **kwargs):
            pass

        def update(self, n, **info):
            if info:  # the steps' counter (the final evaluation's counts problems, with no info)
                seen.append(info)

        def set_phase(self, phase):
            pass

        def close(self):
            pass

    monkeypatch.setattr(trainer_module, "Bar", Bar)
    result = _train(tiny_path, tmp_path / "run", f"reward.functions=[exact,{HERE}:infs]", "train.steps=2")
    assert result.exit_code == 0, result.output
    assert [info.get("err") for info in seen] == ["1", "2"]  # one inf per step


def test_hadw_eval_counts_and_shows_a_failing_reward(tiny_path):
    from hadw.eval.data import load_source
    from hadw.eval.evaluate import evaluate_sources
    from hadw.eval.report import completion_notes
    from hadw.rollout import load_model

    model, tokenizer = load_model(tiny_path)
    source = load_source("task:sums", limit=3, reward=f"{HERE}:nans", max_new_tokens=2)
    result = evaluate_sources(model, tokenizer, [source], 1, 1.0, 1.0, [1], 8, 0, False)
    assert result.stats["greedy"]["reward_errors"] == 3
    assert any("the reward failed on 3 of 3 greedy completions" in line for line in completion_notes(result.stats))
    assert result.samples[0]["reward_error"].startswith("nan/inf")


def test_hadw_probe_counts_a_failing_reward(tiny_path):
    from hadw.data import load_problems
    from hadw.eval.probe import model_sampler
    from hadw.rollout import load_model

    model, tokenizer = load_model(tiny_path)
    sampler = model_sampler(model, tokenizer, "plain", f"{HERE}:nans", max_new_tokens=2)
    problems = list(load_problems("task:sums", levels=[2], seed=0, held_out=True, limit=2))
    assert sampler(problems, 2, 0).sum() == 0 and sampler.reward_errors == 4


# ---------------------------------------------------------------------------------------------------------------
# Issue 31, items 10-12: import-path rewards run in a pool process's main thread (signal.alarm works there, as
# under TRL), are killed when they overrun (nothing keeps spinning), and never move the trainer's working directory.
def alarm_guarded(prompts, completions, **kwargs):
    """A reward guarding itself with signal.alarm, as math-verify's default timeouts do: legal in a main thread
    only (elsewhere signal.signal raises ValueError)."""
    import signal

    def overrun(signum, frame):
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, overrun)
    signal.alarm(5)
    try:
        return [1.0] * len(completions)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def open_r1_accuracy(prompts, completions, answer, **kwargs):
    """The open-r1 / TRL-docs accuracy reward: math_verify's parse / verify with their default timeouts."""
    from math_verify import parse, verify

    return [float(verify(parse(f"${a}$"), parse(c))) for c, a in zip(completions, answer, strict=True)]


def spins(prompts, completions, **kwargs):
    while True:  # a busy loop: no sleep, no way out
        pass


def changes_directory(prompts, completions, **kwargs):
    """A sandboxed code-execution reward: it moves into a scratch folder and stays there."""
    import tempfile

    os.chdir(tempfile.mkdtemp())
    return [1.0] * len(completions)


@pytest.mark.parametrize("fn", ["alarm_guarded", "open_r1_accuracy"])
def test_rewards_that_use_signal_alarm_score_correct_answers_one(fn):
    out = resolve_reward(f"{HERE}:{fn}").run(["\\boxed{4}", "\\boxed{\\frac{1}{2}}"], ["4", "\\frac{1}{2}"])
    assert out.scores == [1.0, 1.0] and not out.kinds, out.messages


def test_trl_accuracy_reward_scores_correct_answers_one():
    """TRL's own accuracy_reward reads chat-message completions (completion[0]["content"]) and a `solution`
    column: with reward.completion_format=messages (what TRL passes for a conversational dataset) it works."""
    pytest.importorskip("trl")
    reward = resolve_reward("trl.rewards:accuracy_reward")
    columns = {"solution": ["$4$", "$\\frac{1}{2}$"]}
    texts, answers = ["\\boxed{4}", "\\boxed{\\frac{1}{3}}"], ["4", "1/2"]
    out = reward.run(texts, answers, ["", ""], columns, completion_format="messages")
    assert out.scores == [1.0, 0.0] and not out.kinds, out.messages
    plain = reward.run(texts, answers, ["", ""], columns)  # text completions: one clear line on what to set
    assert plain.kinds == {"raised": 2} and "reward.completion_format=messages" in plain.messages[0]


def test_a_reward_that_spins_forever_leaves_nothing_running():
    import threading

    out = resolve_reward(f"{HERE}:spins").run(["a", "b"], ["1", "1"], timeout_s=0.2)
    assert out.kinds == {"timeout": 2}
    assert not [t for t in threading.enumerate() if t.name.startswith("hadw-reward") and t.is_alive()]


def test_a_reward_that_changes_directory_does_not_move_the_trainer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert resolve_reward(f"{HERE}:changes_directory").run(["a"], ["1"]).scores == [1.0]
        assert os.getcwd() == str(tmp_path)


def open_r1_on_gold(prompts, completions, answer, **kwargs):
    """open_r1_accuracy on the gold answer itself, boxed: a correct completion, whatever the tiny model wrote."""
    return open_r1_accuracy(prompts, [f"\\boxed{{{a}}}" for a in answer], answer)


def test_the_open_r1_accuracy_reward_scores_correct_answers_one_under_hadw_train(tiny_path, tmp_path):
    name = f"{HERE}:open_r1_on_gold"
    result = _train(tiny_path, tmp_path / "run", f"reward.functions=[{name}]", f"reward.correctness={name}",
                    "train.steps=2", "reward.timeout_s=5")  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["critic/score/mean"], r["reward/errors"], r["reward/timeouts"]) for r in rows] == [(1.0, 0.0, 0.0)] * 2


def test_an_in_process_reward_that_changes_directory_is_moved_back(tmp_path, monkeypatch):
    """Rewards that run in a thread of the trainer (a RewardFunction, a function object): the working directory
    is restored after every call."""
    import tempfile

    from hadw.rewards import RewardFunction, run_reward

    def wander(completion: str, answer: str) -> float:
        os.chdir(tempfile.mkdtemp())
        return 1.0

    monkeypatch.chdir(tmp_path)
    assert run_reward(RewardFunction("wander", wander), ["a", "b"], ["1", "1"]).scores == [1.0, 1.0]
    assert os.getcwd() == str(tmp_path)


def test_a_reward_thread_that_returns_after_its_timeout_never_moves_the_process(tmp_path, monkeypatch):
    """Issue 39, finding 11: an abandoned reward thread (timed out) that returns later must not chdir the process
    back to where it started (a run that has since moved on then wrote `my run/.lock` in the wrong folder); one
    that moved into a sandbox and hangs there is moved back by the caller at the timeout."""
    import tempfile
    import threading

    from hadw.rewards import RewardFunction, run_reward

    release = threading.Event()

    def late(completion: str, answer: str) -> float:
        os.chdir(tempfile.mkdtemp())  # a sandbox, then stuck past the timeout
        release.wait(10)
        return 1.0

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    assert run_reward(RewardFunction("late", late), ["x"], ["1"], timeout_s=0.2).kinds == {"timeout": 1}
    assert os.getcwd() == str(tmp_path / "a")  # the caller put it back at the timeout
    os.chdir(tmp_path / "b")  # the process moves on (the next test, the next command)
    release.set()
    for thread in [t for t in threading.enumerate() if t.name.startswith("hadw-reward")]:
        thread.join(5)
    assert os.getcwd() == str(tmp_path / "b")
