"""benchmarks/sweep_tables.py with several treatments against one baseline (a study's effect arm and its positive
control), on a planted sweep whose differences are known: one row per treatment, the control's verdict, and where
its pre-registered size lies against its interval."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pytest

from hadw import metrics as M
from tests.conftest import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks"
PILOT = BENCH / "studies" / "tiny_testbed" / "tiny_testbed_pilot.py"
sys.path[:0] = [str(BENCH), str(PILOT.parent)]  # the shared helpers, the pilot's folder
import sweep_tables  # noqa: E402
import tiny_testbed_pilot  # noqa: E402

PROBLEMS, SEEDS = 400, range(6)
# per arm: the chance a problem is solved; the control is 8 points lower on every seed, hadw the same as grpo
ACCURACY = {"grpo": 0.60, "hadw": 0.60, "control": 0.52}


def _planted_sweep(out, accuracy=ACCURACY):
    """out/<arm>/seed<N>/ with final_eval.json and final_eval_problems.jsonl, as `hadw compare` leaves them."""
    for seed in SEEDS:
        levels = np.random.default_rng(100 + seed).integers(2, 5, PROBLEMS)
        shared = np.random.default_rng(200 + seed).random(PROBLEMS)
        for arm, p in accuracy.items():
            # common random numbers (one draw per problem, shared by the arms, plus a little of the arm's own):
            # the paired differences are the planted ones up to a small, non-zero spread
            own = np.random.default_rng([seed, sum(map(ord, arm))]).random(PROBLEMS)
            scores = (0.9 * shared + 0.1 * own < p).astype(int)
            run = out / arm / f"seed{seed}"
            run.mkdir(parents=True)
            rows = [
                {"uid": f"u{i}", "level": int(lv), "scores": [int(s)]}
                for i, (lv, s) in enumerate(zip(levels, scores, strict=True))
            ]
            (run / M.FINAL_EVAL_PROBLEMS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
            final = {"all": {M.GREEDY: float(scores.mean()), "count": float(PROBLEMS)}}
            (run / M.FINAL_EVAL_FILE).write_text(json.dumps(final))


def _pack(tmp_path, treatment, predicted=(), testbed="planted", script=None):
    raw = tmp_path / "study.raw.json"
    args = argparse.Namespace(
        out=tmp_path / "sweep",
        baseline="grpo",
        treatment=treatment,
        predicted=list(predicted),
        raw=raw,
        table=[BENCH / "planted_study.md", REPO_ROOT / "README.md"],
        testbed=testbed,
        margin=0.01,
        script=script,
    )
    sweep_tables.pack(args)
    return json.loads(raw.read_text())


@pytest.fixture
def sweep(tmp_path):
    _planted_sweep(tmp_path / "sweep")
    return tmp_path


def test_two_treatments_make_a_row_each_and_the_control_is_detected_lower(sweep):
    raw = _pack(sweep, "hadw,control", ["control=-0.08"])
    assert raw["treatment"] == ["hadw", "control"] and raw["predicted"] == {"control": -0.08}
    assert raw["tables"] == ["benchmarks/planted_study.md", "README.md"]
    assert {r["arm"] for r in raw["runs"]} == {"grpo", "hadw", "control"} and len(raw["runs"]) == 18
    primary = sweep_tables.tables(raw)["planted_primary"].splitlines()
    assert primary[0].startswith("| testbed | arm | seeds | grpo | arm | arm − grpo [95 % t]")
    rows = {line.split(" | ")[1]: line for line in primary[2:]}
    assert set(rows) == {"hadw", "control"}
    control = sweep_tables.comparison(raw, "control")["pair"].diff
    assert control.high < 0 and control.low < -0.08 < control.high, control
    assert "a difference (lower with the treatment)" in rows["control"]
    assert "pre-registered size -0.0800 inside the interval" in rows["control"]
    assert "pre-registered" not in rows["hadw"]
    variance = sweep_tables.tables(raw)["planted_variance"]
    assert "| arm | problems / seed |" in variance and "control − grpo:" in variance and "hadw − grpo:" in variance


def test_a_pre_registered_size_outside_the_interval_is_said(sweep):
    raw = _pack(sweep, "hadw,control", ["control=-0.01"])
    row = next(line for line in sweep_tables.tables(raw)["planted_primary"].splitlines() if "| control |" in line)
    assert "pre-registered size -0.0100 outside the interval" in row


def test_one_treatment_keeps_the_older_layout(sweep):
    raw = _pack(sweep, "control")
    assert raw["treatment"] == "control" and "predicted" not in raw
    primary = sweep_tables.tables(raw)["planted_primary"]
    assert primary.startswith("| testbed | seeds | grpo | control | control − grpo [95 % t] |")


def test_a_predicted_size_for_an_arm_not_compared_is_refused(sweep):
    with pytest.raises(SystemExit, match="'lr050' is not one of --treatment"):
        _pack(sweep, "hadw,control", ["lr050=-0.01"])


@pytest.mark.parametrize(
    ("measured", "expected"),
    [
        ({0.50: -0.04, 0.75: -0.02}, (0.85, -0.012)),  # d(0.875) = -0.01: the grid's largest below it
        ({0.50: -0.008, 0.75: -0.003}, (0.50, -0.008)),  # nothing reaches one point: the smallest factor
        ({0.25: -0.03, 0.50: -0.004, 0.75: -0.001}, (0.40, -0.0144)),  # the extended pilot's grid starts at 0.25
    ],
)
def test_the_pilot_rule_picks_the_pre_registered_factor(measured, expected):
    f, size = tiny_testbed_pilot.control_rule(measured)
    assert (f, round(size, 6)) == expected


def test_the_pilot_rule_block_is_rebuilt_from_the_pilot_raw_file(tmp_path):
    """lr arms that learn less choose an lr control; lr arms that learn more (what the real pilot found) hand the
    choice to Amendment 1's G rule."""
    _planted_sweep(tmp_path / "sweep", {"grpo": 0.60, "lr050": 0.54, "lr075": 0.58, "g7": 0.58})
    raw = _pack(tmp_path, "lr050,lr075,g7", testbed="tiny_pilot", script=PILOT)
    assert raw["script"] == "benchmarks/studies/tiny_testbed/tiny_testbed_pilot.py"
    measured = {f: sweep_tables.comparison(raw, arm)["pair"].diff.mean for arm, f in (("lr050", 0.5), ("lr075", 0.75))}
    assert measured[0.5] < -0.03 and measured[0.75] < -0.005, measured
    f, size = tiny_testbed_pilot.control_rule(measured)
    rule = tiny_testbed_pilot.tables(raw)["tiny_pilot_rule"].splitlines()
    assert rule[0] == "| rule | measured | outcome |" and 0.5 <= f <= 0.95 and size <= -0.01
    assert rule[2].endswith(f"f* = {f:.2f} (lr {f * 1e-4:.3g}), pre-registered size d(f*) = {size:+.4f} |"), rule[2]
    d7 = sweep_tables.comparison(raw, "g7")["pair"].diff.mean
    assert d7 < -0.005 and rule[3].endswith(f"control G = 7, pre-registered size d(7) = {d7:+.4f} |"), rule[3]


def test_lr_arms_that_learn_more_hand_the_control_to_the_g_rule(tmp_path):
    _planted_sweep(tmp_path / "sweep", {"grpo": 0.60, "lr050": 0.62, "lr075": 0.61, "g7": 0.60})
    raw = _pack(tmp_path, "lr050,lr075,g7", testbed="tiny_pilot", script=PILOT)
    rule = tiny_testbed_pilot.tables(raw)["tiny_pilot_rule"].splitlines()
    assert "a smaller lr did not learn less; the rule's lr025 is not run" in rule[2]
    assert "pilot 2 adds g6" in rule[3]  # G = 7 cost less than half a point: the rule asks for G = 6


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["rebuild", "--raw", "{tmp}/not_json.raw.json"], "not_json.raw.json: not JSON (JSONDecodeError"),
        (["rebuild", "--raw", "{tmp}/list.raw.json"], "list.raw.json: not a raw file `pack` wrote"),
        (["rebuild", "--raw", "{tmp}/absent.raw.json"], "absent.raw.json: cannot read it (No such file"),
        (
            ["pack", "--raw", "{tmp}/x.raw.json", "--out", "{tmp}", "--baseline", "a", "--treatment", "b"],
            "error: pack needs --table, --testbed",
        ),
    ],
    ids=["not_json", "not_an_object", "absent", "pack_without_table"],
)
def test_a_bad_raw_file_or_a_missing_pack_option_is_one_line(tmp_path, args, needle):
    """Issue 49, finding 7: a raw file that is not JSON, and pack without --table, were tracebacks."""
    import subprocess

    (tmp_path / "not_json.raw.json").write_text("{ not json")
    (tmp_path / "list.raw.json").write_text("[1, 2]")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = subprocess.run(
        [sys.executable, str(BENCH / "sweep_tables.py"), *argv], capture_output=True, text=True, timeout=120
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and needle in lines[0], done.stderr
    assert not (tmp_path / "x.raw.json").exists()
