"""`hadw compare --launcher ray | slurm` against real daemons: a local Ray instance (2 CPUs) and a one-node
Slurm (munged + slurmctld + slurmd, scripts/slurm_local.sh), each running the same 2 arms × 2 seeds as the
local launcher, with bit-identical metrics. The Slurm sweep has one run preempted (submitit's USR2: it
checkpoints and is requeued), one requeued by `scontrol requeue` and one killed (SIGKILL), finished by re-running
the command: faults share a sweep where they can (each sweep costs a driver, an array and requeue delays).

The daemons are started and stopped here; no process of theirs outlives the test module. Where one cannot
start (not root, packages missing) the test skips with the reason, unless CI=true as root (this project's CI)
or HADW_REQUIRE_DAEMONS=1, which turns the skip into a failure: CI must run them.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.experiments import launchers as L
from hadw.train.checkpoint import latest_checkpoint
from tests.conftest import TINY_COMPARE_RECIPE

REPO = Path(__file__).resolve().parents[1]
TINY = TINY_COMPARE_RECIPE
ARMS = ["--arm", "grpo:", "--arm", "hadw:hadw.enabled=true", "--seeds", "0-1", "--smooth", "1"]
# 8 steps with a checkpoint after each: a run trains for a few seconds, long enough to interrupt it mid-way.
RECIPE = [x for o in [*TINY, "train.steps=8"] for x in ("--set", o)]
RUNS = [(a, s) for a in ("grpo", "hadw") for s in (0, 1)]
NOT_DETERMINISTIC = ("timing_s/", "perf/")  # wall-clock and memory readings: everything else must match


# The Ray and Slurm daemons and the sweeps they run share this module's fixtures: under pytest-xdist one worker
# runs them all, one after another (scripts/test.sh), while the other worker runs the rest of the suite.
pytestmark = pytest.mark.xdist_group("daemons")


def flat(output: str) -> str:
    """CLI output without rich's box drawing and line wrapping."""
    return " ".join(output.replace("│", " ").split())


def unavailable(reason: str) -> None:
    # This project's CI runs as root with CI=true and can install both: there a skip would hide a broken launcher.
    required = os.environ.get("CI") == "true" and os.geteuid() == 0
    if required or os.environ.get("HADW_REQUIRE_DAEMONS") == "1":
        pytest.fail(f"the launcher tests must run here (CI as root, or HADW_REQUIRE_DAEMONS=1), but {reason}")
    pytest.skip(reason)


def run_metrics(run_dir: Path) -> tuple[list[dict], str]:
    """metrics.jsonl without timings, and final_eval.json as text."""
    steps = [
        {k: v for k, v in json.loads(line).items() if not k.startswith(NOT_DETERMINISTIC)}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    return steps, (run_dir / "final_eval.json").read_text()


def assert_same_runs(out: Path, reference: Path, arms: tuple[str, ...] = ("grpo", "hadw")) -> None:
    for arm, seed in [r for r in RUNS if r[0] in arms]:
        got, want = run_metrics(out / arm / f"seed{seed}"), run_metrics(reference / arm / f"seed{seed}")
        assert [r["step"] for r in got[0]] == list(range(1, 9)), (arm, seed)
        assert got == want, f"{arm} seed {seed} differs from the local launcher's run"


def own_processes() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory) -> Path:
    """The reference: the same sweep with the default (local, in-process) launcher."""
    out = tmp_path_factory.mktemp("local") / "cmp"
    result = CliRunner().invoke(build_app(), ["compare", "--out", str(out), *ARMS, *RECIPE])
    assert result.exit_code == 0, result.output
    return out


def test_this_module_shares_one_pytest_xdist_worker(request):
    """Under scripts/test.sh (-n 2 --dist loadgroup) every test here runs on one worker, so one Ray cluster and one
    Slurm cluster exist at a time while the other worker runs the rest. xdist marks the group in the test's node
    id; with pytest 9.2 and pytest-xdist 3.8 that mark silently did not take (pytest-xdist issue 1386): each
    worker started its own Ray and Slurm daemons and the sweeps ran at once (the test extra pins pytest < 9.2)."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not under pytest-xdist --dist loadgroup (scripts/test.sh runs it so)")
    assert request.node.nodeid.endswith("@daemons"), request.node.nodeid


# ------------------------------------------------------------------------------------------- no daemon
def test_progress_line_counts_settled_and_submitted_runs():
    lines = []
    progress = L.SweepProgress(6, lines.append, done=1, failed=1)
    progress.update(0, 0, 0)
    progress.update(0, 0, 0)  # unchanged: not printed again
    progress.update(2, 1, 1)
    progress.update(1, 1, 1, requeued=1)  # a queued run that already ran once: shown as requeued
    assert lines == [
        "runs: 1 done, 0 running, 1 failed, 4 queued",
        "runs: 3 done, 1 running, 2 failed, 0 queued",
        "runs: 2 done, 1 running, 2 failed, 1 queued (1 requeued)",
    ]


def test_sbatch_options_parse_and_bad_ones_are_one_line_errors(tmp_path):
    assert L.SlurmOptions(sbatch=("qos=high", "--mem=16G", "constraint=a100&ib")).extra == {
        "qos": "high",
        "mem": "16G",
        "constraint": "a100&ib",
    }
    base = ["compare", "--out", str(tmp_path), "--arm", "a:", "--seeds", "0"]
    for extra, message in (
        (["--launcher", "kubernetes"], "'kubernetes'; allowed: local, ray, slurm"),
        (["--launcher", "slurm", "--sbatch", "qos"], "--sbatch 'qos': expected KEY=VALUE"),
        (["--launcher", "slurm", "--cpus-per-run", "0.5"], "slurm takes whole CPUs and GPUs per run"),
        (["--launcher", "ray", "--poll", "0"], "must be > 0"),
    ):
        result = CliRunner().invoke(build_app(), base + extra)
        assert result.exit_code == 2, result.output
        assert message in flat(result.output) and "Traceback" not in result.output
    assert not (tmp_path / "a").exists()  # nothing ran
    # What a user sees: one line naming the option, the value and what is allowed; exit 2.
    cli = subprocess.run(
        [sys.executable, "-m", "hadw.cli", *base, "--launcher", "slurm", "--sbatch", "qos"],
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 2 and cli.stderr.strip().count("\n") == 0, cli.stderr
    assert "--sbatch 'qos': expected KEY=VALUE, e.g. qos=high or mem=16G" in cli.stderr


# ------------------------------------------------------------------------------------------- Ray
@pytest.mark.slow
def test_ray_launcher_matches_local_bit_for_bit(tmp_path, local_sweep):
    before = own_processes()  # (the Ray head is not among them: ray_local.sh detaches it with setsid)
    out = tmp_path / "cmp"
    started = time.perf_counter()
    # --ray-address local (the default) --jobs 2: the sweep starts its own 2-CPU Ray instance, stops it at the end.
    # The grpo arm here; the hadw arm runs on a running head (test_ray_a_killed_worker_...).
    grpo = ["--arm", "grpo:", "--seeds", "0-1", "--smooth", "1", *RECIPE]
    result = CliRunner().invoke(
        build_app(), ["compare", "--out", str(out), "--launcher", "ray", "--jobs", "2", "--poll", "0.5", *grpo]
    )
    print(f"ray 1x2 sweep (starting and stopping its Ray instance): {time.perf_counter() - started:.1f} s")
    assert result.exit_code == 0, result.output
    assert "runs: 2 trained, 0 resumed, 0 reused, 0 failed" in result.output
    assert "runs: 0 done, 0 running, 0 failed, 2 queued" in result.output
    assert "runs: 2 done, 0 running, 0 failed, 0 queued" in result.output
    assert_same_runs(out, local_sweep, arms=("grpo",))
    assert "start (ray, resources {'CPU': 1.0})" in (out / "grpo" / "seed0" / L.LAUNCHER_LOG).read_text()
    deadline = time.time() + 30
    while own_processes() - before and time.time() < deadline:  # Ray's processes exit shortly after shutdown
        time.sleep(0.2)
    assert not own_processes() - before, "the sweep's Ray instance left processes behind"

    # A cluster that is not there: one line naming the address, exit 2.
    gone = CliRunner().invoke(
        build_app(),
        ["compare", "--out", str(tmp_path / "x"), "--launcher", "ray", "--ray-address", "127.0.0.1:9", *ARMS],
    )
    assert gone.exit_code == 2 and "--ray-address 127.0.0.1:9: cannot connect" in flat(gone.output), gone.output


# ------------------------------------------------------------------------------------------- Slurm
@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node Slurm for this module: started by scripts/slurm_local.sh, always stopped."""
    if os.geteuid() != 0:
        unavailable("the one-node Slurm runs its daemons as root (SlurmUser=root); not root here")
    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch") if shutil.which(b) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not found: apt-get install slurm-wlm munge (scripts/setup_slurm.sh)")
    pytest.importorskip("submitit", reason="submitit is not installed (pip install 'hadw[cluster]')")
    folder = tmp_path_factory.mktemp("slurm")
    script = REPO / "scripts" / "slurm_local.sh"
    started = time.perf_counter()
    up = subprocess.run(["bash", str(script), "start", str(folder)], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    try:
        if up.returncode != 0:
            unavailable(f"the one-node Slurm did not start: {up.stderr.strip()}")
        print(f"slurm start-up: {seconds:.1f} s")
        previous = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(folder / "slurm.conf")
        yield folder
    finally:
        subprocess.run(["bash", str(script), "stop", str(folder)], capture_output=True, text=True, check=False)
        if "previous" in locals():
            if previous is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = previous
    for name in ("munged", "slurmctld", "slurmd"):
        assert not (folder / f"{name}.pid").exists(), f"{name} was not stopped"


@pytest.fixture
def slurm_node(slurm):
    """The module's Slurm, its queue emptied after the test: a test that fails mid-sweep leaves its array queued or
    running, and its runs would take the node's CPUs (and the timing) of the tests after it (seen in a CI run)."""
    yield slurm
    subprocess.run(["scancel", "--full", "--quiet", "--user=root"], check=False, capture_output=True)
    deadline = time.time() + 60
    while subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.strip():
        assert time.time() < deadline, "the test's jobs were still in squeue 60 s after scancel"
        time.sleep(0.2)


def run_pid(out: Path, arm: str, seed: int) -> int:
    """The pid of a run's current attempt, from its launcher.log ("... pid 123: start (slurm job 3_1, ...)")."""
    log = (out / arm / f"seed{seed}" / L.LAUNCHER_LOG).read_text()
    starts = [line for line in log.splitlines() if ": start (" in line]
    return int(starts[-1].split(" pid ")[1].split(":")[0])


@contextlib.contextmanager
def running_sweep(command: list[str], cwd: Path, stdout: int = subprocess.PIPE):
    """`hadw compare` as its own process (a driver the test can signal), its stdout and stderr merged; killed on
    the way out if the test left it running."""
    argv = [sys.executable, "-m", "hadw.cli", *command]
    cli = subprocess.Popen(argv, cwd=cwd, stdout=stdout, stderr=subprocess.STDOUT, text=True)
    try:
        yield cli
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


def wait_for_checkpoint(run_dir: Path, cli: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not (run_dir / "latest").is_file():
        assert cli.poll() is None, "the sweep ended before the run wrote a checkpoint"
        assert time.time() < deadline, f"no checkpoint in {run_dir} after {timeout} s"
        time.sleep(0.02)
    assert not (run_dir / "final_model").exists(), "the run finished before it could be interrupted"


def wait_for_array(out: Path, cli: subprocess.Popen, timeout: float = 120) -> None:
    """Until the sweep has written its array's task table (.slurm/<array id>/tasks.tsv)."""
    deadline = time.time() + timeout
    while not list(out.glob(f".slurm/[0-9]*/{L.TASKS_FILE}")):
        assert cli.poll() is None, "the sweep ended before it submitted its array"
        assert time.time() < deadline, f"no job array under {out / '.slurm'} after {timeout} s"
        time.sleep(0.05)


def array_task(out: Path, arm: str, seed: int) -> str:
    """The Slurm id (ARRAY_TASK) of a run, from the sweep's tasks.tsv (task, arm, seed, run_dir)."""
    (array,) = [d.name for d in (out / ".slurm").iterdir() if d.name.isdigit()]
    rows = [line.split("\t") for line in (out / ".slurm" / array / L.TASKS_FILE).read_text().splitlines()[1:]]
    (task,) = [row[0] for row in rows if row[1:3] == [arm, str(seed)]]
    return f"{array}_{task}"


@pytest.mark.slow
def test_slurm_preempted_requeued_and_killed_runs_finish_bit_for_bit(tmp_path, slurm_node, local_sweep):
    """One 2 x 2 sweep, three faults (one sweep for all: each costs a driver, an array and a requeue delay):
    grpo seed 0 preempted (USR2), grpo seed 1 requeued by `scontrol requeue`, hadw seed 1 killed (SIGKILL).
    The first two finish inside the sweep, the killed one on the re-run; all bit-identical to local."""
    out = tmp_path / "cmp"
    command = ["compare", "--out", str(out), "--launcher", "slurm", "--poll", "0.5", "--time-min", "10"]
    command += ARMS + RECIPE
    started = time.perf_counter()
    with running_sweep(command, tmp_path) as cli:
        # hadw seed 1 (the last task) is held back until the test is ready to kill it: the order in which Slurm
        # starts the other tasks (requeued ones included) then cannot let it run to its end unwatched (seen in a
        # CI run: "the run finished before it could be interrupted"). Held at once: two of the node's two CPUs are
        # taken by tasks 0 and 1 for seconds.
        wait_for_array(out, cli)
        subprocess.run(["scontrol", "hold", array_task(out, "hadw", 1)], check=True, capture_output=True)
        # Preempt grpo seed 0 with the signal Slurm sends a submitit job before its time limit or on
        # preemption (USR2, sbatch --signal): the run stops after the current step, saves a checkpoint, is
        # requeued by submitit and resumes from that checkpoint, all inside this one sweep.
        wait_for_checkpoint(out / "grpo" / "seed0", cli)
        # At once: a run of 8 tiny steps can finish within the second the check below takes, and then there is
        # nothing left to preempt (seen once in a fresh-clone CI run: "3 trained, 0 resumed").
        os.kill(run_pid(out, "grpo", 0), signal.SIGUSR2)
        # `scontrol requeue` of grpo seed 1 (running beside seed 0 on the node's 2 CPUs) once it has a checkpoint:
        # the result of its interrupted attempt is not final (Slurm runs the task again); the sweep shows it
        # requeued and waits for it, instead of reporting it failed.
        wait_for_checkpoint(out / "grpo" / "seed1", cli)
        subprocess.run(["scontrol", "requeue", array_task(out, "grpo", 1)], check=True, capture_output=True)
        # Kill hadw seed 1 outright, as the OOM killer or a node crash would: no result, no last checkpoint;
        # the re-run resumes it from its last periodic one.
        subprocess.run(["scontrol", "release", array_task(out, "hadw", 1)], check=True, capture_output=True)
        wait_for_checkpoint(out / "hadw" / "seed1", cli)
        os.kill(run_pid(out, "hadw", 1), signal.SIGKILL)
        # The same sweep started again while its driver waits is refused (the sweep folder's lock, issue 31):
        # runs would start twice.
        twice = CliRunner().invoke(build_app(), command)
        assert twice.exit_code == 2, twice.output
        assert "is in use by pid" in flat(twice.output) and "another hadw compare holds" in flat(twice.output)
        output, _ = cli.communicate(timeout=400)
    first = time.perf_counter() - started
    assert cli.returncode == 1, output
    assert "runs: 1 trained, 2 resumed, 0 reused, 1 failed" in output, output
    assert re.search(r"queued \([12] requeued\)", output), output  # the requeued (and the preempted) run, waited for
    assert "run hadw seed 1 failed: slurm job" in output and "Re-run the same command to resume it" in output
    log = (out / "grpo" / "seed0" / L.LAUNCHER_LOG).read_text()
    assert "preempted (SIGUSR2): requeued" in log and log.count(": start (slurm job") == 2, log
    assert log.rstrip().endswith(")") and "resumed (slurm job" in log.splitlines()[-1]
    log = (out / "grpo" / "seed1" / L.LAUNCHER_LOG).read_text()
    assert log.count(": start (slurm job") == 2 and "resumed (slurm job" in log.splitlines()[-1], log
    assert not (out / "hadw" / "seed1" / "final_model").exists()

    started = time.perf_counter()
    again = subprocess.run(
        [sys.executable, "-m", "hadw.cli", *command], cwd=tmp_path, capture_output=True, text=True, timeout=400
    )
    print(
        f"slurm 2x2 sweep: {first:.1f} s with a preemption, a requeue and a kill; re-run "
        f"{time.perf_counter() - started:.1f} s"
    )
    assert again.returncode == 0, again.stderr
    assert "runs: 0 trained, 1 resumed, 3 reused, 0 failed" in again.stderr, again.stderr
    assert_same_runs(out, local_sweep)
    killed = (out / "hadw" / "seed1" / L.LAUNCHER_LOG).read_text().splitlines()
    assert killed[-1].split(": ")[1].startswith("resumed (slurm job") and len(killed) == 3  # start, start, resumed
    assert list((out / ".slurm").iterdir()), "submitit's per-job logs are kept under --out/.slurm"

    # --collect-only names what is missing: drop one run's final model.
    shutil.rmtree(out / "grpo" / "seed1" / "final_model")
    collected = CliRunner().invoke(build_app(), ["compare", "--out", str(out), "--collect-only", "--smooth", "1"])
    assert collected.exit_code == 0, collected.output
    assert "missing (not finished, left out): grpo seed 1" in collected.output


def test_slurm_daemons_were_started_by_this_module_only(slurm_node):
    """The daemons' pids come from their pid files under the test's folder, and are alive while it runs."""
    for name in ("munged", "slurmctld", "slurmd"):
        pid = int((slurm_node / f"{name}.pid").read_text())
        assert psutil.pid_exists(pid) and name in psutil.Process(pid).name()
    sinfo = subprocess.run(["sinfo", "-h", "-o", "%P %t"], capture_output=True, text=True, check=True)
    # (comp: a node still completing an earlier test's job is as alive)
    assert sinfo.stdout.split() in (["debug*", s] for s in ("idle", "mix", "alloc", "comp")), sinfo.stdout


# ------------------------------------------------------------------------------------------- issue 32: options
def test_scheduler_flags_are_refused_in_one_line(tmp_path):
    """A time limit inside the signal lead, --jobs where a scheduler places the runs, a zero throttle: exit 2."""
    base = ["compare", "--out", str(tmp_path), "--arm", "a:", "--seeds", "0"]
    for extra, message in (
        (["--launcher", "slurm", "--time-min", "1"], "--time-min 1 (60 s) must be longer than --signal-lead-s 90"),
        (["--launcher", "slurm", "--time-min", "2", "--signal-lead-s", "150"], "must be longer than --signal-lead-s"),
        (["--launcher", "slurm", "--signal-lead-s", "0"], "--signal-lead-s 0: must be >= 1"),
        (["--launcher", "slurm", "--jobs", "4"], "--jobs 4 with --launcher slurm: the scheduler places the runs"),
        (["--launcher", "ray", "--ray-address", "auto", "-j", "2"], "--jobs 2 with --launcher ray --ray-address auto"),
        (["--launcher", "slurm", "--max-parallel", "0"], "--max-parallel"),
        (["--setup", "module load x"], "--setup is for --launcher slurm (the batch script of each job); with local"),
        (["--launcher", "ray", "--setup", "x"], "on Ray use the nodes' image or --ray-runtime-env"),
        (["--launcher", "ray", "--max-requeues", "2"], "--max-requeues is for --launcher slurm"),
        (["--launcher", "slurm", "--max-requeues", "-1"], "--max-requeues"),
        (["--launcher", "slurm", "--setup", "a\nb"], "one non-empty shell line per --setup"),
        (["--launcher", "slurm", "--ray-runtime-env", "{}"], "--ray-runtime-env is for --launcher ray"),
        (["--launcher", "ray", "--ray-runtime-env", "[1]"], "a JSON object is needed"),
        (["--launcher", "ray", "--ray-runtime-env", "{nope"], "not JSON"),
        (["--launcher", "ray", "--ray-runtime-env", "/nonexistent/env.json"], "/nonexistent/env.json: cannot read it"),
    ):
        result = CliRunner().invoke(build_app(), base + extra)
        assert result.exit_code == 2, (extra, result.output)
        assert message in flat(result.output) and "Traceback" not in result.output, (extra, result.output)
    assert not tmp_path.joinpath("a").exists() and not list(tmp_path.iterdir())  # nothing ran, nothing written
    cli = subprocess.run(
        [sys.executable, "-m", "hadw.cli", *base, "--launcher", "slurm", "--time-min", "1"],
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 2 and cli.stderr.strip().count("\n") == 0, cli.stderr


def test_dry_run_prints_the_batch_script_the_ray_spec_and_the_task_table(tmp_path):
    pytest.importorskip("submitit", reason="submitit is not installed (pip install 'hadw[cluster]')")
    out = tmp_path / "cmp"
    base = ["compare", "--out", str(out), "--arm", "a:", "--arm", "b:hadw.enabled=true", "--seeds", "0-2", "--dry-run"]
    slurm = CliRunner().invoke(
        build_app(),
        [
            *base,
            *("--launcher", "slurm", "--max-parallel", "3", "--partition", "debug", "--account", "lab"),
            *("--time-min", "7", "--cpus-per-run", "2", "--gpus-per-run", "1", "--sbatch", "mem=100M"),
            *("--signal-lead-s", "30", "--max-requeues", "5"),
            *("--setup", "module load cuda/12.4", "--setup", "export HF_HOME=/shared/hf"),
        ],
    )
    assert slurm.exit_code == 0, slurm.output
    for line in (
        "#SBATCH --array=0-5%3",
        "#SBATCH --partition=debug",
        "#SBATCH --account=lab",
        "#SBATCH --time=7",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --mem=100M",
        "#SBATCH --signal=USR2@30",
        "-m submitit.core._submit",
        "# requeues after a time-out, per run: at most 5",
    ):
        assert line in slurm.output, (line, slurm.output)
    # --setup: in the batch script, in order, before the run starts
    script = slurm.output
    assert script.index("module load cuda/12.4") < script.index("export HF_HOME=/shared/hf") < script.index("srun")
    table = slurm.output.split("task\tarm\tseed\trun_dir\n")[1].splitlines()
    assert [row.split("\t")[:3] for row in table] == [
        [str(i), arm, str(seed)] for i, (arm, seed) in enumerate((a, s) for s in range(3) for a in "ab")
    ]
    ray = CliRunner().invoke(
        build_app(),
        [
            *(*base, "--launcher", "ray", "--max-parallel", "2", "--cpus-per-run", "2", "--gpus-per-run", "0.5"),
            *("--ray-runtime-env", '{"env_vars": {"HF_HOME": "/shared/hf"}}'),
        ],
    )
    assert ray.exit_code == 0, ray.output
    assert "runtime_env: {'env_vars': ['HF_HOME']}" in ray.output and "/shared/hf" not in ray.output  # names only
    assert "task_options: {'num_cpus': 2.0, 'num_gpus': 0.5}" in ray.output and "max_parallel: 2" in ray.output
    assert "threads_per_run: 2" in ray.output and "5\tb\t2\t" in ray.output
    local = CliRunner().invoke(build_app(), [*base, "--jobs", "4", "--max-parallel", "2"])  # caps --jobs
    assert local.exit_code == 0 and "# local: 6 runs, 2 at a time" in local.output, local.output
    # a short limit with a shorter lead is allowed (it was refused against the default lead of 90 s)
    short = CliRunner().invoke(build_app(), [*base, "--launcher", "slurm", "--time-min", "1", "--signal-lead-s", "50"])
    assert short.exit_code == 0 and "#SBATCH --signal=USR2@50" in short.output, short.output
    assert not out.exists(), "a dry run writes nothing"


def test_a_dry_run_prints_the_names_of_env_vars_never_their_values(tmp_path):
    """Issue 39, finding 4: `--dry-run --ray-runtime-env` printed env_vars' values (an HF_TOKEN); the real sweep
    logs their names only."""
    env = {"env_vars": {"HF_TOKEN": "hf_secret_0123", "WANDB_API_KEY": "wandb_secret_4567"}, "working_dir": "."}
    args = ["compare", "--out", str(tmp_path / "cmp"), "--arm", "a:", "--seeds", "0", "--dry-run", "--launcher", "ray"]
    ray = CliRunner().invoke(build_app(), [*args, "--ray-runtime-env", json.dumps(env)])
    assert ray.exit_code == 0, ray.output
    assert "secret" not in ray.output and "HF_TOKEN" in ray.output and "WANDB_API_KEY" in ray.output
    assert "'working_dir': '.'" in ray.output  # the rest of runtime_env is shown as given


def run_log(run_dir: Path) -> list[tuple[float, str]]:
    """launcher.log as (epoch seconds, what) rows."""
    rows = []
    for line in (run_dir / L.LAUNCHER_LOG).read_text().splitlines():
        stamp, rest = line.split(" ", 1)
        seconds = time.mktime(time.strptime(stamp.split(".")[0], "%Y-%m-%dT%H:%M:%S")) + int(stamp[-3:]) / 1000
        rows.append((seconds, rest.split(": ", 1)[1]))
    return rows


def scontrol_job(job_id: str) -> dict[str, str]:
    """`scontrol show job -o ID` (the array's first record) as KEY -> VALUE."""
    text = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True)
    fields = {}
    for item in text.stdout.splitlines()[0].split():
        key, _, value = item.partition("=")
        fields.setdefault(key, value)
    return fields


@pytest.mark.slow
def test_slurm_options_and_throttle_reach_the_job(tmp_path, slurm_node):
    """Every scheduler flag, read back from `scontrol show job` of the submitted (held back) array."""
    out = tmp_path / "cmp"
    command = ["compare", "--out", str(out), "--launcher", "slurm", "--poll", "0.5", "--max-parallel", "1"]
    command += ["--partition", "debug", "--account", "lab", "--time-min", "7", "--cpus-per-run", "2"]
    command += ["--signal-lead-s", "45", "--sbatch", "begin=now+3600", "--sbatch", "comment=hadw32"]
    command += ["--arm", "grpo:", "--seeds", "0-2", *RECIPE]
    cli = subprocess.Popen(
        [sys.executable, "-m", "hadw.cli", *command], cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    array = None
    try:
        for line in cli.stderr:
            if line.startswith("slurm: submitted job array"):
                array = line.split()[4]
                break
        assert array, "the sweep did not submit"
        job = scontrol_job(array)
        assert job["ArrayTaskThrottle"] == "1" and job["JobState"] == "PENDING", job
        assert job["ArrayTaskId"].startswith("0-2"), job
        assert (job["Partition"], job["Account"], job["TimeLimit"]) == ("debug", "lab", "00:07:00"), job
        assert job["MinCPUsNode"] == "2" and job["Comment"] == "hadw32", job
        assert job["JobName"].startswith("hadw-compare-cmp-"), job
        tasks = (out / ".slurm" / array / L.TASKS_FILE).read_text().splitlines()
        assert tasks[1:] == [f"{i}\tgrpo\t{i}\t{out / 'grpo' / f'seed{i}'}" for i in range(3)], tasks
    finally:
        if array:
            subprocess.run(["scancel", array], check=False)
        cli.kill()
        cli.wait()
    # sbatch refusing the array (an unknown partition): its one line, no "queued" progress line before it.
    refused = subprocess.run(
        [sys.executable, "-m", "hadw.cli", *command, "--partition", "nosuch"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "sbatch failed" in refused.stderr, refused.stderr
    assert refused.stderr.strip().count("\n") == 0 and "queued" not in refused.stderr, refused.stderr


def test_a_rerun_with_other_cpus_per_run_keeps_its_runs(tmp_path):
    """--cpus-per-run sets train.num_threads: a re-run with another value must still match the stored config
    (threads change the speed, not what is learned); any other difference is still refused."""
    from hadw.experiments import compare as cmp
    from hadw.train.config import config_to_yaml, load_config

    arm = cmp.parse_arm("grpo:")
    (one,) = cmp.plan_runs(None, [arm], [0], tmp_path, TINY, threads_per_run=1)
    (two,) = cmp.plan_runs(None, [arm], [0], tmp_path, TINY, threads_per_run=2)
    one.run_dir.mkdir(parents=True)
    (one.run_dir / "config.yaml").write_text(config_to_yaml(load_config(None, list(one.overrides))))
    cmp._check_same_config(two, load_config(None, list(two.overrides)))  # no error (a run of an earlier version)
    from hadw.train.resume import portable

    cfg = load_config(None, list(one.overrides))
    (one.run_dir / "config.yaml").write_text(config_to_yaml(portable(cfg, one.run_dir.absolute())))  # as runs write
    cmp._check_same_config(two, load_config(None, list(two.overrides)))  # no error
    other = load_config(None, [*two.overrides, "rollout.group_size=4"])
    with pytest.raises(ValueError, match="different configuration"):
        cmp._check_same_config(two, other)


# ------------------------------------------------------------------------------------------- issue 32: faults
def squeue_empty(array: str, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while subprocess.run(["squeue", "-h", "-j", array], capture_output=True, text=True).stdout.strip():
        assert time.time() < deadline, f"array {array} still in squeue after {timeout} s"
        time.sleep(0.5)


@pytest.mark.slow
def test_slurm_scancel_a_killed_driver_and_a_real_time_limit(tmp_path, slurm_node):
    """(1) kill -9 of the driver, then `scancel` of its running task: the array lives on without its driver, the
    cancelled run stops at a step with that step's checkpoint (the same command resumes such a stop bit for bit:
    the preempted test's re-run), and the same command is refused while the array is still queued.
    (2) A real time limit (--time-min 2: Slurm itself sends USR2 --signal-lead-s before it) with --max-requeues 0:
    the run is stopped with a checkpoint, not requeued, and failed in one line naming the requeue limit."""
    out = tmp_path / "cmp"
    command = ["compare", "--out", str(out), "--launcher", "slurm", "--poll", "0.5", "--time-min", "10"]
    command += ["--max-parallel", "1", "--arm", "grpo:", "--seeds", "0-1", "--smooth", "1", *RECIPE]
    with running_sweep(command, tmp_path, stdout=subprocess.DEVNULL) as cli:
        wait_for_checkpoint(out / "grpo" / "seed0", cli)
        (array,) = [d.name for d in (out / ".slurm").iterdir() if d.name.isdigit()]
        # seed 1 waits behind --max-parallel 1; held, it stays queued (no race with its end)
        subprocess.run(["scontrol", "hold", f"{array}_1"], check=True, capture_output=True)
        cli.kill()  # the driver (a lost login node): the array does not need it
        cli.wait()
        killed_at = time.time()
        subprocess.run(["scancel", f"{array}_0"], check=True)
        # Its driver gone, its array still queued: the same command is refused, naming the array (its runs would
        # otherwise start twice).
        twice = subprocess.run(
            [sys.executable, "-m", "hadw.cli", *command], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert twice.returncode == 2 and f"job array {array} of an earlier hadw compare" in twice.stderr, twice.stderr
        subprocess.run(["scancel", f"{array}_1"], check=True)
        squeue_empty(array)
    # scancel's SIGTERM, after the driver died: a stop at a step boundary with that step's checkpoint, not a kill
    rows = run_log(out / "grpo" / "seed0")
    assert rows[-1][1].startswith("stopped by a signal") and rows[-1][0] >= killed_at - 1, rows
    steps = [json.loads(line)["step"] for line in (out / "grpo" / "seed0" / "metrics.jsonl").read_text().splitlines()]
    assert latest_checkpoint(out / "grpo" / "seed0").name == f"checkpoint-{steps[-1]:06d}" and steps[-1] < 8
    assert not (out / "grpo" / "seed0" / "final_model").exists()

    # (2) Slurm's own time-limit signal; a run far longer than the limit allows. slurmctld may send it up to 60 s
    # before the lead it is asked for (sbatch(1): "due to the resolution of event handling"): measured here, once
    # 24.5 s after the start (limit 60 s, lead 55 s) and once 0.3 s after it (lead 45 s), before Python had
    # installed any handler, so the job died of USR2 (FAILED; CI saw it too). A 2-minute limit with lead 45 s: never
    # earlier than 15 s after the start, at the latest 75 s, and 45 s before the limit itself.
    out = tmp_path / "limit"
    long = [x for o in [*TINY, "train.steps=100000", "checkpoint.every=20"] for x in ("--set", o)]
    limited = subprocess.run(
        [
            *(sys.executable, "-m", "hadw.cli", "compare", "--out", str(out), "--launcher", "slurm", "--poll", "0.5"),
            *("--time-min", "2", "--signal-lead-s", "45", "--max-requeues", "0", "--arm", "grpo:", "--seeds", "0"),
            *long,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert limited.returncode == 1, limited.stderr
    failed = [line for line in limited.stderr.splitlines() if line.startswith("run grpo seed 0 failed:")]
    assert len(failed) == 1 and "timed-out too many times" in failed[0], limited.stderr
    assert "stopped by its time limit more than --max-requeues times" in failed[0], failed[0]
    assert "re-run the same command to resume" in failed[0] and "Traceback" not in limited.stderr
    log = (out / "grpo" / "seed0" / L.LAUNCHER_LOG).read_text().splitlines()
    assert len([x for x in log if ": start (" in x]) == 1 and "preempted (SIGUSR2): not requeued" in log[-1], log
    assert latest_checkpoint(out / "grpo" / "seed0") is not None  # the stop saved its steps


@pytest.fixture(scope="module")
def ray_two_nodes():
    """A Ray cluster of two nodes on this machine, for this module: a head with no CPUs (nothing runs there) and a
    4-CPU worker node whose view of `private/` is its own empty tmpfs (scripts/ray_local.sh worker ... PRIVATE): a
    run folder under it is storage the driver cannot see, as a node's local disk would be; anywhere else is shared.
    Yields (address, private folder); both nodes are always stopped. RAY_AUTH_MODE=disabled for the nodes and for
    this process (no token file in ~/.ray)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_AUTH_MODE", "disabled")
        yield from _two_nodes()


def _two_nodes():
    ray_bin = Path(sys.executable).parent / "ray"
    if not ray_bin.exists():
        unavailable("ray is not installed (pip install 'hadw[cluster]')")
    # Private storage needs a mount namespace (root, unshare); without one the worker shares everything and only
    # the non-shared-storage test skips.
    probe = ["unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs", "hadw-probe", "/tmp"]
    namespaces = shutil.which("unshare") is not None and subprocess.run(probe, capture_output=True).returncode == 0
    # Short: Ray's socket paths under the head's temp dir must fit AF_UNIX's 107 bytes.
    folder = Path(tempfile.mkdtemp(prefix="hadw-ray2-", dir="/tmp"))
    script, env = REPO / "scripts" / "ray_local.sh", {**os.environ, "RAY": str(ray_bin)}
    private = folder / "private"
    try:
        up = subprocess.run(["bash", script, "start", folder / "head", "0"], capture_output=True, text=True, env=env)
        if up.returncode != 0:
            unavailable(f"the Ray head did not start: {up.stderr.strip()}")
        address = (folder / "head" / "address").read_text().strip()
        worker = ["bash", script, "worker", folder / "worker", address, "4"]  # (Ray's CPUs are counts)
        worker += [private] if namespaces else []
        up = subprocess.run(worker, capture_output=True, text=True, env=env)
        if up.returncode != 0:
            unavailable(f"the Ray worker node did not start: {up.stderr.strip()}")
        yield address, private if namespaces else None
    finally:  # both nodes at once: each stop may wait 5 s for its processes
        stops = [subprocess.Popen(["bash", script, "stop", folder / node], env=env) for node in ("worker", "head")]
        for stop in stops:
            stop.wait()
    assert not (folder / "head" / "ray.pid").exists() and not (folder / "worker" / "ray.pid").exists()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_ray_runs_the_driver_cannot_see_are_named_and_the_sweep_fails(tmp_path, ray_two_nodes):
    """--out on storage only the worker node sees: every run trains there, and the driver names each one as
    missing with the shared-storage need and exits non-zero (before: "2 trained, 0 failed", a report of
    whatever happened to be visible)."""
    address, private = ray_two_nodes
    if private is None:
        pytest.skip("a worker node with private storage needs a mount namespace (root and unshare); not here")
    out = private / "cmp"
    recipe = [x for o in [*TINY, "train.steps=2"] for x in ("--set", o)]
    command = ["compare", "--out", str(out), "--launcher", "ray", "--ray-address", address, "--poll", "0.5"]
    command += ["--arm", "grpo:", "--arm", "hadw:hadw.enabled=true", "--seeds", "0", "--smooth", "1", *recipe]
    cli = subprocess.run(
        [sys.executable, "-m", "hadw.cli", *command], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert cli.returncode != 0, cli.stderr
    assert "runs: 0 trained, 0 resumed, 0 reused, 2 failed" in cli.stderr, cli.stderr
    for arm in ("grpo", "hadw"):
        line = next(x for x in cli.stderr.splitlines() if x.startswith(f"run {arm} seed 0 failed:"))
        assert "trained on its node, but its run folder is missing here" in line, line
        assert "--out must be on storage every node shares" in line, line
    assert not (out / "grpo" / "seed0").exists()  # the runs are real, but only on the worker's own storage


def trainer_pid_gone(run_dir: Path, timeout: float = 60) -> None:
    """Wait until the process of the run's last attempt has exited (it holds the run folder's lock)."""
    pid, deadline = run_pid(run_dir.parent.parent, run_dir.parent.name, int(run_dir.name[4:])), time.time() + timeout
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.time() < deadline, f"the run's process {pid} still lives {timeout} s after its driver died"
        time.sleep(0.2)


@pytest.mark.slow
def test_ray_a_killed_worker_a_closed_terminal_and_a_killed_driver(tmp_path, local_sweep, ray_two_nodes):
    """Against a running Ray head: (1) kill -9 of the worker process running a run: Ray retries the task, which
    resumes from its checkpoint; (2) SIGHUP to the driver (its terminal closed): it goes on and reports; both in
    one sweep, bit-identical to local. (3) kill -9 of the driver: its runs die with it (Ray's ownership); the same
    command again resumes them, bit-identical."""
    ray_head, _ = ray_two_nodes  # the runs go to its worker node; tmp_path is storage both nodes see
    out = tmp_path / "cmp"
    command = ["compare", "--out", str(out), "--launcher", "ray", "--ray-address", ray_head, "--poll", "0.5"]
    hadw = ["--arm", "hadw:hadw.enabled=true", "--seeds", "0-1", "--smooth", "1", *RECIPE]  # both at once
    with running_sweep([*command, *hadw], tmp_path) as cli:
        wait_for_checkpoint(out / "hadw" / "seed0", cli)
        os.kill(run_pid(out, "hadw", 0), signal.SIGKILL)  # the Ray worker itself: run_on_node runs in it
        cli.send_signal(signal.SIGHUP)
        output, _ = cli.communicate(timeout=400)
    assert cli.returncode == 0, output
    assert "runs: 1 trained, 1 resumed, 0 reused, 0 failed" in output, output
    assert_same_runs(out, local_sweep, arms=("hadw",))
    log = (out / "hadw" / "seed0" / L.LAUNCHER_LOG).read_text()
    assert log.count(": start (ray") == 2 and "resumed (ray" in log.splitlines()[-1], log

    # (3) the driver killed (kill -9): the run stops with it; the re-run resumes it.
    out = tmp_path / "killed"
    command = ["compare", "--out", str(out), "--launcher", "ray", "--ray-address", ray_head, "--poll", "0.5"]
    command += ["--arm", "grpo:", "--seeds", "0", "--smooth", "1", *RECIPE]
    with running_sweep(command, tmp_path, stdout=subprocess.DEVNULL) as cli:
        wait_for_checkpoint(out / "grpo" / "seed0", cli)
        cli.kill()
        cli.wait()
        trainer_pid_gone(out / "grpo" / "seed0")
    assert not (out / "grpo" / "seed0" / "final_model").exists()
    again = subprocess.run(
        [sys.executable, "-m", "hadw.cli", *command], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0 and "runs: 0 trained, 1 resumed, 0 reused, 0 failed" in again.stderr, again.stderr
    assert run_metrics(out / "grpo" / "seed0") == run_metrics(local_sweep / "grpo" / "seed0")


@pytest.mark.slow
def test_ray_max_parallel_caps_runs_in_flight_and_cpus_per_run_are_threads(tmp_path, ray_two_nodes):
    """2 runs on the 4-CPU worker node (room for both, 2 CPUs each) with --max-parallel 1: never 2 at once;
    each task got 2 CPUs from Ray and ran with 2 torch threads (train.num_threads=2)."""
    address, _ = ray_two_nodes
    out = tmp_path / "cmp"
    recipe = [x for o in [*TINY, "train.steps=2"] for x in ("--set", o)]
    result = CliRunner().invoke(
        build_app(),
        [
            *("compare", "--out", str(out), "--launcher", "ray", "--ray-address", address, "--cpus-per-run", "2"),
            *("--max-parallel", "1", "--poll", "0.5", "--arm", "grpo:", "--seeds", "0-1", "--smooth", "1", *recipe),
            *("--ray-runtime-env", '{"env_vars": {"HADW_TEST_MARK": "on"}}'),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "runs: 2 trained, 0 resumed, 0 reused, 0 failed" in result.output
    spans = []
    for seed in range(2):
        rows = run_log(out / "grpo" / f"seed{seed}")
        # the task got 2 CPUs from Ray, and ran in the sweep's runtime_env (its variable's name is logged)
        assert len(rows) == 2 and rows[0][1] == "start (ray, resources {'CPU': 2.0}, env_vars ['HADW_TEST_MARK'])", rows
        assert rows[1][1] == "trained (ray, 2 torch threads)", rows
        assert "num_threads: 2" in (out / "grpo" / f"seed{seed}" / "config.yaml").read_text()
        spans.append((rows[0][0], rows[1][0]))
    spans.sort()
    in_flight = max(sum(start <= t < end for start, end in spans) for t, _ in spans)
    assert in_flight == 1 and all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
