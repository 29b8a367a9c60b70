"""Where the runs of a `hadw compare` sweep execute: here, as Ray tasks, or as one Slurm job array.

    results = launch(specs, "ray", RayOptions(address="auto", gpus_per_run=1))
    results = launch(specs, "slurm", SlurmOptions(partition="gpu", time_min=240), out_dir="runs/cmp")

A launcher changes nothing but *where* a run executes. Every run is `execute_run(spec)` (hadw.experiments.
compare): its result is a function of its config and seed, so one sweep gives bit-identical metrics under
every launcher, and a re-run of the same command reuses finished runs, resumes interrupted ones from their
last checkpoint and starts failed ones again, whichever launcher ran them before. hadw schedules nothing
itself: Ray and Slurm (through submitit) place the runs; this module only submits them, waits, and prints
one progress line across runs (done / running / failed / queued) when it changes.

Every node must see --out (the run folders), the config file, the model and the data at the same paths:
a run is told only its config, its run folder and the submitting shell's working directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hadw import metrics as M
from hadw.errors import UserError
from hadw.experiments.compare import RunSpec, execute_run, is_finished
from hadw.processes import detach_from_a_closed_terminal, request_stop

LAUNCHERS = ("local", "ray", "slurm")
LAUNCHER_LOG = "launcher.log"  # per run folder: one line per attempt (where, when, how it ended)
SLURM_FOLDER = ".slurm"  # under --out: submitit's pickles and the job logs (<array>_<task>_0_log.out/.err)
TASKS_FILE = "tasks.tsv"  # under .slurm/<array id>/: array task id -> arm, seed, run folder
DEFAULT_SIGNAL_LEAD_S = 90  # submitit's default lead of the stop signal before the time limit


class LauncherError(UserError):
    """A launcher cannot be used as asked (missing package, no cluster, a bad option)."""


@dataclass
class RayOptions:
    # "local" starts a Ray instance on this machine for the sweep and stops it after; "auto" joins the
    # cluster this machine belongs to (`ray start` / RAY_ADDRESS); "ray://head:10001" connects a Ray client.
    # ("local" rather than Ray's own default, which silently joins whatever cluster was started here last.)
    address: str = "local"
    cpus_per_run: float = 1.0  # Ray's num_cpus per task: how many runs share a node
    gpus_per_run: float = 0.0  # Ray's num_gpus per task (fractions pack runs onto one GPU)
    local_cpus: int | None = None  # CPUs of a started local instance (None: all); the CLI passes --jobs × cpus
    poll_s: float = 2.0  # how often the progress line is refreshed
    max_parallel: int | None = None  # runs in flight at once (None: as many as the cluster places)
    threads: int = 1  # torch threads of each run (the CLI passes --cpus-per-run, also as train.num_threads)
    # Ray's runtime_env of the sweep (ray.init): env_vars, working_dir, pip, ... its tasks run in it.
    runtime_env: dict | None = None

    def task_options(self) -> dict:
        """The options of every run's Ray task (`ray.remote(**options)`), also what --dry-run prints."""
        return {"num_cpus": self.cpus_per_run, "num_gpus": self.gpus_per_run}


@dataclass
class SlurmOptions:
    partition: str | None = None
    time_min: int = 60  # per run (sbatch --time); Slurm sends the stop signal signal_lead_s before it
    cpus_per_run: int = 1
    gpus_per_run: int = 0
    account: str | None = None
    # Any other sbatch option, "key=value" ("qos=high", "mem=16G", "constraint=a100"); passed as --key=value.
    sbatch: tuple[str, ...] = ()
    max_requeues: int = 3  # time-outs a run may be requeued after (submitit's max_num_timeout)
    parallel: int = 256  # array tasks running at once (sbatch --array=0-N%parallel; --max-parallel)
    # Seconds before the time limit Slurm sends the stop signal (sbatch --signal=USR2@lead): longer than one
    # training step plus a checkpoint save, or the run is killed at the limit without a checkpoint.
    signal_lead_s: int = DEFAULT_SIGNAL_LEAD_S
    threads: int = 1  # torch threads of each run (the CLI passes --cpus-per-run, also as train.num_threads)
    setup: tuple[str, ...] = ()  # shell lines run in the job before the run (module load ..., source venv)
    poll_s: float = 5.0  # how often squeue is asked and the progress line refreshed
    job_name: str = "hadw-compare"
    extra: dict[str, str] = field(default_factory=dict)  # parsed `sbatch`, filled by __post_init__

    def __post_init__(self) -> None:
        for item in self.sbatch:
            key, sep, value = item.partition("=")
            key = key.strip().lstrip("-")
            if not sep or not key:
                raise LauncherError(f"--sbatch {item!r}: expected KEY=VALUE, e.g. qos=high or mem=16G")
            self.extra[key] = value
        if self.time_min < 1:
            raise LauncherError(f"--time-min {self.time_min}: must be >= 1 (minutes)")
        if self.signal_lead_s < 1:
            raise LauncherError(f"--signal-lead-s {self.signal_lead_s}: must be >= 1 (seconds)")
        if self.time_min * 60 <= self.signal_lead_s:
            # Slurm would send the stop signal at (or before) the start: the run stops before its first step.
            raise LauncherError(
                f"--time-min {self.time_min} ({self.time_min * 60} s) must be longer than --signal-lead-s "
                f"{self.signal_lead_s}: Slurm would tell every run to stop before it starts"
            )
        if self.parallel < 1:
            raise LauncherError(f"--max-parallel {self.parallel}: must be >= 1")


# ---------------------------------------------------------------------------------------------------
# What runs on a node


def _log_attempt(run_dir: Path, text: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / LAUNCHER_LOG, "a", encoding="utf-8") as log:
        now = time.time()  # milliseconds: the starts and ends of parallel runs can be ordered from these lines
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
        log.write(f"{stamp} {socket.gethostname()} pid {os.getpid()}: {text}\n")


def run_on_node(spec: RunSpec, cwd: str, where: str, threads: int = 1) -> dict:
    """execute_run on a worker node: from the submitting shell's folder (relative --out/--config paths stay
    valid), with the torch thread count of a local worker, recording the attempt in the run folder."""
    os.chdir(cwd)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    _log_attempt(spec.run_dir, f"start ({where}{_ray_resources()})")
    result = execute_run(spec)
    stopped = result["status"] == "failed" and (result["error"] or "").startswith("Interrupted")
    outcome = "stopped by a signal" if stopped else result["status"]
    _log_attempt(spec.run_dir, f"{outcome} ({where}, {_torch_threads()} torch threads)")
    return result


def _ray_resources() -> str:
    """ ", resources {'CPU': 2.0}" inside a Ray task (what Ray gave it, read back by the tests), else ""."""
    if "ray" not in sys.modules:
        return ""
    import ray

    if not ray.is_initialized():
        return ""
    context = ray.get_runtime_context()
    assigned = {k: v for k, v in context.get_assigned_resources().items() if v}
    # The names of the runtime_env's variables, never their values (tokens are passed this way).
    names = sorted((context.runtime_env or {}).get("env_vars") or {})
    return f", resources {dict(sorted(assigned.items()))}" + (f", env_vars {names}" if names else "")


def _torch_threads() -> int | str:
    """torch's thread count after the run (train.num_threads set it), or "?" if torch was never imported."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else "?"


class SlurmRun:
    """One array task: run `spec`; on submitit's preemption / time-out signal (USR2, or $SUBMITIT_PREEMPT_SIGNAL)
    stop at the end of the current step, save a checkpoint, and let submitit requeue the job.

    submitit's own handler would requeue at once, mid-step, losing the steps since the last periodic
    checkpoint. Here the signal first goes to the trainer's safe stop (the SIGTERM path of `hadw train`),
    and only after that checkpoint is written is submitit's handler called: it calls `checkpoint()` (the
    same run again, which resumes) and `scontrol requeue`s the task.
    """

    def __init__(self, spec: RunSpec, cwd: str, threads: int = 1):
        self.spec, self.cwd, self.threads = spec, cwd, threads

    def __call__(self) -> dict:
        import submitit

        env = submitit.JobEnvironment()
        signum = getattr(signal, "SIG" + env.USR_SIG)  # the signal submitit asked Slurm for (sbatch --signal)
        submitit_handler = signal.getsignal(signum)
        preempted: list[int] = []

        def on_preempt(sig, frame):
            preempted.append(sig)
            os.kill(os.getpid(), signal.SIGTERM)  # the trainer's handler: finish the step, checkpoint, stop

        signal.signal(signum, on_preempt)
        # Until the trainer installs its own handlers (model and data loading: seconds to minutes), a SIGTERM
        # (scancel, or on_preempt above) is kept for it: it then stops at its first safe point with a checkpoint.
        # (submitit's own SIGTERM handler only logs it, and the run would go on to the time limit.)
        signal.signal(signal.SIGTERM, lambda sig, frame: request_stop(sig))
        result = run_on_node(self.spec, self.cwd, f"slurm job {env.job_id}, log {env.paths.stderr}", self.threads)
        if preempted and callable(submitit_handler) and not is_finished(self.spec.run_dir):
            name = signal.Signals(signum).name
            try:
                submitit_handler(signum, None)  # checkpoint() + scontrol requeue + exit; or raises: no more requeues
            except SystemExit:  # requeued: this attempt ends here
                _log_attempt(self.spec.run_dir, f"preempted ({name}): requeued")
                raise
            except submitit.core.utils.UncompletedJobError as err:  # --max-requeues used up: the result says so
                _log_attempt(self.spec.run_dir, f"preempted ({name}): not requeued: {err}")
                raise
        return result

    def checkpoint(self, *args, **kwargs):
        import submitit

        return submitit.helpers.DelayedSubmission(SlurmRun(self.spec, self.cwd, self.threads))


# ---------------------------------------------------------------------------------------------------
# Progress across runs


class SweepProgress:
    """One line on stderr, "runs: 3 done, 2 running, 0 failed, 7 queued", printed when the counts change;
    "7 queued (1 requeued)" when some queued runs already ran once in this sweep (requeued, preempted)."""

    def __init__(self, total: int, echo: Callable[[str], None] | None = None, done: int = 0, failed: int = 0):
        self.total = total
        self.echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
        self.base = (done, failed)  # runs settled before anything was submitted (reused ones)
        self.last: tuple[int, int, int, int, int] | None = None

    def update(self, done: int, running: int, failed: int, requeued: int = 0) -> None:
        """Counts of the submitted runs; the settled ones are added here. `requeued` are among the queued."""
        done, failed = done + self.base[0], failed + self.base[1]
        counts = (done, running, failed, self.total - done - running - failed, requeued)
        if counts != self.last:
            self.last = counts
            line = "runs: {} done, {} running, {} failed, {} queued".format(*counts[:4])
            self.echo(line + (f" ({requeued} requeued)" if requeued else ""))


def _reuse_finished(specs: Sequence[RunSpec]) -> tuple[list[dict], list[RunSpec]]:
    """Finished runs are checked here (reused, or failed on a config mismatch) and never submitted."""
    reused, todo = [], []
    for spec in specs:
        if is_finished(spec.run_dir):
            reused.append(execute_run(spec))
        else:
            todo.append(spec)
    return reused, todo


def _failed(spec: RunSpec, error: str) -> dict:
    return {"arm": spec.arm, "seed": spec.seed, "status": "failed", "error": error}


# ---------------------------------------------------------------------------------------------------
# Ray


def run_ray(specs: Sequence[RunSpec], opts: RayOptions, progress: SweepProgress) -> list[dict]:
    """Each run one Ray task with opts' CPU/GPU request; Ray retries a task whose worker or node died
    (the retry resumes from the run's checkpoint)."""
    try:
        import ray
    except ImportError:
        raise LauncherError("--launcher ray needs Ray: pip install 'hadw[cluster]'") from None
    started = False
    if not ray.is_initialized():
        _check_reachable(opts.address)
        kwargs: dict = {}
        if opts.address == "local":  # our own instance: no dashboard, the CPUs we were given
            kwargs = {"num_cpus": opts.local_cpus, "include_dashboard": False}
        if not opts.address.startswith("ray://"):  # (a Ray client takes none of these)
            kwargs |= {"log_to_driver": False, "configure_logging": False}
        if opts.runtime_env is not None:
            kwargs["runtime_env"] = opts.runtime_env
        try:
            ray.init(address=opts.address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as err:
            why = " ".join(str(err).split())
            raise LauncherError(f"--ray-address {opts.address}: cannot connect ({why})") from None
        started = True
    progress.update(0, 0, 0)  # once connected: a cluster that is not there is its one line, with no "queued"
    try:
        task = ray.remote(**opts.task_options())(run_on_node)
        cwd = os.getcwd()
        waiting = list(specs)  # not yet submitted: at most opts.max_parallel tasks are in flight at once
        limit = opts.max_parallel or len(specs)
        refs: dict = {}
        results: list[dict] = []
        pending: list = []
        submitted = time.time()
        while pending or waiting:
            while waiting and len(pending) < limit:
                spec = waiting.pop(0)
                ref = task.remote(spec, cwd, "ray", opts.threads)
                refs[ref] = spec
                pending.append(ref)
            # Throttled: return at the first finished task, so that the next one is submitted at once.
            wanted = 1 if waiting else len(pending)
            ready, pending = ray.wait(pending, num_returns=wanted, timeout=opts.poll_s)
            for ref in ready:
                try:
                    results.append(ray.get(ref))
                except Exception as err:  # the task's worker or node died for good (after Ray's retries)
                    results.append(_failed(refs[ref], f"Ray task failed: {' '.join(str(err).split())[:2000]}"))
            done = sum(r["status"] != "failed" for r in results)
            running = sum(_started_since(refs[ref].run_dir, submitted) for ref in pending)
            progress.update(done, running, len(results) - done)
        return results
    finally:
        if started:
            ray.shutdown()


def _check_reachable(address: str) -> None:
    """HOST:PORT or ray://HOST:PORT must accept a connection: ray.init would otherwise retry for minutes."""
    if address in ("local", "auto"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise LauncherError(f"--ray-address {address}: expected local, auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as err:
        raise LauncherError(f"--ray-address {address}: cannot connect ({err.strerror or err})") from None


def _started_since(run_dir: Path, since: float) -> bool:
    """A run has started when its launcher.log was written since the sweep was submitted (shared folder)."""
    try:
        return (run_dir / LAUNCHER_LOG).stat().st_mtime >= since
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------------
# Slurm


def _squeue_states(array_id: str) -> dict[str, str] | None:
    """task id ("123_4") -> Slurm state for the array's tasks still known to slurmctld; None if squeue failed."""
    import subprocess

    try:
        out = subprocess.run(
            ["squeue", "-h", "-r", "-j", array_id, "-t", "all", "-o", "%i %T"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        # An array no longer known to slurmctld (all tasks ended MinJobAge ago) is an error to squeue.
        return {} if "Invalid job id" in out.stderr else None
    return dict(line.split(None, 1) for line in out.stdout.splitlines() if " " in line)


RUNNING_STATES = {"RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING"}
ENDED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def run_slurm(specs: Sequence[RunSpec], opts: SlurmOptions, out_dir: Path, progress: SweepProgress) -> list[dict]:
    """All runs as one job array through submitit; waits, following the tasks with squeue."""
    try:
        import submitit
    except ImportError:
        raise LauncherError("--launcher slurm needs submitit: pip install 'hadw[cluster]'") from None
    try:
        executor = submitit.SlurmExecutor(folder=_slurm_folder(out_dir), max_num_timeout=opts.max_requeues)
    except RuntimeError:
        raise LauncherError("--launcher slurm: no Slurm here (srun not found); run it on a login node") from None
    params = _slurm_params(opts, out_dir)
    busy = _queued_arrays(params["job_name"])
    if busy:
        raise LauncherError(
            f"--out {out_dir}: job array {', '.join(busy)} of an earlier hadw compare on this folder is still queued "
            f"or running (squeue -n {params['job_name']}); wait for it (--collect-only reports what has finished) "
            "or scancel it, then re-run: its runs would otherwise start twice"
        )
    executor.update_parameters(**params)
    cwd = os.getcwd()
    submitted = time.time()  # a run whose launcher.log is newer has started in this sweep (requeued if queued)
    try:
        with _sbatch_stderr_held() as held, executor.batch():
            jobs = [executor.submit(SlurmRun(spec, cwd, opts.threads)) for spec in specs]
    except Exception as err:  # sbatch refused the array (unknown partition/account, bad option): one line
        raise LauncherError(f"--launcher slurm: sbatch failed: {' '.join(str(err).split())[:500]}") from None
    if held:  # sbatch's warnings on a successful submission: shown, as sbatch would have
        print(held[0], end="", file=sys.stderr, flush=True)
    progress.update(0, 0, 0)  # once submitted: an sbatch refusal is its one line, with no "queued" line before it
    tasks = Path(jobs[0].paths.folder) / TASKS_FILE
    tasks.parent.mkdir(parents=True, exist_ok=True)
    tasks.write_text(task_table(specs), encoding="utf-8")
    print(
        f"slurm: submitted job array {jobs[0].job_id.split('_')[0]} ({len(jobs)} runs); logs in {jobs[0].paths.folder}"
        f", array task -> arm, seed in {tasks}",
        file=sys.stderr,
        flush=True,
    )
    return _wait_slurm(dict(zip(jobs, specs, strict=True)), opts.poll_s, progress, submitted)


@contextlib.contextmanager
def _sbatch_stderr_held():
    """Hold back what sbatch writes to stderr (submitit lets it through) while the array is submitted: on a
    refusal the error's text is already in our one line; on success the list yielded gets it, to be shown."""
    import tempfile

    held: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield held
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode(errors="replace")
            if text:
                held.append(text)


def _slurm_folder(out_dir: str | Path) -> Path:
    return Path(out_dir) / SLURM_FOLDER / "%A"


def _slurm_params(opts: SlurmOptions, out_dir: str | Path) -> dict:
    """submitit's SlurmExecutor parameters (the names of submitit's _make_sbatch_string) from opts."""
    params: dict = {
        "job_name": f"{opts.job_name}-{_folder_tag(Path(out_dir))}",
        "time": opts.time_min,
        "cpus_per_task": opts.cpus_per_run,
        "array_parallelism": opts.parallel,
        "signal_delay_s": opts.signal_lead_s,
        "additional_parameters": opts.extra,
    }
    optional = {"partition": opts.partition, "account": opts.account, "gpus_per_node": opts.gpus_per_run or None}
    params |= {key: value for key, value in optional.items() if value}
    if opts.setup:
        params["setup"] = list(opts.setup)
    return params


def sbatch_script(n_runs: int, opts: SlurmOptions, out_dir: str | Path) -> str:
    """The batch script `hadw compare` would submit for an array of n_runs tasks (submitit writes the same)."""
    try:
        from submitit.slurm.slurm import _make_sbatch_string  # private, but the very function submitit submits
    except ImportError:
        raise LauncherError("--launcher slurm needs submitit: pip install 'hadw[cluster]'") from None
    folder = _slurm_folder(out_dir)
    command = f"{sys.executable} -u -m submitit.core._submit {folder}"
    return _make_sbatch_string(command=command, folder=folder, map_count=n_runs, **_slurm_params(opts, out_dir))


def task_table(specs: Sequence[RunSpec]) -> str:
    """Tab-separated "task, arm, seed, run folder", one line per run: a Slurm array task id is the index here."""
    lines = ["task\tarm\tseed\trun_dir"]
    lines += [f"{i}\t{spec.arm}\t{spec.seed}\t{spec.run_dir}" for i, spec in enumerate(specs)]
    return "\n".join(lines) + "\n"


def runtime_env_shown(runtime_env: dict | None) -> dict | None:
    """A runtime_env as hadw prints it (--dry-run): env_vars by name only, as the sweep's log shows them. A value
    may be a secret (HF_TOKEN, WANDB_API_KEY), and a dry run's output goes to terminals, logs and issue reports."""
    if not runtime_env or not isinstance(runtime_env.get("env_vars"), dict):
        return runtime_env
    return {**runtime_env, "env_vars": sorted(runtime_env["env_vars"])}


def dry_run(specs: Sequence[RunSpec], launcher: str, options: RayOptions | SlurmOptions, out_dir: str | Path) -> str:
    """What `launch` would submit, as text (the batch script or the Ray task spec, then the task table);
    runs already finished are left out, as launch leaves them out. Submits and writes nothing."""
    todo = [spec for spec in specs if not is_finished(spec.run_dir)]
    head = f"# {len(todo)} of {len(specs)} runs to submit ({len(specs) - len(todo)} finished, reused)\n"
    if isinstance(options, SlurmOptions):
        body = sbatch_script(len(todo), options, out_dir) if todo else "# nothing to submit\n"
        body += f"# requeues after a time-out, per run: at most {options.max_requeues} (submitit's max_num_timeout)\n"
    else:
        spec = {
            "address": options.address,
            "task_options": options.task_options(),
            "max_parallel": options.max_parallel,
            "threads_per_run": options.threads,
            "local_cpus": options.local_cpus if options.address == "local" else None,
            "runtime_env": runtime_env_shown(options.runtime_env),
            "function": f"{run_on_node.__module__}.run_on_node(spec, cwd={os.getcwd()!r}, where='ray')",
        }
        body = "# Ray task spec (runtime_env's env_vars: names only, values not shown)\n"
        body += "\n".join(f"{key}: {value}" for key, value in spec.items()) + "\n"
    return head + body + f"\n# {launcher} task -> arm, seed\n" + task_table(todo)


def _folder_tag(out_dir: Path) -> str:
    """A short name for --out in the job name, so that a later sweep can find the arrays still on it."""
    import hashlib

    path = str(Path(out_dir).resolve())
    return f"{Path(path).name[:24]}-{hashlib.sha1(path.encode()).hexdigest()[:8]}"


def _queued_arrays(job_name: str) -> list[str]:
    """Array ids of this user's jobs named job_name that are pending or running (squeue; [] if it fails)."""
    import getpass
    import subprocess

    try:
        out = subprocess.run(
            ["squeue", "-h", "-u", getpass.getuser(), "-n", job_name, "-o", "%A"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return sorted(set(out.stdout.split())) if out.returncode == 0 else []


def _wait_slurm(jobs: dict, poll_s: float, progress: SweepProgress, submitted: float) -> list[dict]:
    """Poll squeue until every task has ended. A task's result is final only once Slurm says the task ended:
    a task requeued (`scontrol requeue`, preemption with PreemptMode=REQUEUE) may have written the result of
    its interrupted attempt, and then runs again; it is shown as requeued and waited for."""
    results: dict[str, dict] = {}
    array_id = next(iter(jobs)).job_id.split("_")[0]
    gone: dict[str, int] = {}  # task id -> polls it has been missing from squeue without a result
    while True:
        states = _squeue_states(array_id)
        for job, spec in jobs.items():
            if job.job_id in results:
                continue
            state = None if states is None else states.get(job.job_id, "GONE")
            ended = state == "GONE" or (state or "").split()[0] in ENDED_STATES
            # squeue failed (None): the result file decides, as it is all there is to go by.
            if job.paths.result_pickle.exists() and (ended or state is None):
                results[job.job_id] = _slurm_result(job, spec)
                continue
            gone[job.job_id] = gone.get(job.job_id, 0) + 1 if ended else 0
            if gone[job.job_id] >= 2:  # ended twice in a row and still no result: killed / cancelled / timed out
                results[job.job_id] = _failed(
                    spec,
                    f"slurm job {job.job_id} ended ({state}) without a result; log: {job.paths.stderr}. "
                    "Re-run the same command to resume it from its last checkpoint",
                )
        waiting = {job: spec for job, spec in jobs.items() if job.job_id not in results}
        running = sum(1 for job in waiting if states and states.get(job.job_id) in RUNNING_STATES)
        requeued = sum(
            1
            for job, spec in waiting.items()
            if states and _is_queued(states.get(job.job_id)) and _started_since(spec.run_dir, submitted)
        )
        done = sum(r["status"] != "failed" for r in results.values())
        progress.update(done, running, len(results) - done, requeued)
        if not waiting:
            return list(results.values())
        time.sleep(poll_s)


def _is_queued(state: str | None) -> bool:
    """PENDING, or one of Slurm's REQUEUED / REQUEUE_HOLD / REQUEUE_FED states."""
    return bool(state) and (state == "PENDING" or state.startswith("REQUEUE"))


def _slurm_result(job, spec: RunSpec) -> dict:
    try:
        return job.result()
    except Exception as err:  # the job raised, or submitit gave up requeuing it
        text = " ".join(str(err).split())
        if "timed-out too many times" in text:  # submitit's words when --max-requeues is used up
            text = (
                "stopped by its time limit more than --max-requeues times (submitit: timed-out too many times); "
                "allow more requeues or a longer --time-min, and re-run the same command to resume it from its "
                "last checkpoint"
            )
        return _failed(spec, f"slurm job {job.job_id}: {text[:2000]}; log: {job.paths.stderr}")


# ---------------------------------------------------------------------------------------------------
# Entry point


def launch(
    specs: Sequence[RunSpec],
    launcher: str,
    options: RayOptions | SlurmOptions,
    out_dir: str | Path = ".",
    echo: Callable[[str], None] | None = None,
) -> list[dict]:
    """Run every spec on Ray or Slurm; finished runs are reused here and not submitted. Same result dicts as
    compare.run_all ({"arm", "seed", "status": trained | resumed | reused | failed, "error"})."""
    if launcher not in ("ray", "slurm"):
        raise LauncherError(f"--launcher {launcher}: allowed here: ray, slurm (local runs go through run_all)")
    reused, todo = _reuse_finished(specs)
    n_failed = sum(r["status"] == "failed" for r in reused)
    progress = SweepProgress(len(specs), echo, done=len(reused) - n_failed, failed=n_failed)
    if not todo:
        progress.update(0, 0, 0)
        return reused
    with _through_a_closed_terminal():
        if launcher == "ray":
            assert isinstance(options, RayOptions)
            ran = run_ray(todo, options, progress)
        else:
            assert isinstance(options, SlurmOptions)
            ran = run_slurm(todo, options, Path(out_dir), progress)
    return reused + check_from_driver(ran, todo)


@contextlib.contextmanager
def _through_a_closed_terminal():
    """SIGHUP while the driver waits (its terminal or ssh session closed): it goes on waiting, its output to
    /dev/null, and writes the report at the end. By default SIGHUP would end it, and on Ray every run with it
    (a Ray task dies with the driver that owns it)."""
    import threading

    if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGHUP, lambda signum, frame: detach_from_a_closed_terminal())
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


SHARED_STORAGE = (
    "--out must be on storage every node shares (NFS, Lustre, GPFS, a mounted bucket; never a node's own disk or "
    "/tmp): see 'What every node must see' in docs/compare.md"
)


def check_from_driver(results: Sequence[dict], specs: Sequence[RunSpec]) -> list[dict]:
    """A run that ended well on its node counts only if this machine (the driver) sees it too: its final model
    and a readable final eval in its run folder. One that is not visible here is reported failed, naming the
    shared-storage need: the report would otherwise be built silently from the runs that happen to be here."""
    import json

    by_run = {(spec.arm, spec.seed): spec for spec in specs}
    checked = []
    for result in results:
        spec = by_run.get((result["arm"], result["seed"]))
        if spec is None or result["status"] == "failed":
            checked.append(result)
            continue
        try:
            json.loads((spec.run_dir / M.FINAL_EVAL_FILE).read_text(encoding="utf-8"))
            visible = is_finished(spec.run_dir)
        except (OSError, ValueError):
            visible = False
        if visible:
            checked.append(result)
            continue
        where = "its run folder is missing here" if not spec.run_dir.exists() else "its results are missing here"
        checked.append(_failed(spec, f"{result['status']} on its node, but {where} ({spec.run_dir}): {SHARED_STORAGE}"))
    return checked
