"""`hadw compare`: intervals against scipy and hand-computed values, aggregation of synthetic run logs,
run status / reuse / resume, and a real (tiny) two-arm run."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.experiments import compare as cmp
from hadw.experiments.stats import bootstrap_interval, interval, paired_difference, t_interval

SAMPLE = [0.61, 0.58, 0.66, 0.63, 0.59]


def flat(output: str) -> str:
    """CLI output without rich's box drawing and line wrapping."""
    return " ".join(output.replace("│", " ").split())


# ------------------------------------------------------------------------------------------- intervals
def test_t_interval_by_hand_and_against_scipy():
    iv = t_interval(SAMPLE)
    # mean 0.614, s = sqrt(0.00412 / 4) = 0.0320936, t_{0.975, 4} = 2.776445 -> half width 0.0398495
    assert iv.mean == pytest.approx(0.614) and iv.std == pytest.approx(0.0320936, abs=1e-7)
    assert (iv.low, iv.high) == pytest.approx((0.5741505, 0.6538495), abs=1e-7)
    ci = stats.ttest_1samp(SAMPLE, 0.0).confidence_interval(0.95)
    assert (iv.low, iv.high) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert t_interval(SAMPLE, 0.99).half_width > iv.half_width


def test_interval_degenerate_cases_and_errors():
    one = t_interval([0.3])
    assert (one.low, one.mean, one.high, one.n) == (0.3, 0.3, 0.3, 1)
    same = bootstrap_interval([0.2, 0.2, 0.2])
    assert same.low == same.mean == same.high == pytest.approx(0.2)
    with pytest.raises(ValueError, match="no values"):
        t_interval([])
    with pytest.raises(ValueError, match="non-finite"):
        t_interval([0.1, float("nan")])
    with pytest.raises(ValueError, match="allowed: t, bootstrap"):
        interval(SAMPLE, method="wald")


def test_bootstrap_interval_is_deterministic_within_range_and_close_to_t_for_large_samples():
    a, b = bootstrap_interval(SAMPLE, seed=1), bootstrap_interval(SAMPLE, seed=1)
    assert a == b and min(SAMPLE) <= a.low < a.mean < a.high <= max(SAMPLE)
    x = np.random.default_rng(0).normal(0.5, 0.1, size=400)
    boot, t = bootstrap_interval(x), t_interval(x)
    assert boot.low == pytest.approx(t.low, abs=0.003) and boot.high == pytest.approx(t.high, abs=0.003)


def test_paired_difference_by_hand():
    d = paired_difference({0: 0.55, 1: 0.62, 2: 0.76, 3: 0.9}, {0: 0.5, 1: 0.6, 2: 0.7})
    # seed 3 has no partner; differences 0.05, 0.02, 0.06: mean 0.043333, s 0.0208167, t_{0.975,2} 4.302653
    assert d.seeds == [0, 1, 2]
    assert d.diff.mean == pytest.approx(0.0433333, abs=1e-7)
    assert (d.diff.low, d.diff.high) == pytest.approx((-0.0083781, 0.0950448), abs=1e-7)
    assert d.p_value == pytest.approx(stats.ttest_rel([0.55, 0.62, 0.76], [0.5, 0.6, 0.7]).pvalue)
    assert d.p_value == pytest.approx(0.0690507, abs=1e-6)
    with pytest.raises(ValueError, match="no common seeds"):
        paired_difference({1: 0.1}, {2: 0.2})


# ------------------------------------------------------------------------------------------- fake runs
def fake_run(out: Path, arm: str, seed: int, finals: dict[str, float] | None, curve=(0.1, 0.2, 0.3, 0.4)) -> Path:
    run_dir = out / arm / f"seed{seed}"
    run_dir.mkdir(parents=True)
    records = [{"step": i + 1, "critic/score/mean": a, "hadw/anchor": 0.5} for i, a in enumerate(curve)]
    if finals is not None:
        final_eval = {bucket: {"count": 20.0, "greedy": v} for bucket, v in finals.items()}
        (run_dir / "final_eval.json").write_text(json.dumps(final_eval))
        (run_dir / "final_model").mkdir()
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


GRPO = {0: {"all": 0.5, "addition/L1": 0.9}, 1: {"all": 0.6, "addition/L1": 0.8}, 2: {"all": 0.7, "addition/L1": 1.0}}
HADW = {
    0: {"all": 0.55, "addition/L1": 0.9},
    1: {"all": 0.62, "addition/L1": 0.9},
    2: {"all": 0.76, "addition/L1": 0.9},
}


@pytest.fixture
def fake_out(tmp_path):
    for seed in range(3):
        fake_run(tmp_path, "grpo", seed, GRPO[seed], curve=(0.0, 1.0, 0.0, 1.0) if seed == 0 else (1.0,) * 4)
        fake_run(tmp_path, "hadw", seed, HADW[seed])
    fake_run(tmp_path, "hadw", 3, None)  # interrupted: no final record
    return tmp_path


def test_aggregate_synthetic_runs_by_hand(fake_out):
    runs = cmp.collect_runs(fake_out, ["grpo", "hadw"], [0, 1, 2, 3])
    result = cmp.aggregate(runs)
    assert result.baseline == "grpo" and result.missing == {"grpo": [], "hadw": [3]}
    assert sorted(result.metrics) == ["val/addition/L1/greedy", "val/all/greedy"]  # count is not a compared metric
    m = result.metrics["val/all/greedy"]
    assert m.values["hadw"] == {0: 0.55, 1: 0.62, 2: 0.76}
    assert m.arms["grpo"].mean == pytest.approx(0.6) and m.arms["grpo"].n == 3
    # grpo: 0.5, 0.6, 0.7 -> s = 0.1, half width 4.302653 * 0.1 / sqrt(3) = 0.2484138
    assert (m.arms["grpo"].low, m.arms["grpo"].high) == pytest.approx((0.3515862, 0.8484138), abs=1e-7)
    assert m.diffs["hadw"].diff.mean == pytest.approx(0.0433333, abs=1e-7)
    assert (m.diffs["hadw"].diff.low, m.diffs["hadw"].diff.high) == pytest.approx((-0.0083781, 0.0950448), abs=1e-7)
    level = result.metrics["val/addition/L1/greedy"]
    assert level.arms["hadw"].low == level.arms["hadw"].high == pytest.approx(0.9)  # no spread
    # differences 0, +0.1, −0.1: mean 0, s 0.1, same half width as above, p = 1
    d = level.diffs["hadw"]
    assert d.diff.mean == pytest.approx(0.0, abs=1e-12) and d.p_value == pytest.approx(1.0)
    assert (d.diff.low, d.diff.high) == pytest.approx((-0.2484138, 0.2484138), abs=1e-7)
    flipped = cmp.aggregate(runs, baseline="hadw").metrics["val/all/greedy"].diffs["grpo"]
    assert flipped.diff.mean == pytest.approx(-0.0433333, abs=1e-7)
    with pytest.raises(ValueError, match="baseline arm 'dapo'"):
        cmp.aggregate(runs, baseline="dapo")


def test_curve_smoothing_and_band_by_hand(fake_out):
    runs = cmp.collect_runs(fake_out, ["grpo"], [0, 1])
    steps, mean, low, high = cmp.curve(list(runs["grpo"].values()), "critic/score/mean", smooth=2)
    # seed 0 smoothed (window 2, trailing): 0, .5, .5, .5; seed 1: 1, 1, 1, 1
    assert steps.tolist() == [1, 2, 3, 4] and mean.tolist() == pytest.approx([0.5, 0.75, 0.75, 0.75])
    half = stats.t.ppf(0.975, 1) * np.std([0.0, 1.0], ddof=1) / np.sqrt(2)  # 12.706 * 0.5
    assert high[0] - mean[0] == pytest.approx(half) and mean[0] - low[0] == pytest.approx(half)


def test_compare_cli_collect_only_writes_tables_json_and_plot(fake_out):
    result = CliRunner().invoke(build_app(), ["compare", "--out", str(fake_out), "--collect-only", "--smooth", "1"])
    assert result.exit_code == 0, result.output
    md = (fake_out / "compare.md").read_text()
    assert "| all | 0.600 [0.352, 0.848] (3) | 0.643 [0.378, 0.909] (3) | +0.043 [-0.008, +0.095] | 0.069 |" in md
    assert "Unfinished runs (left out): {'hadw': [3]}" in md
    # MDE at 80 % power for n = 3 pairs: 3.264 × the SD of the differences (0.0208; L1: 0.1); one primary row
    assert "| 0.069 | 0.068 | **primary** |" in md and "| 1.000 | 0.326 | exploratory |" in md
    assert "Primary comparison: `val/all/greedy`" in md
    data = json.loads((fake_out / "compare.json").read_text())
    assert data["metrics"]["val/all/greedy"]["diffs"]["hadw"]["seeds"] == [0, 1, 2]
    assert data["primary"] == "val/all/greedy"
    assert data["metrics"]["val/all/greedy"]["diffs"]["hadw"]["mde_80"] == pytest.approx(3.2640 * 0.0208167, rel=1e-3)
    chosen = CliRunner().invoke(build_app(), ["compare", "--out", str(fake_out), "--collect-only", "--smooth", "1",
                                              "--primary", "addition/L1/greedy"])  # fmt: skip
    assert chosen.exit_code == 0, chosen.output
    assert "| 1.000 | 0.326 | **primary** |" in (fake_out / "compare.md").read_text()
    bad = CliRunner().invoke(build_app(), ["compare", "--out", str(fake_out), "--collect-only", "--primary", "all/x"])
    assert bad.exit_code == 2 and "not among the final metrics" in bad.output
    assert (fake_out / "compare.png").stat().st_size > 10_000


def test_compare_cli_leaves_out_runs_made_with_another_config(fake_out):
    (fake_out / "grpo" / "seed0" / "config.yaml").write_text("train:\n  steps: 1\n")  # not what the arm asks for
    result = CliRunner().invoke(
        build_app(),
        ["compare", "--out", str(fake_out), "--arm", "grpo:", "--arm", "hadw:", "--seeds", "0-2", "--smooth", "1"],
    )
    assert result.exit_code == 1 and "different configuration" in result.output
    assert "1 failed" in result.output and "5 reused" in result.output
    md = (fake_out / "compare.md").read_text()
    assert "| all | 0.650 [0.015, 1.285] (2) | 0.643 [0.378, 0.909] (3) | +0.040 [-0.214, +0.294] |" in md


def test_compare_cli_seed_ranges(fake_out):
    result = CliRunner().invoke(build_app(), ["compare", "--out", str(fake_out), "--collect-only", "--seeds", "0-1,2"])
    assert result.exit_code == 0, result.output
    assert "seeds [0, 1, 2]" in (fake_out / "compare.md").read_text()
    bad = CliRunner().invoke(build_app(), ["compare", "--out", str(fake_out), "--collect-only", "--seeds", "a-b"])
    assert bad.exit_code != 0 and "expected integers like 0,1,2 or 0-4" in flat(bad.output)


def test_compare_cli_collect_errors(tmp_path):
    result = CliRunner().invoke(build_app(), ["compare", "--out", str(tmp_path / "none"), "--collect-only"])
    assert result.exit_code != 0 and "no compare_manifest.json and no <arm>/seed<k>/ run dirs" in flat(result.output)


# ------------------------------------------------------------------------------------------- arms, plans, status
def test_parse_arm_and_split_overrides():
    assert cmp.parse_arm("grpo:") == cmp.Arm("grpo", ())
    assert cmp.parse_arm("g16:rollout.group_size=16").overrides == ("rollout.group_size=16",)
    arm = cmp.parse_arm("dapo+hadw:algorithm.preset=dapo, hadw.enabled=true data.levels=[1,2]")
    assert arm.overrides == ("algorithm.preset=dapo", "hadw.enabled=true", "data.levels=[1,2]")
    for bad, match in (("grpo", "NAME:OVERRIDES"), ("a/b:x=1", "NAME:OVERRIDES"), ("x:hadw.enabled", "key=value")):
        with pytest.raises(ValueError, match=match):
            cmp.parse_arm(bad)


def test_plan_runs_set_seed_and_output_last(tmp_path):
    from hadw.train.config import load_config

    arms = [cmp.parse_arm("grpo:train.seed=99"), cmp.parse_arm("hadw:hadw.enabled=true")]
    specs = cmp.plan_runs(None, arms, [3, 4], tmp_path, ["train.steps=7"])
    # seed-major, so a sweep stopped after its first runs holds whole pairs
    assert [(s.arm, s.seed) for s in specs] == [("grpo", 3), ("hadw", 3), ("grpo", 4), ("hadw", 4)]
    cfg = load_config(None, list(specs[0].overrides))
    assert (cfg.train.seed, cfg.train.steps, cfg.train.output_dir) == (3, 7, str(tmp_path / "grpo" / "seed3"))
    assert (
        cfg.train.num_threads == 1 and not cfg.hadw.enabled and load_config(None, list(specs[1].overrides)).hadw.enabled
    )
    with pytest.raises(ValueError, match="unique"):
        cmp.plan_runs(None, [arms[0], arms[0]], [0], tmp_path)


def test_run_status_and_reuse_and_config_mismatch(tmp_path):
    from hadw.train.config import config_to_yaml, load_config

    finished = fake_run(tmp_path, "a", 0, {"all": 0.5})
    resumable = fake_run(tmp_path, "a", 1, None)
    (resumable / "checkpoint-000002").mkdir()
    (resumable / "checkpoint-000002" / "state.json").write_text("{}")
    (resumable / "latest").write_text("checkpoint-000002\n")
    assert [cmp.run_status(d) for d in (finished, resumable, tmp_path / "a" / "seed9")] == ["finished", "resume", "new"]

    spec = cmp.plan_runs(None, [cmp.Arm("a")], [0], tmp_path)[0]
    (finished / "config.yaml").write_text(config_to_yaml(load_config(None, list(spec.overrides))))
    assert cmp.execute_run(spec)["status"] == "reused"
    other = cmp.plan_runs(None, [cmp.Arm("a", ("hadw.enabled=true",))], [0], tmp_path)[0]
    failed = cmp.execute_run(other)
    assert failed["status"] == "failed" and "different configuration" in failed["error"]


# ------------------------------------------------------------------------------------------- a real tiny run
def tiny_recipe() -> list[str]:
    """conftest's tiny compare recipe, 2 steps. Imported here, not at the top: run_all's spawned workers import
    this module (for pid_worker), and `tests` is no package on their path."""
    from tests.conftest import TINY_COMPARE_RECIPE

    return [*TINY_COMPARE_RECIPE, "train.steps=2"]


@pytest.mark.slow
def test_compare_trains_reuses_and_resumes_a_tiny_run(tmp_path):
    out = tmp_path / "cmp"
    base = [
        "compare",
        "--out",
        str(out),
        "--arm",
        "hadw:hadw.enabled=true",
        "--seeds",
        "0",
        "--smooth",
        "1",
        *[x for o in tiny_recipe() for x in ("--set", o)],
    ]
    first = CliRunner().invoke(build_app(), base)
    assert first.exit_code == 0, first.output
    assert "1 trained" in first.output and (out / "compare.md").is_file()
    again = CliRunner().invoke(build_app(), base)
    assert again.exit_code == 0 and "1 reused" in again.output, again.output

    # Interrupt "hadw" after step 1: drop step 2's checkpoint, the final model and the records after step 1.
    run_dir = out / "hadw" / "seed0"
    import shutil

    shutil.rmtree(run_dir / "final_model")
    shutil.rmtree(run_dir / "checkpoint-000002")
    (run_dir / "latest").write_text("checkpoint-000001\n")
    kept = [line for line in (run_dir / "metrics.jsonl").read_text().splitlines() if json.loads(line)["step"] <= 1]
    (run_dir / "metrics.jsonl").write_text("\n".join(kept) + "\n")
    (spec,) = cmp.plan_runs(None, [cmp.Arm("hadw", ("hadw.enabled=true",))], [0], out, tiny_recipe())
    assert cmp.run_status(run_dir) == "resume"
    assert cmp.execute_run(spec)["status"] == "resumed"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and (run_dir / "final_eval.json").is_file()
    assert cmp.run_status(run_dir) == "finished"


def pid_worker(spec: cmp.RunSpec) -> dict:
    """A stand-in for execute_run (module level, so a spawned process can unpickle it)."""
    import os
    import time

    time.sleep(0.3)  # long enough that both processes get work
    return {
        "arm": spec.arm,
        "seed": spec.seed,
        "status": "trained",
        "pid": os.getpid(),
        "threads": os.environ.get("OMP_NUM_THREADS"),
    }


def test_run_all_in_two_processes(tmp_path):
    specs = cmp.plan_runs(None, [cmp.Arm("a"), cmp.Arm("b")], [0, 1], tmp_path)
    done = []
    results = cmp.run_all(specs, jobs=2, on_done=done.append, worker=pid_worker)
    assert sorted((r["arm"], r["seed"]) for r in results) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert len(done) == 4 and all(r["threads"] == "1" for r in results)
    assert os.getpid() not in {r["pid"] for r in results}  # ran in worker processes
    with pytest.raises(ValueError, match="--jobs must be >= 1"):
        cmp.run_all(specs, jobs=0)


def test_power_of_the_paired_t_test():
    """Hand-checkable anchors: the tiny model's paired SD of 1.3 points detects ≈ 0.86 points with 20 seeds
    (normal approximation 2.80·1.3/√20 = 0.81, the t test a bit more) and needs ≈ 150 seeds for 0.3 points; power
    is α at effect 0 and rises with n; seeds_needed inverts minimal_detectable_effect."""
    from hadw.experiments.stats import minimal_detectable_effect, paired_power, seeds_needed

    assert paired_power(0.0, 1.0, 10) == pytest.approx(0.05, abs=1e-9)
    assert paired_power(0.5, 1.0, 40) > paired_power(0.5, 1.0, 20) > paired_power(0.5, 1.0, 10)
    mde = minimal_detectable_effect(20, 0.013)
    assert 0.0082 < mde < 0.0090 and paired_power(mde, 0.013, 20) == pytest.approx(0.8, abs=1e-6)
    assert 140 <= seeds_needed(0.003, 0.013) <= 155
    n = seeds_needed(mde, 0.013)
    assert n == 20 or (n == 21 and paired_power(mde, 0.013, 20) < 0.8)
    assert seeds_needed(0.0, 0.013) == float("inf") and minimal_detectable_effect(1, 0.013) == float("inf")


def test_a_signal_stops_a_sweep_of_jobs_1_after_saving(tmp_path):
    """Issue 31: SIGTERM / SIGINT to `hadw compare --jobs 1` was caught as one run's failure and the sweep went on
    with the next run. Now the run saves its finished steps, the sweep stops, and the exit code is the signal's."""
    import signal
    import subprocess
    import sys
    import time

    from hadw.train.checkpoint import latest_checkpoint
    from tests.conftest import TINY_COMPARE_RECIPE

    repo = Path(__file__).resolve().parents[1]
    sets = [x for o in [*TINY_COMPARE_RECIPE, "train.steps=100000"] for x in ("--set", o)]
    procs = {}
    for signum in (signal.SIGTERM, signal.SIGINT):  # both at once: the start-up (imports) dominates
        out = tmp_path / signum.name
        command = ["compare", "--out", str(out), "-a", "first:", "-a", "second:", "--seeds", "0", "--jobs", "1"]
        procs[signum] = (out, subprocess.Popen(
            [sys.executable, "-m", "hadw.cli", *command, *sets],
            env=os.environ | {"PYTHONPATH": str(repo / "src")}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True,
        ))  # fmt: skip
    try:
        for signum, (out, proc) in procs.items():
            metrics, deadline = out / "first" / "seed0" / "metrics.jsonl", time.monotonic() + 180
            while not (metrics.is_file() and metrics.stat().st_size > 0):
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.05)
            proc.send_signal(signum)
        for signum, (out, proc) in procs.items():
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 128 + signum, err
            last = err.strip().splitlines()[-1]
            assert last.startswith(f"{signum.name}: the sweep stopped at run 1 of 2 (first seed 0"), err
            assert "run the same hadw compare command again" in last and "Traceback" not in err
            assert latest_checkpoint(out / "first" / "seed0") is not None  # the finished steps were saved
            assert not (out / "second").exists()  # the sweep did not go on with the next run
    finally:  # never leave a sweep running (the old code went on with the next run)
        for _, proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_signal_inside_a_library_that_wraps_exceptions_still_stops_the_sweep():
    """SIGTERM to `hadw compare --jobs 1` while a trainer wrote its config (inside omegaconf, which re-raises what it
    catches as its own error) ended the sweep with exit 1 and the run counted as failed, not stopped: the between-runs
    stop was an Exception, and a library's `except Exception` took it. Found by the suite under load."""
    import signal
    from types import SimpleNamespace

    from hadw.errors import SignalStop
    from hadw.experiments.local_runs import run_specs

    started = []

    def worker(spec):
        started.append(spec.seed)
        try:  # a library that wraps every error it meets, as omegaconf does
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here
            raise AssertionError("the signal did not interrupt the worker")
        except Exception as err:
            raise RuntimeError("wrapped by the library") from err

    specs = [SimpleNamespace(arm="a", seed=seed) for seed in (0, 1)]
    with pytest.raises(SignalStop) as stop:
        run_specs(specs, 1, None, worker)
    assert stop.value.exit_code == 128 + signal.SIGTERM and started == [0]
    assert str(stop.value).startswith("SIGTERM: the sweep stopped at run 1 of 2 (a seed 0: stopped between runs)")


def _processes_with(marker: str) -> list[int]:
    """Pids of the live processes whose environment holds `marker` (a command's workers, reparented or not)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "environ").read_bytes():
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile, or not ours to read
            pass
    return pids


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc to find the workers")
def test_a_signal_to_compare_jobs_2_stops_its_workers_and_starts_no_queued_run(tmp_path):
    """SIGTERM to `hadw compare --jobs 2` (kill PID, as a scheduler or a user does): the parent died at once, its
    workers saved their runs (die_with_parent) and then went on, parentless, with the runs queued behind them,
    holding the cores and racing a re-run for those run folders. Now the runs save, no queued run starts, every
    worker ends, and the command exits 143 with the one line that says how to go on."""
    import signal
    import subprocess
    import sys
    import time
    import uuid

    from hadw.train.checkpoint import latest_checkpoint
    from tests.conftest import TINY_COMPARE_RECIPE

    repo = Path(__file__).resolve().parents[1]
    marker = f"HADW_TEST_SWEEP={uuid.uuid4().hex}"
    sets = [x for o in [*TINY_COMPARE_RECIPE, "train.steps=100000"] for x in ("--set", o)]
    out = tmp_path / "sweep"
    command = ["compare", "--out", str(out), "-a", "a:", "-a", "b:", "--seeds", "0-1", "--jobs", "2", *sets]
    env = os.environ | {"PYTHONPATH": str(repo / "src"), marker.split("=")[0]: marker.split("=")[1]}
    with open(tmp_path / "stderr", "w") as stderr:  # a file: a pipe nobody reads could block the stop line
        proc = subprocess.Popen([sys.executable, "-m", "hadw.cli", *command], env=env, stdout=subprocess.DEVNULL,
                                stderr=stderr)  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        first = [out / arm / "seed0" / "metrics.jsonl" for arm in "ab"]
        while not all(m.is_file() and m.stat().st_size > 0 for m in first):
            assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "stderr").read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        err = (tmp_path / "stderr").read_text()
        assert proc.returncode == 128 + signal.SIGTERM, err
        last = err.strip().splitlines()[-1]
        assert last.startswith("SIGTERM: the sweep stopped at run ") and "run the same hadw compare" in last, err
        assert all(latest_checkpoint(m.parent) is not None for m in first)  # both running runs saved their steps
        time.sleep(2)  # a worker that went on would be loading the next run's model by now
        assert _processes_with(marker) == [], err  # no worker outlived the command
        assert not (out / "a" / "seed1").exists() and not (out / "b" / "seed1").exists()  # nothing queued started
    finally:
        for pid in [proc.pid, *_processes_with(marker)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_run_another_process_trains_is_never_truncated(tmp_path):
    """Issue 31, item 4: a second `hadw compare` on the same --out saw a run as new (no checkpoint yet) while the
    first one's trainer held it, and unlinked its metrics.jsonl / samples.jsonl under it."""
    from hadw.train.run_dir import RunLock

    (spec,) = cmp.plan_runs(None, [cmp.Arm("a")], [0], tmp_path)
    spec.run_dir.mkdir(parents=True)
    (spec.run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    (spec.run_dir / "samples.jsonl").write_text('{"step": 1}\n')
    lock = RunLock(spec.run_dir)  # the first process's trainer
    try:
        result = cmp.execute_run(spec)
    finally:
        lock.release()
    assert result["status"] == "failed" and "in use by pid" in result["error"]
    assert (spec.run_dir / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert (spec.run_dir / "samples.jsonl").read_text() == '{"step": 1}\n'


def test_plot_of_a_run_without_anchor_metrics_draws_its_accuracy(tmp_path):
    # A run whose metrics.jsonl has no hadw/anchor (HA-DW never ran in it) made `hadw plot` end in a KeyError.
    from typer.testing import CliRunner

    from hadw.cli import build_app

    run = tmp_path / "plain_grpo"
    run.mkdir()
    rows = [{"step": s, "critic/score/mean": 0.1 * s} for s in (1, 2, 3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "curves.png"
    result = CliRunner().invoke(build_app(), ["plot", str(run), "--out", str(out)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert out.stat().st_size > 1000


def test_disk_warning_counts_a_finished_run_s_files_not_its_links(tmp_path):
    run = tmp_path / "grpo" / "seed0"
    (run / "checkpoint-000002").mkdir(parents=True)
    (run / "checkpoint-000002" / "model.safetensors").write_bytes(b"\0" * 3_000_000)
    (run / "final_eval.json").write_bytes(b"\0" * 1_000_000)
    big = tmp_path / "elsewhere.bin"
    big.write_bytes(b"\0" * 50_000_000)
    (run / "link").symlink_to(big)  # a link in a run folder is not what the run left
    assert cmp.folder_bytes(run) == 4_000_000 + len(str(big))
    assert cmp.disk_warning(run, runs_left=10, free=41_000_000) is None  # 10 × 4 MB fit
    line = cmp.disk_warning(run, runs_left=10, free=39_000_000)
    assert line.startswith(f"disk: {run} left 4.0 MB; the 10 runs still to train need about 40.0 MB, 39.0 MB free")
    assert "checkpoint.keep_last=1" in line and "\n" not in line
    assert cmp.disk_warning(run, runs_left=0, free=0) is None  # nothing left to train


def test_compare_says_once_when_the_runs_still_to_train_will_not_fit_on_disk(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 10**12 - 1000, 1000))  # 1 kB free
    out = tmp_path / "cmp"
    args = ["compare", "--out", str(out), "--arm", "grpo:", "--arm", "hadw:hadw.enabled=true", "--seeds", "0"]
    result = CliRunner().invoke(
        build_app(), [*args, "--smooth", "1", *[x for o in tiny_recipe() for x in ("--set", o)]]
    )
    assert result.exit_code == 0, result.output
    warnings = [ln for ln in result.output.splitlines() if ln.startswith("disk: ")]
    assert len(warnings) == 1 and "the 1 runs still to train" in warnings[0], result.output
    assert str(out / "grpo" / "seed0") in warnings[0]


def test_a_metric_the_final_evaluation_never_computes_is_refused_before_any_run():
    """Issue 49, finding 7: `--metric avg@4` without data.eval_samples trained every run, then compared nothing."""
    from hadw.experiments.compare import check_final_metrics
    from hadw.train.config import load_config

    four = load_config(None, ["data.eval_samples=4"])
    check_final_metrics(four, ["greedy", "avg@4", "pass@4"], "g")  # what it computes: accepted
    for metric in ("avg@8", "pass@2"):
        with pytest.raises(ValueError, match=rf"--metric {metric} .*data.eval_samples=4.*allowed: --metric greedy / "
                                             r"avg@4 / pass@4"):  # fmt: skip
            check_final_metrics(four, [metric], "g")
    with pytest.raises(ValueError, match=r"arm 'h': --metric pass@1 .*allowed: --metric greedy / avg@1, or"):
        check_final_metrics(load_config(None, ["data.eval_samples=1"]), ["pass@1"], "h")
