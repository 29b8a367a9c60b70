"""engine=trl's parent: what happens once (the run folder claimed and locked, config.yaml written, the resume point
chosen), then the workers under accelerate's launcher (hadw.train.engines.trl_worker), as `trl grpo` re-executes its
script through `accelerate launch`. A stop signal to `hadw train` reaches every worker, which end in a checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from hadw.errors import UserError
from hadw.metrics import FINAL_EVAL_FILE, REWARD_FAILED
from hadw.train.config import Config, config_to_yaml, resolve_recipe
from hadw.train.engines.trl_args import SHIPPED_ACCELERATE_CONFIGS
from hadw.train.engines.trl_worker import ERROR_FILE, STOPPED_FILE, start_model
from hadw.train.run_dir import RunDirError, claim_run_dir, config_differences, holds_run, saved_config

TRL_CHECKPOINT = re.compile(r"checkpoint-(\d+)")


class TRLWorkerError(RuntimeError):
    """A training process of engine=trl failed with a Python error (its traceback is in its output)."""


def trl_checkpoints(run_dir: Path) -> list[Path]:
    """TRL's checkpoint-<optimiser step> folders of a run that a resume can read (trainer_state.json), oldest first;
    links are never followed."""
    found = []
    for path in run_dir.glob("checkpoint-*"):
        match = TRL_CHECKPOINT.fullmatch(path.name)
        if match and path.is_dir() and not path.is_symlink() and (path / "trainer_state.json").is_file():
            found.append((int(match[1]), path))
    return [path for _, path in sorted(found)]


def accelerate_config(name: str) -> str:
    """trl.accelerate_config as a file: one of TRL's shipped names, else the path given (which must exist)."""
    if name in SHIPPED_ACCELERATE_CONFIGS:
        import trl

        return str(Path(trl.__file__).parent / "accelerate_configs" / f"{name}.yaml")
    if not Path(name).is_file():
        allowed = ", ".join(SHIPPED_ACCELERATE_CONFIGS)
        raise UserError(f"trl.accelerate_config={name!r}: no such file; allowed: a YAML file or one of {allowed}")
    return name


def _free_port() -> int:
    with socket.socket() as s:  # two runs launched side by side (hadw compare) must not share a rendezvous port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_command(cfg: Config, run_dir: Path, checkpoint: Path | None) -> list[str]:
    """The worker's command line: the worker itself for one process, else under `accelerate launch`."""
    worker = ["-m", "hadw.train.engines.trl_worker", str(run_dir)]
    if checkpoint is not None:
        worker += ["--resume-from", str(checkpoint)]
    t = cfg.trl
    if t.num_processes == 1 and not t.accelerate_config and not t.launch_args:
        return [sys.executable, *worker]
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(t.num_processes)]
    if t.accelerate_config:
        command += ["--config_file", accelerate_config(t.accelerate_config)]
    elif t.num_processes > 1:
        command += ["--multi_gpu"]  # data parallel; on a CPU, gloo ranks (the worker sets use_cpu)
    command += ["--num_machines", "1"] if "--num_machines" not in t.launch_args else []
    command += ["--mixed_precision", "no", "--dynamo_backend", "no"]  # precision is the config's (bf16 field)
    if "--main_process_port" not in t.launch_args:
        command += ["--main_process_port", str(_free_port())]
    return [*command, *t.launch_args, *worker]


def _resume_point(cfg: Config, run_dir: Path, accept_changes: bool) -> Path | None:
    """--resume: the newest TRL checkpoint (None: restart a run stopped before its first one); the settings must be
    the saved run's unless accepted."""
    from hadw.train.result import portable

    diffs = config_differences(saved_config(run_dir), portable(cfg, run_dir).to_dict(), Config().to_dict())
    if diffs and not accept_changes:
        raise RunDirError(
            f"--resume: the settings differ from the saved run in {run_dir / 'config.yaml'} ({'; '.join(diffs)}); "
            "pass the saved values, or --accept-changes to apply the new ones"
        )
    found = trl_checkpoints(run_dir)
    if not found:
        if not holds_run(run_dir):
            raise RunDirError(
                f"--resume: no checkpoint in train.output_dir={run_dir}; run without --resume to start it"
            )
        print(f"--resume: {run_dir} has no checkpoint yet; restarting it from step 0", file=sys.stderr)
        return None
    from hadw.train.engines.trl_args import batch_layout

    done = int(TRL_CHECKPOINT.fullmatch(found[-1].name)[1]) // batch_layout(cfg)["updates_per_step"]
    if done > cfg.train.steps:
        raise RunDirError(
            f"--resume: {found[-1]} is at step {done}, past train.steps={cfg.train.steps}; "
            f"allowed: train.steps >= {done}"
        )
    return found[-1]


def _stream(stream):
    """`stream` when it is a real file (Popen can hand its descriptor on), else None (inherit ours)."""
    try:
        stream.flush()
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return stream


def _run_worker(command: list[str]) -> int:
    """Run the workers in their own process group; SIGINT / SIGTERM / SIGHUP to this process are passed on to it
    (the workers stop at the next rollout batch, in a checkpoint); returns the exit code."""
    from hadw.processes import STOP_SIGNALS

    # its own session: a terminal's Ctrl-C reaches us, and we pass it on; its output goes where ours goes (hadw
    # compare redirects sys.stdout / sys.stderr to the run's train.log)
    out, err = (_stream(s) for s in (sys.stdout, sys.stderr))
    child = subprocess.Popen(command, start_new_session=True, stdout=out, stderr=err)

    def forward(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
    try:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:  # a handler raised elsewhere: keep waiting for the checkpoint
                continue
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
        if child.poll() is None:  # this process is ending abnormally: never leave the workers behind
            os.killpg(child.pid, signal.SIGKILL)


def train_trl(cfg: Config, resume: bool = False, overwrite: bool = False, accept_changes: bool = False):
    """Train cfg with TRL; returns hadw.train.trainer.TrainResult. Raises UserError (one line), Interrupted (a stop
    signal: the run saved a checkpoint), TRLWorkerError."""
    from hadw.errors import SignalStop
    from hadw.eval.run_recipe import RUN_PATH_KEYS, write_run_paths
    from hadw.safe_files import atomic_write_text
    from hadw.train.result import TrainResult, portable

    cfg = resolve_recipe(cfg)
    run_dir = Path(cfg.train.output_dir).absolute()
    start_model(cfg)  # before anything is written: a run that cannot start says so first
    lock, aside = claim_run_dir(run_dir, resume, overwrite)
    if aside is not None:
        print(f"moved the previous run in {run_dir} to {aside}", file=sys.stderr)
    try:
        checkpoint = _resume_point(cfg, run_dir, accept_changes) if resume else None
        atomic_write_text(run_dir / "config.yaml", config_to_yaml(portable(cfg, run_dir)))
        paths = {key: getattr(getattr(cfg, key.split(".")[0]), key.split(".")[1]) for key in RUN_PATH_KEYS}
        write_run_paths(run_dir, paths)
        for name in (STOPPED_FILE, ERROR_FILE):
            (run_dir / name).unlink(missing_ok=True)
        code = _run_worker(launch_command(cfg, run_dir, checkpoint))
    finally:
        lock.release()
    stopped, error = run_dir / STOPPED_FILE, run_dir / ERROR_FILE
    if stopped.is_file() and not stopped.is_symlink():
        signum = int(stopped.read_text(encoding="utf-8").strip() or signal.SIGTERM)
        found = trl_checkpoints(run_dir)
        where = f"last checkpoint {found[-1]}" if found else "no checkpoint yet (a resume restarts from step 0)"
        command = f"hadw train {run_dir / 'config.yaml'} --resume"
        raise SignalStop(f"{signal.Signals(signum).name}: stopped; {where}; resume with: {command}", signum)
    if error.is_file() and not error.is_symlink():
        raise UserError(error.read_text(encoding="utf-8").strip().splitlines()[0])
    if code != 0:
        raise TRLWorkerError(f"engine=trl: the training process exited with code {code} (its output is above)")
    path = run_dir / FINAL_EVAL_FILE
    final = json.loads(path.read_text(encoding="utf-8")) if path.is_file() and not path.is_symlink() else {}
    failure = "the reward failed on every completion" if (final.get("all") or {}).get(REWARD_FAILED) else None
    return TrainResult(run_dir, cfg.train.steps, final or None, failure)
