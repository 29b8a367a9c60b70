"""Verifiers (math / exact / format), the worker pool's timeout and error handling, and score().

This module does not import torch: pool workers import it to unpickle the test-only reward functions.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hadw.rewards import (
    REWARDS,
    RewardFunction,
    RewardSpec,
    exact_item,
    format_item,
    get_reward,
    math_item,
    register_reward,
    run_reward,
    score,
)

# sympy tries to evaluate 9^(9^(9^9)) exactly: math-verify does not return for minutes.
PATHOLOGICAL = "\\boxed{9^{9^{9^{9}}}}"


def _sleeps(completion: str, answer: str) -> float:  # module level: picklable into the pool
    time.sleep(60)
    return 1.0


def _crashes_on_x(completion: str, answer: str) -> float:
    if completion == "x":
        os.kill(os.getpid(), signal.SIGKILL)  # an OOM kill (os._exit is caught and counted as an exit)
    return 1.0


def _raises_on_x(completion: str, answer: str) -> float:
    if completion == "x":
        raise ZeroDivisionError("bad item")
    return 1.0


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("so the answer is \\boxed{0.5}", "\\frac{1}{2}", 1.0),  # decimal vs fraction
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{\\frac{\\sqrt3}{2}}", "\\frac{\\sqrt{3}}{2}", 1.0),  # brace-less \sqrt3
        ("\\boxed{[1, 3)}", "[1,3)", 1.0),  # intervals
        ("\\boxed{(1, 3)}", "[1,3)", 0.0),
        ("\\boxed{(-\\infty, 2] \\cup [5, \\infty)}", "(-\\infty,2]\\cup[5,\\infty)", 1.0),
        ("Janet makes 9 * 2 = 18 dollars.\n#### 72", "72", 1.0),  # GSM8K style
        ("#### 1,450,000", "1450000", 1.0),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
        ("\\boxed{90^\\circ}", "90", 1.0),
        ("\\boxed{\\text{Evelyn}}", "\\text{Evelyn}", 1.0),
        ("first \\boxed{3} then \\boxed{4}", "4", 1.0),  # the LAST box counts
        ("first \\boxed{4} then \\boxed{3}", "4", 0.0),
        ("\\boxed{\\frac{14}{3}}", "\\frac{13}{3}", 0.0),  # wrong answers
        ("\\boxed{72}", "27", 0.0),
        ("the answer is 72", "72", 0.0),  # no \boxed{}: the paper's reward needs one
        ("\\boxed{72", "72", 0.0),  # truncated box
        ("@@#$%^ \\boxed{}}}{{", "72", 0.0),  # garbage
        ("", "72", 0.0),
    ],
)
def test_math_verifier(completion, gold, expected):
    assert math_item(completion, gold) == expected  # in-process
    assert get_reward("math")([completion], [gold]) == [expected]  # through the pool


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("85", "85", 1),
        (" 85\n", "85", 1),
        ("085", "85", 1),
        ("-12", "-12", 1),
        ("\\boxed{85}", "85", 1),
        ("#### 1,450", "1450", 1),
        ("84", "85", 0),
        ("85x", "85", 0),
        ("8 5", "85", 0),
        ("", "85", 0),
        ("12", "-12", 0),
        ("\\frac{1}{2}", "0.5", 0),
    ],
)
def test_exact_verifier(completion, gold, expected):
    assert exact_item(completion, gold) == expected


@given(st.integers(-(10**12), 10**12), st.integers(-5, 5))
def test_exact_accepts_exactly_the_gold_integer(n, offset):
    assert exact_item(str(n + offset), str(n)) == float(offset == 0)


def test_format_reward():
    assert [format_item(c, "") for c in ["\\boxed{3}", "x #### 3", "\\boxed{}", "\\boxed{3", "3"]] == [1, 1, 0, 0, 0]


def test_a_pathological_answer_costs_the_timeout_scores_zero_and_is_counted():
    completions = ["\\boxed{2}", PATHOLOGICAL, "\\boxed{\\frac{1}{2}}"]
    start = time.monotonic()
    result = score(completions, ["2", "1", "0.5"], timeout_s=2.0)
    elapsed = time.monotonic() - start
    assert result.correctness.tolist() == [1.0, 0.0, 1.0]
    assert (result.num_timeouts, result.num_errors) == (1, 0)
    assert elapsed < 2.0 + 15.0  # one timeout, plus slack for a loaded machine
    # the pool recovers: the next call works normally
    assert score(["\\boxed{3}"], ["3"], timeout_s=2.0).correctness.tolist() == [1.0]


def test_a_hanging_test_reward_is_cut_off_in_the_pool():
    sleepy = RewardFunction("sleepy", _sleeps, isolated=True)
    result = run_reward(sleepy, ["a", "b"], ["1", "1"], timeout_s=0.5)
    assert result.scores == [0.0, 0.0] and result.num_timeouts == 2
    assert result.messages == ["no result within 0.5 s"] * 2


@pytest.mark.parametrize("isolated", [False, True])
def test_a_raising_item_scores_zero_and_is_counted_never_fatal(isolated):
    flaky = RewardFunction("flaky", _raises_on_x, isolated=isolated)
    result = score(["x", "y", "x"], ["1", "1", "1"], [RewardSpec("flaky", fn=flaky)], correctness="flaky")
    assert result.total.tolist() == [0.0, 1.0, 0.0]
    assert (result.num_errors, result.num_timeouts) == (2, 0)
    assert result.messages[0] == "flaky: ZeroDivisionError: bad item"


def test_a_crashing_worker_is_replaced_and_its_item_counted_as_error():
    crashy = RewardFunction("crashy", _crashes_on_x, isolated=True)
    result = run_reward(crashy, ["y", "x", "y", "y"], ["1"] * 4, timeout_s=5.0)
    assert result.scores == [1.0, 0.0, 1.0, 1.0]
    assert (result.num_errors, result.num_timeouts) == (1, 0)
    assert result.messages == ["verifier worker died (exit code -9)"]


def test_an_unpicklable_isolated_reward_is_a_clear_configuration_error():
    local = RewardFunction("local", lambda c, a: 1.0, isolated=True)
    with pytest.raises(ValueError, match=r"reward 'local' runs in the verifier pool, so its item_fn must be"):
        local(["a"], ["a"])
    assert local(["a"], ["a"], timeout_s=None) == [1.0]  # in-process needs no pickling


def test_a_plain_batch_callable_that_raises_is_retried_item_by_item():
    class Picky:
        name = "picky"

        def __call__(self, completions, answers):
            if "bad" in completions:
                raise ValueError("cannot score 'bad'")
            return [float(len(c)) for c in completions]

    register_reward(Picky())
    try:
        result = score(["ab", "bad", "abcd"], ["", "", ""], [RewardSpec("picky", 0.5)], correctness="exact")
    finally:
        del REWARDS["picky"]
    assert result.per_reward["picky"].tolist() == [2.0, 0.0, 4.0]
    assert result.total.tolist() == [1.0, 0.0, 2.0]
    assert result.num_errors == 1


def test_score_weights_and_correctness_designation():
    completions = ["\\boxed{0.5}", "\\boxed{2}", "1/2", ""]
    answers = ["\\frac{1}{2}"] * 4
    result = score(completions, answers, [RewardSpec("math", 1.0), RewardSpec("format", 0.25)], correctness="math")
    assert result.per_reward["math"].tolist() == [1, 0, 0, 0]
    assert result.per_reward["format"].tolist() == [1, 1, 0, 0]
    assert result.total.tolist() == [1.25, 0.25, 0.0, 0.0]
    assert result.correctness.tolist() == [1, 0, 0, 0]
    assert str(result.total.dtype) == str(result.correctness.dtype) == "torch.float32"
    # correctness need not be a term of the total: format-only total, math still read as correctness
    only_format = score(completions, answers, [RewardSpec("format", 2.0)], correctness="math")
    assert only_format.total.tolist() == [2.0, 2.0, 0.0, 0.0]
    assert only_format.correctness.tolist() == [1, 0, 0, 0]
    assert set(only_format.per_reward) == {"format", "math"}
    # the exact fast path: integers only, no pool
    exact = score(["85", " 85", "86"], ["85"] * 3, correctness="exact", timeout_s=None)
    assert exact.total.tolist() == exact.correctness.tolist() == [1, 1, 0]


def test_score_rejects_bad_configuration():
    with pytest.raises(ValueError, match=r"unknown reward 'maths'; allowed: exact, format, math, math_any"):
        score(["a"], ["a"], correctness="maths")
    with pytest.raises(ValueError, match="duplicate reward names"):
        score(["a"], ["a"], [RewardSpec("format"), RewardSpec("format")])
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        score(["a", "b"], ["a"])
    # a correctness score other than 0 / 1 is an item error (issue 23), not a crash of the run
    half = score(
        ["\\boxed{1}", "x"],
        ["1", "1"],
        [RewardSpec("format2", fn=RewardFunction("format2", lambda c, a: 0.5 if c == "x" else 1.0))],
        correctness="format2",
    )
    assert half.correctness.tolist() == [1.0, 0.0] and half.errors == {"format2": {"out of range": 1}}
    assert half.first_errors["format2"].row == 1 and "not 0 or 1" in half.first_errors["format2"].message


def _spins_one_cpu_second(completion: str, answer: str) -> float:
    import time

    start = time.process_time()  # CPU time: it does not run on while the process is stopped
    while time.process_time() - start < 1.0:
        pass
    return 1.0


def test_time_stopped_is_not_charged_to_a_reward_timeout():
    """Issue 31, item 9: Ctrl-Z / SIGSTOP stops the trainer and its verifier workers; after SIGCONT an item that
    needs 1 s of work within a 3 s timeout must not time out because the stop lasted 4 s."""
    import subprocess

    from hadw.rewards.pool import VerifierPool

    pool = VerifierPool(num_workers=1, warm_up=False)
    try:
        assert pool.map(exact_item, ["1"], ["1"], 30.0)[0].value == 1.0  # started, nothing to wait for
        pids = f"{os.getpid()} {pool.workers[0].process.pid}"
        stopper = subprocess.Popen(["sh", "-c", f"sleep 0.3; kill -STOP {pids}; sleep 4; kill -CONT {pids}"])
        try:
            (outcome,) = pool.map(_spins_one_cpu_second, ["a"], ["1"], 3.0)
        finally:
            stopper.wait()
        assert outcome.status == "ok" and outcome.value == 1.0, outcome
    finally:
        pool.close()


def test_time_stopped_is_not_charged_to_an_in_process_reward_timeout():
    """The same for a reward that runs in a thread of the trainer (the whole process stops, its thread too)."""
    import subprocess

    reward = RewardFunction("spin", _spins_one_cpu_second)
    stopper = subprocess.Popen(["sh", "-c", f"sleep 0.3; kill -STOP {os.getpid()}; sleep 4; kill -CONT {os.getpid()}"])
    try:
        result = run_reward(reward, ["a"], ["1"], timeout_s=3.0)
    finally:
        stopper.wait()
    assert result.scores == [1.0] and not result.kinds, result.messages


def test_a_reward_whose_module_fails_to_import_only_in_the_worker_is_one_line(tmp_path, monkeypatch):
    """Issue 39, finding 9: a reward module that imports in the trainer but not in the verifier pool's fresh process
    was a RuntimeError traceback; a UserError (one line) naming the function and what a pool reward needs now."""
    import sys

    from hadw.errors import UserError
    from hadw.rewards.pool import VerifierPool

    (tmp_path / "trainer_only_reward.py").write_text(
        "import multiprocessing\n"
        "if multiprocessing.parent_process() is not None:\n"
        "    raise ImportError('this module imports in the trainer only')\n"
        "def score(completion, answer):\n"
        "    return 1.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__("trainer_only_reward")
    pool = VerifierPool(num_workers=1, warm_up=False)
    try:
        with pytest.raises(UserError, match="trainer_only_reward:score in its worker process.*must import there"):
            pool.map(module.score, ["1"], ["1"], 30.0)
    finally:
        pool.close()
        sys.modules.pop("trainer_only_reward", None)


def _score_in_the_pool_and_return() -> None:  # a spawned process's target: module level
    from hadw.rewards.pool import get_pool
    from hadw.rewards.verifiers import exact_item

    assert [o.value for o in get_pool().map(exact_item, ["7"], ["7"], 30.0)] == [1.0]


def test_a_process_multiprocessing_started_ends_after_using_the_pool():
    """A `hadw compare --jobs N` worker scores a real-model run through the verifier pool, then ends. There
    multiprocessing's exit handling runs before atexit: it sends SIGTERM to its daemonic children and joins them, and
    verifier workers ignore SIGTERM, so the worker waited for ever and the sweep never ended (found on a SmolLM2
    sweep: 8 of 8 runs done, the command still waiting). The pool now closes before that join."""
    import multiprocessing as mp

    process = mp.get_context("spawn").Process(target=_score_in_the_pool_and_return)
    process.start()
    process.join(timeout=90)
    try:
        assert process.exitcode == 0, f"exit code {process.exitcode} (None: still waiting on its verifier workers)"
    finally:
        if process.exitcode is None:
            process.kill()
            process.join()
