"""One run per folder, one process per run.

`claim_run_dir` is called before anything is written to `train.output_dir`:
- it takes an OS lock (fcntl.flock on <run_dir>/.lock, released by the kernel on any exit, kill -9
  included), so a second process on the same folder fails with "in use by pid N";
- without --resume, a folder that already holds a run (metrics rows, a checkpoint, `latest`, a final
  model) is refused, naming the two ways out; with overwrite=True the old run is moved aside to
  <run_dir>.old-<n>/ first, never deleted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from pathlib import Path

import yaml

from hadw.errors import UserError

# The names a run writes and which files are a run's own live in hadw.metrics (floor 0: `hadw eval` reads them too).
from hadw.metrics import LOCK_FILE, RUN_ENTRIES, RUN_PATTERNS, WRITTEN_NAMES, is_run_file  # noqa: F401
from hadw.safe_files import NAME_MAX, not_writable, open_nofollow, refuse_link


class RunDirError(UserError):
    """The run folder cannot be used as asked (holds another run, is locked, has no checkpoint)."""


class FolderLock:
    """An exclusive flock on <folder>/<name> holding this process's pid and host: one process owns the folder.
    The kernel drops it on any exit (kill -9 included); `release()` is idempotent. The one home of hadw's locks:
    a run folder's (RunLock) and a `hadw compare` sweep folder's (hadw.experiments.compare.lock_sweep).

    label names the folder as the user gave it ("train.output_dir=runs/a", "--out runs/cmp"); command is what
    holds such a lock ("hadw train"), option what to change instead of waiting."""

    def __init__(self, folder: Path, name: str, label: str, command: str, option: str):
        import fcntl

        self.path = folder / name
        # O_NOFOLLOW: a link planted at the lock is refused, never opened (its target would be truncated).
        # O_CLOEXEC (open_nofollow): a process started from here (a Ray node, a scheduler) never inherits the lock.
        self._file = os.fdopen(open_nofollow(self.path, os.O_RDWR | os.O_CREAT), "r+", encoding="utf-8")
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = _holder(self._file.read())
            self._file.close()
            raise RunDirError(
                f"{label} is in use by {holder} (another {command} holds {self.path}); wait for it or choose "
                f"another {option}"
            ) from None
        self._file.seek(0)
        self._file.truncate()
        # the host too: on storage several machines share (a cluster's), a pid alone does not say where to look
        self._file.write(f"{os.getpid()} {socket.gethostname()}\n")
        self._file.flush()

    def release(self) -> None:
        if not self._file.closed:
            self._file.close()  # closing the descriptor drops the flock

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()


def _holder(text: str) -> str:
    """ "pid 123 on host h1" from a lock file's "123 h1" ("pid 123" from a version that wrote the pid alone)."""
    pid, _, host = text.strip().partition(" ")
    return f"pid {pid or '?'}" + (f" on host {host.strip()}" if host.strip() else "")


class RunLock(FolderLock):
    """A run folder's lock, <run_dir>/.lock: one `hadw train` per run folder."""

    def __init__(self, run_dir: Path):
        super().__init__(run_dir, LOCK_FILE, f"train.output_dir={run_dir}", "hadw train", "train.output_dir")

    def check(self) -> None:
        """RunDirError when the run folder or this lock is gone (removed, moved, its .lock replaced): whatever the
        run writes next would go to a deleted file or a folder another process may now own."""
        try:
            held, there = os.fstat(self._file.fileno()), os.stat(self.path, follow_symlinks=False)
        except (OSError, ValueError):  # the folder is gone (or the lock was released)
            held = there = None
        if held is None or there is None or (held.st_dev, held.st_ino) != (there.st_dev, there.st_ino):
            raise RunDirError(
                f"train.output_dir={self.path.parent}: the run folder or its {LOCK_FILE} was removed or replaced "
                "while this run trained; stopped (nothing more is written there; another hadw train may own it now)"
            )


def run_entries(run_dir: Path) -> list[Path]:
    """The entries of run_dir a run wrote (sorted)."""
    found = [run_dir / name for name in RUN_ENTRIES if (run_dir / name).exists()]
    for pattern in RUN_PATTERNS:
        found += run_dir.glob(pattern)
    return sorted(set(found))


def holds_run(run_dir: Path) -> bool:
    """True when a run has produced results here: a metrics row, a checkpoint, `latest`, or a final model.
    (A config.yaml or init_model alone, from a run stopped before its first step, holds nothing to lose.)"""
    metrics = run_dir / "metrics.jsonl"
    has_rows = metrics.is_file() and metrics.stat().st_size > 0
    return has_rows or any(
        p.name in ("latest", "final_model") or p.name.startswith("checkpoint-") for p in run_entries(run_dir)
    )


def _name_bytes(path: Path) -> int:
    return len(path.name.encode("utf-8", "surrogateescape"))


def move_aside(run_dir: Path) -> Path:
    """Move the run's entries into a new sibling folder <run_dir>.old-<n>; return it. RunDirError, with nothing
    moved, when that name is longer than the file system allows (a run folder named with 250 bytes)."""
    n = 1
    aside = run_dir.with_name(f"{run_dir.name}.old-{n}")
    while _name_bytes(aside) <= NAME_MAX and aside.exists():  # the length first: exists() fails on a long name
        n += 1
        aside = run_dir.with_name(f"{run_dir.name}.old-{n}")
    if _name_bytes(aside) > NAME_MAX:
        raise RunDirError(
            f"train.output_dir={run_dir}: --overwrite would move the old run to {aside.name!r}, longer than the "
            f"file system's {NAME_MAX} bytes per name; move the old run yourself, or choose a train.output_dir name "
            f"of at most {NAME_MAX - (_name_bytes(aside) - _name_bytes(run_dir))} bytes"
        )
    aside.mkdir(parents=True)
    for entry in run_entries(run_dir):
        shutil.move(str(entry), str(aside / entry.name))
    return aside


def check_flags(resume: bool, overwrite: bool) -> None:
    if resume and overwrite:
        raise RunDirError("--resume and --overwrite contradict each other; pass one of them")


def claim_run_dir(run_dir: Path, resume: bool, overwrite: bool = False) -> tuple[RunLock, Path | None]:
    """Create and lock run_dir; refuse to reuse a run without resume / overwrite. Returns (lock, the
    folder the old run was moved to or None)."""
    check_flags(resume, overwrite)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunDirError(f"train.output_dir={run_dir}: cannot create it: {err.strerror}") from None
    why = not_writable(run_dir)
    if why is not None:  # a read-only results folder (an archive, a read-only mount) can be read, not trained in
        todo = "copy the run to a writable folder to resume it" if resume else "choose a writable train.output_dir"
        raise RunDirError(
            f"train.output_dir={run_dir}: cannot write there ({why}); hadw train writes its checkpoints and logs in "
            f"it; {todo} (hadw eval and hadw plot read a run in a read-only folder)"
        )
    for name in WRITTEN_NAMES:
        refuse_link(run_dir / name)
    for pattern in RUN_PATTERNS:
        for path in run_dir.glob(pattern):
            if path.name.startswith("checkpoint-"):
                refuse_link(path)
    lock = RunLock(run_dir)
    aside = None
    if not resume and holds_run(run_dir):
        if not overwrite:
            lock.release()
            raise RunDirError(
                f"train.output_dir={run_dir} already holds a run; continue it with --resume, or choose a new "
                "train.output_dir, or pass --overwrite to move the old run aside"
            )
        try:
            aside = move_aside(run_dir)
        except BaseException:
            lock.release()
            raise
    return lock, aside


def check_resume_target(output_dir: str, config_file: Path | None, run_config: bool, typed: bool) -> Path:
    """--resume, before any reward is imported or anything written: the folder it trains (returned). RunDirError
    when a run's own config.yaml (run_config) points train.output_dir at another folder, unless train.output_dir was
    given on the command line (then that folder is named on stderr first): a resume of RUN/config.yaml trained and
    pruned `../other`. RunDirError too when that folder holds no run: a received folder with only a config and a
    module must fail here, before the module could be imported (Trainer._resume makes the same check later)."""
    import sys

    target = Path(output_dir).absolute()
    if run_config and config_file is not None:
        own = config_file.absolute().parent
        if target.resolve() != own.resolve():
            if not typed:
                raise RunDirError(
                    f"--resume: {config_file} is the config of the run in {own}, but its train.output_dir="
                    f"{output_dir!r} is another folder ({target}); a resume trains the run its config is in: set "
                    "train.output_dir: . in it, or give train.output_dir=FOLDER on the command line to train another"
                )
            print(
                f"--resume: training train.output_dir={target} (given on the command line), not {own}, the run "
                f"{config_file} belongs to",
                file=sys.stderr,
            )
    if not holds_run(target):
        raise RunDirError(
            f"--resume: no checkpoint in train.output_dir={target} (no {target}/latest); run without --resume to "
            "start it"
        )
    return target


# Settings a resumed run may change freely: they do not alter what is learned from the saved state
# (length of the run, logging, checkpoint cadence, evaluation, threads, where files are).
RESUME_FREE_KEYS = (
    "train.steps",
    "train.output_dir",
    "train.num_threads",
    "train.eval_every",
    "train.eval_greedy",
    "data.eval_size",
    "data.eval_samples",
    "data.eval_source",
    "data.data_dir",
    "model.device",
    "rollout.max_batch_size",
    "rollout.memory_budget_gb",
    "rollout.decoder",
    "reward.timeout_s",
    "reward.max_failed_steps",
)
RESUME_FREE_SECTIONS = ("logging.", "checkpoint.")


def _flatten(tree: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_differences(saved: dict, new: dict, defaults: dict | None = None) -> list[str]:
    """'key: saved -> new' for every setting that differs between a saved run's config and the new one,
    except those a resume may change freely (RESUME_FREE_KEYS / _SECTIONS).

    defaults: the current Config's defaults. A key the saved run did not have yet (added by a later version)
    counts as a difference only when the new value is not its default: the old run ran with that behaviour."""
    a, b = _flatten(saved), _flatten(new)
    for key, value in _flatten(defaults or {}).items():
        if key not in a and b.get(key) == value:
            a[key] = value
    # model.tiny.* builds and warm-starts the model only when model.path is empty: inert for a run from a checkpoint
    tiny_inert = bool(a.get("model.path")) and bool(b.get("model.path"))
    diffs = []
    for key in sorted(set(a) | set(b)):
        if key in RESUME_FREE_KEYS or key.startswith(RESUME_FREE_SECTIONS):
            continue
        if tiny_inert and key.startswith("model.tiny."):
            continue
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            diffs.append(f"{key}: {a.get(key, '<unset>')!r} -> {b.get(key, '<unset>')!r}")
    return diffs


# The settings that decide which parameters a run trains. A checkpoint's weights and optimiser state are those
# parameters', so --accept-changes cannot apply a change of them (turning LoRA on failed as a damaged checkpoint).
TRAINED_PARAMETER_KEYS = ("model.lora.enabled", "model.lora.rank", "model.lora.target_modules")


def check_trained_parameters_kept(diffs: list[str], checkpoint: Path) -> None:
    """RunDirError naming the change when `diffs` (config_differences) change which parameters the run trains."""
    changed = [d for d in diffs if d.split(":", 1)[0] in TRAINED_PARAMETER_KEYS]
    if changed:
        raise RunDirError(
            f"--resume --accept-changes: {'; '.join(changed)} changes which parameters the run trains, and "
            f"{checkpoint} holds the weights and optimiser state of the ones it trained; a resume cannot apply it. "
            f"Start a new run from its weights instead: model.path={checkpoint / 'model'} and a new train.output_dir"
        )


def saved_config(run_dir: Path) -> dict:
    """The config.yaml a run wrote in run_dir, as a mapping ({} when there is none); a file that is not
    the YAML mapping a run writes (damaged, an alias bomb, a list) is a RunDirError."""
    from hadw.train.config_schema import ConfigError
    from hadw.train.config_yaml import parse_yaml

    path = run_dir / "config.yaml"
    if not path.is_file() or path.is_symlink():
        return {}
    try:
        data = parse_yaml(path.read_bytes()[: 1 << 20].decode("utf-8"), str(path))
    except (UnicodeDecodeError, ConfigError, yaml.YAMLError) as err:
        problem = f"not the YAML a run writes ({type(err).__name__})"
        raise RunDirError(f"{path}: {problem}; restore it or remove it") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: holds a {type(data).__name__}, not the mapping a run writes; restore or remove it")
    return data
