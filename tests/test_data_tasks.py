"""Built-in procedural tasks: deterministic, correct answers, short questions, difficulty ordered by level."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from hadw.data import TASKS, Problem, column_operations, make_task, sample_problems
from hadw.rewards import exact_item


def _solve_linear(question: str) -> int:
    a, b, c = re.fullmatch(r"(\d*)x([+-]\d+)=(-?\d+)", question).groups()
    a = int(a or 1)
    assert (int(c) - int(b)) % a == 0, question
    return (int(c) - int(b)) // a


@pytest.mark.parametrize("name", list(TASKS))
def test_same_seed_same_problems_other_seed_different(name):
    first = sample_problems(name, 50, seed=3)
    assert first == sample_problems(name, 50, seed=3)
    assert first != sample_problems(name, 50, seed=4)
    stream = make_task(name, seed=3)  # infinite, random access agrees with iteration
    assert stream[37] == first[37]
    assert [p for p, _ in zip(stream, range(50), strict=False)] == first


def test_uids_are_unique_and_name_task_level_seed_index():
    problems = sample_problems("addition", 200, levels=[2, 4], seed=7)
    assert len({p.uid for p in problems}) == 200
    assert problems[17].uid == f"addition:L{problems[17].level}:7:17"
    assert {p.level for p in problems} == {2, 4}


def test_addition_answers_equal_python_eval_and_levels_match_the_table():
    table = {1: (2, 1), 2: (2, 2), 3: (2, 3), 4: (3, 2), 5: (3, 3)}  # level: (operands, digits)
    for level, (operands, digits) in table.items():
        for p in sample_problems("addition", 300, levels=[level], seed=level):
            assert int(p.answer) == eval(p.question)
            numbers = re.findall(r"\d+", p.question)
            assert len(numbers) == operands
            assert all(len(n) == digits for n in numbers)
            assert len(p.question) <= 16
            if level <= 2:
                assert "-" not in p.question


def test_sums_answers_and_operand_digits_match_the_table():
    table = {1: (1, 1), 2: (2, 1), 3: (2, 2), 4: (3, 2), 5: (3, 3)}  # level: (digits of a, digits of b)
    for level, digits in table.items():
        for p in sample_problems("sums", 300, levels=[level], seed=level):
            a, b = p.question.split("+")
            assert (len(a), len(b)) == digits
            assert int(p.answer) == int(a) + int(b)


def test_linear_answers_solve_the_equation():
    for p in sample_problems("linear", 1000, seed=1):
        assert int(p.answer) == _solve_linear(p.question)
        assert len(p.question) <= 16
    assert sample_problems("linear", 1, levels=[1], seed=0)[0].question.startswith("x")


def test_bad_task_or_level_lists_allowed_values():
    with pytest.raises(ValueError, match=r"unknown task 'mult'; allowed: addition, linear, sums"):
        make_task("mult")
    with pytest.raises(ValueError, match=r"bad levels \[9\].*allowed: \[1, 2, 3, 4, 5\]"):
        make_task("addition", levels=[9])
    with pytest.raises(TypeError):
        len(make_task("addition"))
    assert len(make_task("addition", size=5)) == 5


def test_column_operations_hand_counted():
    # 47+38: 2 columns. 512-97+6: 512-97 (3 columns) then 415+6 (3 columns).
    assert column_operations(Problem("47+38", "85", 2, "addition", "u")) == 2
    assert column_operations(Problem("512-97+6", "421", 5, "addition", "u")) == 6
    # 3x+7=22: 22-7 (2 columns) then 15/3 (2 dividend digits); x+4=9: one column, no division.
    assert column_operations(Problem("3x+7=22", "5", 2, "linear", "u")) == 4
    assert column_operations(Problem("x+4=9", "5", 1, "linear", "u")) == 1
    # sums counts carries too: 47+8 = 2 columns + 1 carry; 99+1 carries twice; 12+34 none.
    assert column_operations(Problem("47+8", "55", 2, "sums", "u")) == 3
    assert column_operations(Problem("99+1", "100", 2, "sums", "u")) == 4
    assert column_operations(Problem("12+34", "46", 3, "sums", "u")) == 2
    assert column_operations(Problem("3+4", "7", 1, "sums", "u")) == 1


def _simulated_solver(problem, rng: random.Random, p_slip: float) -> str:
    """A proxy "model": each digit-level step goes wrong independently with probability p_slip; any slip
    turns the answer into a wrong number. So accuracy = E[(1 - p_slip) ** steps]: more digit operations,
    lower accuracy. It checks that levels order the *work* a problem needs, not how a real model learns."""
    slipped = any(rng.random() < p_slip for _ in range(column_operations(problem)))
    return str(int(problem.answer) + rng.choice([-10, -1, 1, 10])) if slipped else problem.answer


@pytest.mark.parametrize("name", list(TASKS))
def test_simulated_solver_accuracy_strictly_decreases_with_level(name):
    rng = random.Random(0)
    accuracy = []
    for level in TASKS[name].levels:
        problems = sample_problems(name, 4000, levels=[level], seed=11)
        completions = [_simulated_solver(p, rng, p_slip=0.1) for p in problems]
        accuracy.append(sum(exact_item(c, p.answer) for c, p in zip(completions, problems, strict=True)) / 4000)
    # Expected (1-0.1)^steps: addition 0.90, 0.81, 0.73, ~0.64, ~0.51; linear ~0.87, 0.71, 0.61, 0.54, 0.46;
    # sums (a gentler grading) ~0.86, 0.77, 0.73, 0.65, 0.62. Adjacent gaps are >= 0.03, i.e. > 3 standard
    # errors of the difference of two 4000-sample means.
    assert all(a > b + 0.02 for a, b in itertools.pairwise(accuracy)), accuracy
    assert accuracy[0] == pytest.approx({"addition": 0.9, "linear": 0.87, "sums": 0.86}[name], abs=0.02)
