"""Runs that never lose work, never lie, never run a stranger's code (issue 11): run folders, resume,
checkpoint loading, durability, signals, rewards that hang or return garbage, input limits, verifiers."""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch

from hadw.core import make_anchor
from hadw.core.anchors import anchor_setting_changes
from hadw.rewards import RewardFunction, math_item, run_reward
from hadw.rewards.verifiers import exact_item
from hadw.train.checkpoint import latest_checkpoint, save_checkpoint
from hadw.train.config import load_config
from hadw.train.metrics_log import read_jsonl
from hadw.train.run_dir import RunDirError, RunLock, claim_run_dir, config_differences
from hadw.train.trainer import Trainer

REPO_ROOT = Path(__file__).resolve().parents[1]


def _overrides(tiny_path, out_dir, *extra: str) -> list[str]:
    return [
        f"model.path={tiny_path}",
        "data.chat_template=never",
        "data.eval_size=4",
        "rollout.group_size=2",
        "rollout.max_new_tokens=3",
        "train.prompts_per_step=2",
        "train.mini_batch_prompts=1",
        "train.steps=2",
        f"train.output_dir={out_dir}",
        "optim.lr=1e-3",
        "optim.warmup_steps=0",
        "logging.progress=false",
        "train.num_threads=1",
        *extra,
    ]


def _start_train(tiny_path, out_dir) -> subprocess.Popen:
    """`hadw train` of a run far longer than any test waits, as its own process (its stderr piped)."""
    env = os.environ | {"PYTHONPATH": str(REPO_ROOT / "src")}
    argv = [sys.executable, "-m", "hadw.cli", "train", *_overrides(tiny_path, out_dir, "train.steps=100000")]
    return subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def _trainer(tiny_path, out_dir, *extra, **kwargs) -> Trainer:
    return Trainer(load_config(None, _overrides(tiny_path, out_dir, *extra)), **kwargs)


# ---------------------------------------------------------------------------------------- 1. run folders
def test_a_second_run_into_a_used_folder_is_refused_and_overwrite_moves_it_aside(tiny_path, tmp_path):
    run = tmp_path / "run"
    _trainer(tiny_path, run, "train.steps=4", "checkpoint.every=1").train()
    with pytest.raises(RunDirError, match="already holds a run.*--resume.*--overwrite"):
        _trainer(tiny_path, run, "train.steps=2")
    _trainer(tiny_path, run, "train.steps=2", overwrite=True).train()
    # The new run alone: its own checkpoints, `latest` pointing at one that exists, its own metrics rows.
    assert latest_checkpoint(run).name == "checkpoint-000002"
    assert [p.name for p in sorted(run.glob("checkpoint-*"))] == ["checkpoint-000002"]
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2]
    old = tmp_path / "run.old-1"
    assert latest_checkpoint(old).name == "checkpoint-000004"
    assert [r["step"] for r in read_jsonl(old / "metrics.jsonl")] == [1, 2, 3, 4]


def test_the_folder_lock_names_the_holder_and_is_released_on_exit(tmp_path):
    lock, _ = claim_run_dir(tmp_path / "run", resume=False)
    with pytest.raises(RunDirError, match=f"in use by pid {os.getpid()}"):
        claim_run_dir(tmp_path / "run", resume=False)
    lock.release()
    claim_run_dir(tmp_path / "run", resume=False)[0].release()
    # Another process that dies holding the lock (kill -9) leaves it free: the kernel drops a flock.
    code = (
        f"import os,sys; sys.path.insert(0, {str(REPO_ROOT / 'src')!r}); from hadw.train.run_dir import RunLock; "
        f"from pathlib import Path; RunLock(Path({str(tmp_path / 'run')!r})); os.kill(os.getpid(), 9)"
    )
    subprocess.run([sys.executable, "-c", code], check=False, timeout=60)
    RunLock(tmp_path / "run").release()


def test_a_restart_before_the_first_checkpoint_does_not_duplicate_rows(tiny_path, tmp_path):
    run = tmp_path / "run"
    first = _trainer(tiny_path, run, "train.steps=3")
    for step in range(2):  # two steps logged, then the process "dies" before any checkpoint
        first.logger.log(step + 1, first.train_step(step))
    first.logger.close()
    first._lock.release()
    resumed = _trainer(tiny_path, run, "train.steps=3", resume=True)
    assert resumed.start_step == 0
    resumed.train()
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3]


# ---------------------------------------------------------------------------------------- 2. resume
def test_resume_with_changed_settings_refuses_and_lists_each_difference(tiny_path, tmp_path):
    run = tmp_path / "run"
    _trainer(tiny_path, run, "hadw.enabled=true").train()
    with pytest.raises(RunDirError) as err:
        _trainer(tiny_path, run, "train.steps=3", "hadw.enabled=true", "optim.lr=5e-4", "hadw.anchor=ema", resume=True)
    message = str(err.value)
    assert "optim.lr: 0.001 -> 0.0005" in message and "hadw.anchor: 'window' -> 'ema'" in message
    assert "--accept-changes" in message


def test_tiny_model_settings_are_inert_for_a_run_from_a_model_path():
    """model.tiny.* only shapes and warm-starts the model built when model.path is empty; a run from a checkpoint
    resumes across a change of those defaults (0.25 -> 0.3 after 0.2.0) without --accept-changes."""
    old = {"model": {"path": "warm", "tiny": {"warm_start_accuracy": 0.25}}, "optim": {"lr": 1e-4}}
    new = {"model": {"path": "warm", "tiny": {"warm_start_accuracy": 0.3}}, "optim": {"lr": 1e-4}}
    assert config_differences(old, new) == []
    built = {"model": {"path": "", "tiny": {"warm_start_accuracy": 0.25}}, "optim": {"lr": 1e-4}}
    rebuilt = {"model": {"path": "", "tiny": {"warm_start_accuracy": 0.3}}, "optim": {"lr": 2e-4}}
    assert config_differences(built, rebuilt) == [
        "model.tiny.warm_start_accuracy: 0.25 -> 0.3",
        "optim.lr: 0.0001 -> 0.0002",
    ]


def test_a_key_added_after_the_run_was_saved_is_no_difference_at_its_default(tiny_path, tmp_path):
    """A checkpoint from before optim.name / hadw.normalize / reward.max_failed_steps existed resumes without
    --accept-changes when the new keys keep their defaults (the behaviour that run had)."""
    from hadw.train.config import Config

    defaults = Config().to_dict()
    new = load_config(None, _overrides(tiny_path, tmp_path / "run")).to_dict()
    old = json.loads(json.dumps(new))
    del old["optim"]["name"], old["hadw"]["normalize"], old["reward"]["max_failed_steps"]
    assert config_differences(old, new, defaults) == []
    changed = load_config(None, _overrides(tiny_path, tmp_path / "run", "optim.name=sgd")).to_dict()
    assert config_differences(old, changed, defaults) == ["optim.name: '<unset>' -> 'sgd'"]
    assert config_differences(old, new) != []  # without the defaults every new key would count


def test_accepted_changes_are_what_runs_and_what_config_yaml_records(tiny_path, tmp_path):
    run = tmp_path / "run"
    _trainer(tiny_path, run, "hadw.enabled=true").train()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = _trainer(
            tiny_path,
            run,
            "train.steps=3",
            "hadw.enabled=true",
            "optim.lr=5e-4",
            "hadw.anchor=ema",
            resume=True,
            accept_changes=True,
        )
    assert any("anchor" in str(w.message) for w in caught)
    assert [g["lr"] for g in resumed.optimizer.param_groups] == [5e-4]  # not the saved optimiser's 1e-3
    assert resumed.anchor.kind == "ema" and resumed.anchor.prior is None
    resumed.train()
    assert all(
        r["actor/lr"] == 5e-4 for r in read_jsonl(run / "metrics.jsonl") if r.get("step") == 3 and "actor/lr" in r
    )
    assert load_config(run / "config.yaml").optim.lr == 5e-4


def test_adapters_see_a_changed_anchor_setting():
    saved = make_anchor("window", k=10).state_dict()
    assert anchor_setting_changes(saved, make_anchor("window", k=10)) == []
    assert anchor_setting_changes(saved, make_anchor("window", k=5)) == ["k: 10 -> 5"]
    assert anchor_setting_changes(saved, make_anchor("ema", alpha=0.2)) == ["kind: 'window' -> 'ema'"]


def test_trl_restore_anchor_warns_and_keeps_the_configured_anchor(tmp_path, caplog):
    trl = pytest.importorskip("hadw.integrations.trl")
    saved = make_anchor("window", k=10)
    saved.observe(0.25)
    path = tmp_path / "hadw_anchor.json"
    path.write_text(json.dumps(saved.state_dict()))
    configured = make_anchor("window", k=3)
    assert trl.restore_anchor(configured, str(path)) is False
    assert configured.k == 3 and configured.history == []  # the saved k=10 did not silently win
    assert "THE ANCHOR STARTS EMPTY" in caplog.text
    same = make_anchor("window", k=10)
    assert trl.restore_anchor(same, str(path)) is True and same.history == [0.25]


# ---------------------------------------------------------------------------------------- 3. no code
def test_a_crafted_trainer_state_does_not_run_on_resume(tiny_path, tmp_path):
    run = tmp_path / "run"
    _trainer(tiny_path, run).train()
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"optimizer": Payload()}, latest_checkpoint(run) / "trainer_state.pt")
    with pytest.raises(Exception, match="refused to load"):
        _trainer(tiny_path, run, "train.steps=3", resume=True)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------- 4. durability
def test_a_truncated_last_metrics_line_does_not_block_resume(tiny_path, tmp_path):
    run = tmp_path / "run"
    _trainer(tiny_path, run, "checkpoint.every=1", "train.steps=3").train()
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "loss/pol')  # the disk filled up mid-line
    (run / "final_model").rename(run / "gone")
    with pytest.warns(UserWarning, match="unfinished last line"):
        resumed = _trainer(tiny_path, run, "checkpoint.every=1", "train.steps=4", resume=True)
    resumed.train()
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3, 4]


def test_checkpoint_files_and_folder_are_fsynced(tiny_path, tmp_path, monkeypatch):
    trainer = _trainer(tiny_path, tmp_path / "run")
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))[1])
    path = trainer.checkpoint(1)
    names = {Path(p).name for p in synced}
    assert {"trainer_state.pt", "state.json", "model.safetensors", "model", ".tmp-checkpoint-000001"} <= names
    assert str(tmp_path / "run") in synced  # the rename itself made durable
    assert path.name in {Path(p).name for p in synced} or str(path.parent) in synced


def test_final_model_is_never_half_written(tiny_path, tmp_path, monkeypatch):
    trainer = _trainer(tiny_path, tmp_path / "run")
    model_cls = type(trainer.model)
    real = model_cls.save_pretrained

    def crash_after_config(self, folder, *args, **kwargs):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "config.json").write_text("{}")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model_cls, "save_pretrained", crash_after_config)
    from hadw.safe_files import DiskFullError

    with pytest.raises(DiskFullError, match="the disk is full: writing .*final_model failed"):  # one line
        trainer._save_final_model()
    assert not (tmp_path / "run" / "final_model").exists()
    assert not list((tmp_path / "run").glob(".final_model.tmp*"))  # the half-written copy is gone too
    monkeypatch.setattr(model_cls, "save_pretrained", real)


def test_keep_last_keeps_the_current_checkpoint(tiny_path, tmp_path):
    trainer = _trainer(tiny_path, tmp_path / "run")
    args = (trainer.model, trainer.tokenizer, trainer.optimizer, trainer.scheduler, {"anchor": {}})
    for step in (1, 2, 3):
        save_checkpoint(tmp_path / "run", step, *args, keep_last=0)  # a library caller passing 0
    assert [p.name for p in sorted((tmp_path / "run").glob("checkpoint-*"))] == ["checkpoint-000003"]
    assert latest_checkpoint(tmp_path / "run").name == "checkpoint-000003"


# ---------------------------------------------------------------------------------------- 5. signals
def test_sigterm_sigint_and_sighup_stop_at_a_safe_point_with_the_resume_command(tiny_path, tmp_path):
    runs = {
        signal.SIGTERM: (tmp_path / "term", 143),
        signal.SIGINT: (tmp_path / "int", 130),
        signal.SIGHUP: (tmp_path / "hup", 129),  # issue 31: a closed terminal killed the run where it stood
    }
    procs = {  # both at once: the start-up (imports) dominates
        signum: _start_train(tiny_path, run) for signum, (run, _) in runs.items()
    }
    for signum, (run, _code) in runs.items():
        proc, deadline = procs[signum], time.monotonic() + 180
        while time.monotonic() < deadline and not (
            (run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").stat().st_size > 0
        ):
            time.sleep(0.05)
        proc.send_signal(signum)
    for signum, (run, code) in runs.items():
        _, err = procs[signum].communicate(timeout=120)
        assert procs[signum].returncode == code, err
        last = err.strip().splitlines()[-1]
        checkpoint = latest_checkpoint(run)
        assert checkpoint is not None and str(checkpoint) in last
        assert "--resume" in last and f"train.output_dir={run}" in last and "Traceback" not in err
        assert not list(run.glob(".tmp-checkpoint-*"))
        steps = [r["step"] for r in read_jsonl(run / "metrics.jsonl")]
        assert checkpoint.name == f"checkpoint-{steps[-1]:06d}"  # the work up to the stop was saved


def test_a_stop_signal_during_start_up_stops_the_run_at_its_first_safe_point(tiny_path, tmp_path):
    """Issue 32: a preemption / scancel signal while the run is still loading (before the trainer's handlers)
    was lost (submitit's SIGTERM handler only logs it) and the run went on to its time limit. Kept by
    hadw.processes.request_stop, the trainer takes it and stops after its first step, with a checkpoint."""
    from hadw.processes import request_stop, take_pending_stop
    from hadw.train.trainer import Interrupted

    trainer = _trainer(tiny_path, tmp_path / "run", "train.steps=50", "checkpoint.every=0")
    request_stop(signal.SIGTERM)  # as SlurmRun's start-up SIGTERM handler does
    with pytest.raises(Interrupted, match="SIGTERM: stopped"):
        trainer.train()
    assert latest_checkpoint(tmp_path / "run").name == "checkpoint-000001"
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1]
    assert take_pending_stop() is None  # taken once: the next run in this process is not stopped by it


def test_a_closed_terminal_saves_the_finished_steps(tiny_path, tmp_path):
    """The terminal of `hadw train` closes (its ssh session ends): the kernel sends SIGHUP and every later write
    to the terminal fails (EIO). The run still checkpoints its finished steps and exits 129."""
    import fcntl
    import pty
    import termios

    run = tmp_path / "run"
    master, slave = pty.openpty()

    def own_terminal() -> None:  # a new session whose controlling terminal is the pty, like a login shell's
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    command = [sys.executable, "-m", "hadw.cli", "train", *_overrides(tiny_path, run, "train.steps=100000")]
    proc = subprocess.Popen(
        [*command, "logging.progress=true"],  # the progress bar writes to the terminal too
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT / "src")},
        stdin=slave,
        stdout=slave,
        stderr=slave,
        preexec_fn=own_terminal,
        pass_fds=(slave,),
    )
    os.close(slave)
    metrics, deadline = run / "metrics.jsonl", time.monotonic() + 180
    while not (metrics.is_file() and metrics.stat().st_size > 0):
        with contextlib.suppress(OSError):  # drain the terminal: a full pty would block the trainer's writes
            if select.select([master], [], [], 0.05)[0]:
                os.read(master, 65536)
        assert time.monotonic() < deadline and proc.poll() is None
    os.close(master)  # the terminal hangs up: SIGHUP to the trainer, EIO on its writes
    try:
        assert proc.wait(timeout=120) == 129
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    checkpoint = latest_checkpoint(run)
    steps = [r["step"] for r in read_jsonl(run / "metrics.jsonl")]
    assert checkpoint is not None and checkpoint.name == f"checkpoint-{steps[-1]:06d}"
    assert not list(run.glob(".tmp-checkpoint-*"))


def test_a_trainer_whose_folder_is_removed_or_taken_over_stops_in_one_line(tiny_path, tmp_path):
    """Issue 31, item 5: the run folder removed (or its lock replaced, as a second `hadw train` on a recreated
    folder would) while `hadw train` runs: it stops in one line, exit 2, and never recreates the folder."""
    import shutil

    runs = {"removed": tmp_path / "removed", "lock_replaced": tmp_path / "lock_replaced"}
    procs = {case: _start_train(tiny_path, run) for case, run in runs.items()}
    try:
        for case, run in runs.items():
            metrics, deadline = run / "metrics.jsonl", time.monotonic() + 180
            while not (metrics.is_file() and metrics.stat().st_size > 0):
                assert time.monotonic() < deadline and procs[case].poll() is None
                time.sleep(0.05)
            if case == "removed":
                shutil.rmtree(run)
            else:
                (run / ".lock").unlink()
                (run / ".lock").write_text("another process\n")
        for case, run in runs.items():
            _, err = procs[case].communicate(timeout=120)
            assert procs[case].returncode == 2, err
            lines = err.strip().splitlines()
            assert "was removed or replaced while this run trained; stopped" in lines[-1] and "Traceback" not in err
            if case == "removed":
                assert not run.exists()  # never recreated by a checkpoint
            else:
                assert (run / ".lock").read_text() == "another process\n"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_verifier_workers_die_with_their_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(REPO_ROOT / 'src')!r})\n"
        "from hadw.rewards.pool import VerifierPool\n"
        "from hadw.rewards.verifiers import math_item\n"
        "if __name__ == '__main__':\n"
        "    pool = VerifierPool(num_workers=1, warm_up=False)\n"
        "    import threading\n"
        "    threading.Thread(target=pool.map, args=(math_item, ['\\\\boxed{9^{9^{9^{9}}}}'], ['1'], 1000.0),"
        " daemon=True).start()\n"
        "    while not pool.workers or not pool.workers[0].ready: time.sleep(0.05)\n"
        "    print(pool.workers[0].process.pid, flush=True)\n"
        "    time.sleep(1000)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    time.sleep(1.0)  # the worker is busy on the tower of powers
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(worker):
        time.sleep(0.1)
    alive = _alive(worker)
    if alive:
        os.kill(worker, signal.SIGKILL)
    assert not alive


def test_a_killed_compare_stops_its_worker_runs(tmp_path):
    # `hadw compare --jobs 2` killed with SIGKILL once left both runs training on; now each worker gets the
    # SIGTERM the trainer turns into a safe stop (here a sleeping worker, which SIGTERM simply ends).
    script = tmp_path / "parent.py"
    script.write_text(
        "import os, time\n"
        "from hadw.experiments.compare import run_all\n"
        "def worker(spec):\n"
        "    os.write(1, f'{os.getpid()}\\n'.encode())  # one write: two workers' lines never interleave\n"
        "    time.sleep(1000)\n"
        "if __name__ == '__main__':\n"
        "    run_all([0, 1], jobs=2, worker=worker)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    workers = [int(parent.stdout.readline()) for _ in range(2)]
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(map(_alive, workers)):
        time.sleep(0.1)
    alive = [pid for pid in workers if _alive(pid)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive


def test_an_orphan_signals_itself():
    # The parent died before the child asked for the signal: nothing else would ever send it.
    code = "import signal, time\nfrom hadw.processes import die_with_parent\ndie_with_parent(1, signal.SIGTERM)\n"
    proc = subprocess.run([sys.executable, "-c", code + "time.sleep(30)"], timeout=60)
    assert proc.returncode == -signal.SIGTERM


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def _signal_after_row(run: Path, row: int, delay: float) -> threading.Thread:
    """A thread that waits for the metrics row of step `row`, sleeps `delay` and signals like `timeout` does:
    SIGTERM to this process and to its verifier workers (the rest of its process group)."""
    from hadw.rewards.pool import get_pool

    def send() -> None:
        deadline = time.monotonic() + 60
        metrics = run / "metrics.jsonl"
        while time.monotonic() < deadline and not (metrics.is_file() and metrics.read_bytes().count(b"\n") >= row):
            time.sleep(0.002)
        time.sleep(delay)
        os.kill(os.getpid(), signal.SIGTERM)
        for worker in list(get_pool().workers):
            with contextlib.suppress(OSError):
                os.kill(worker.process.pid, signal.SIGTERM)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_sigterm_at_random_moments_around_step_boundaries_always_leaves_a_checkpoint_that_loads(tiny_path, tmp_path):
    """Issue 39, finding 12: a SIGTERM from `timeout` (to the trainer and its process group) lost the checkpoint: the
    verifier workers died of it, and the trainer's next send to one raised BrokenPipeError, which the CLI's click
    turns into a silent exit 1. Trials at random moments after a random step (the next step, the final evaluation,
    the final checkpoint, the exit); each ends stopped with the last step's checkpoint, or done with the final one,
    and the checkpoint loads. benchmarks/faults/sigterm_stress.py does the same with real `hadw train` processes."""
    import random

    from hadw.train.checkpoint import load_checkpoint
    from hadw.train.trainer import Interrupted

    rng, late = random.Random(0), []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: late.append(signum))  # after the trainer's own
    try:
        for trial in range(24):
            run = tmp_path / f"run{trial}"
            trainer = _trainer(tiny_path, run, "train.steps=3", "checkpoint.every=0", "data.eval_size=2",
                               "reward.functions=[math]", "reward.correctness=math")  # fmt: skip
            sender = _signal_after_row(run, rng.randint(1, 3), rng.uniform(0.0, 0.05))  # in the next step or the end
            try:
                trainer.train()
                steps = 3  # done: the signal came during the final evaluation / checkpoint, or after
            except Interrupted:
                steps = len(read_jsonl(run / "metrics.jsonl"))
            sender.join(60)
            checkpoint = latest_checkpoint(run)
            assert checkpoint is not None and checkpoint.name == f"checkpoint-{steps:06d}", (trial, checkpoint)
            assert load_checkpoint(checkpoint, trainer.model, trainer.optimizer, trainer.scheduler)["step"] == steps
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_stop_handler_never_writes_through_sys_stderr(tiny_path, tmp_path, monkeypatch):
    """The handler may run inside a write to sys.stderr (a progress line): print there raises "reentrant call"
    from the handler, into the step, and the stop and its checkpoint were lost. It writes to fd 2 itself."""

    class MidWrite:
        def write(self, text: str) -> int:
            raise RuntimeError("reentrant call inside <_io.BufferedWriter name='<stderr>'>")

        def flush(self) -> None:
            pass

    trainer = _trainer(tiny_path, tmp_path / "run")
    previous = trainer._install_signal_handlers()
    try:
        monkeypatch.setattr(sys, "stderr", MidWrite())
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        assert trainer._stop_signal == signal.SIGTERM
    finally:
        monkeypatch.undo()
        trainer._restore_signal_handlers(previous)
        trainer._lock.release()


def test_a_verifier_worker_outlives_a_sigterm_to_its_process_group_and_a_dead_one_is_replaced():
    """Issue 39, finding 12: the workers ignore SIGTERM like SIGINT and SIGHUP (the trainer stops at a safe point and
    needs them until then); a worker found dead when an item is sent to it is replaced, the item not lost."""
    from hadw.rewards.pool import VerifierPool

    pool = VerifierPool(num_workers=1, warm_up=False)
    try:
        assert pool.map(exact_item, ["1"], ["1"], 30.0)[0].value == 1.0
        os.kill(pool.workers[0].process.pid, signal.SIGTERM)
        assert [o.value for o in pool.map(exact_item, ["1", "2"], ["1", "2"], 30.0)] == [1.0, 1.0]
        pool.workers[0].process.kill()  # dead before the next item is sent: the send breaks the pipe
        pool.workers[0].process.join()
        assert [o.value for o in pool.map(exact_item, ["1"], ["1"], 30.0)] == [1.0]
    finally:
        pool.close()


# ---------------------------------------------------------------------------------------- 6. rewards
def _hang(completion: str, answer: str) -> float:
    if completion == "hang":
        time.sleep(30)
    return 1.0


def test_a_hanging_in_process_reward_is_cut_off():
    fn = RewardFunction("test_hang_in_process", _hang, isolated=False)
    start = time.monotonic()
    result = run_reward(fn, ["a", "hang", "b"], ["1", "1", "1"], timeout_s=0.5)
    assert time.monotonic() - start < 5
    assert result.scores == [1.0, 0.0, 1.0] and result.num_timeouts == 1


class _Batch:
    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def __call__(self, completions, answers):
        return self.fn(completions, answers)


def test_a_hanging_batch_reward_is_cut_off():
    def hangs_on_bad(completions, answers):
        if "hang" in completions:
            time.sleep(30)
        return [1.0] * len(completions)

    start = time.monotonic()
    result = run_reward(_Batch("hangs", hangs_on_bad), ["a", "hang"], ["1", "1"], timeout_s=0.3)
    assert time.monotonic() - start < 5
    assert result.scores == [1.0, 0.0] and result.num_timeouts == 1


def test_nan_scores_and_wrong_lengths_are_item_errors_not_broadcast():
    nan = run_reward(_Batch("nan", lambda c, a: [1.0, math.nan, math.inf]), ["a", "b", "c"], ["1"] * 3)
    assert nan.scores == [1.0, 0.0, 0.0] and nan.num_errors == 2
    one = run_reward(_Batch("one", lambda c, a: [1.0]), ["a", "b", "c"], ["1"] * 3)
    assert one.scores == [0.0, 0.0, 0.0] and one.num_errors == 3 and "returned 1 scores for 3" in one.messages[0]
    item = run_reward(RewardFunction("nan_item", lambda c, a: math.nan), ["a"], ["1"])
    assert item.scores == [0.0] and item.num_errors == 1


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout_s"):
        run_reward(RewardFunction("x", lambda c, a: 1.0), ["a"], ["1"], timeout_s=0)


# ---------------------------------------------------------------------------------------- 7. limits
def test_a_huge_row_is_skipped_and_counted(tiny_path, tmp_path, capfd):
    data = tmp_path / "data.jsonl"
    rows = [{"problem": f"{i}+1", "answer": str(i + 1)} for i in range(6)]
    rows.insert(3, {"problem": "9" * 2_000_000, "answer": "1"})  # 2 MB: one row far beyond any context
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trainer = _trainer(
        tiny_path, tmp_path / "run", f"data.source={data}", "data.max_prompt_tokens=64", "data.template=plain"
    )  # bare "5+1=" prompts: only the 2 MB row is over 64 tokens
    assert trainer.source.num_skipped == 1
    assert all(len(p.question) < 100 for p in trainer.source.problems + trainer.source.eval_problems())
    assert "skipped 1 rows" in capfd.readouterr().err
    trainer.train()
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps and all(r["data/skipped_prompts"] == 1 for r in steps)  # counted in the metrics too


def test_eval_size_zero_and_tiny_files_train_to_the_end(tiny_path, tmp_path):
    from typer.testing import CliRunner

    from hadw.cli import build_app

    app, runner = build_app(), CliRunner()
    result = runner.invoke(app, ["train", *_overrides(tiny_path, tmp_path / "a", "data.eval_size=0")])
    assert result.exit_code == 0, result.output
    assert "no evaluation prompts" in result.output
    data = tmp_path / "two.jsonl"
    data.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": "4"}\n')
    args = _overrides(tiny_path, tmp_path / "b", f"data.source={data}", "data.eval_size=50")
    result = runner.invoke(app, ["train", *args])
    assert result.exit_code == 0, result.output  # 2 rows: none can be held out, training still runs
    assert (tmp_path / "b" / "final_model" / "config.json").is_file()


# ---------------------------------------------------------------------------------------- 9. verifiers
@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("\\boxed{1=2}", "2", 0.0),
        ("\\boxed{x+1=2}", "2", 0.0),
        ("\\boxed{x=2}", "2", 1.0),
        ("\\boxed{\\theta = 2}", "2", 1.0),
        ("\\boxed{y=2x+1}", "y=2x+1", 1.0),
        ("\\boxed{٨٥}", "85", 1.0),
        ("\\boxed{８５}", "85", 1.0),
    ],
)
def test_math_equation_rule_and_unicode_digits(completion, gold, expected):
    assert math_item(completion, gold) == expected


def test_exact_compares_integers_exactly():
    assert exact_item("12345678901234567891", "12345678901234567890") == 0.0
    assert exact_item("12345678901234567890", "12345678901234567890") == 1.0
    big = "7" * 400
    assert exact_item(big, big) == 1.0 and exact_item(big + "0", big) == 0.0
    assert exact_item("٨٥", "85") == exact_item("\\boxed{٨٥}", "85") == 1.0


def test_a_run_started_by_another_command_is_resumed_from_its_saved_config(tiny_path, tmp_path, monkeypatch):
    """A demo or compare arm stopped by a signal once suggested `hadw demo ... --resume`, an option demo lacks."""
    from typer.testing import CliRunner

    from hadw.cli import build_app

    run = tmp_path / "run"
    trainer = _trainer(tiny_path, run, "train.steps=2", "checkpoint.every=1")
    trainer.train()
    monkeypatch.setattr(sys, "argv", ["/usr/bin/hadw", "demo", "--out-dir", str(tmp_path)])
    message = str(trainer._interrupted(signal.SIGTERM))
    command = message.split("resume with: ")[1]
    assert command == f"hadw train {run / 'config.yaml'} --resume"
    result = CliRunner().invoke(build_app(), [*command.split()[1:], "train.steps=3"])  # it runs as printed
    assert result.exit_code == 0, result.output
    assert latest_checkpoint(run).name == "checkpoint-000003"
