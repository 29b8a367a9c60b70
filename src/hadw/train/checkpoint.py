"""Atomic checkpoints that resume a run bit-for-bit on CPU.

checkpoint-000040/
    model/               save_pretrained (weights, config, tokenizer): loadable on its own; with LoRA the
                         adapter alone (adapter_config.json naming the base, adapter_model.safetensors)
    trainer_state.pt     optimiser, scheduler, RNG states (python, numpy, torch): tensors, numbers,
                         lists and dicts only, loaded with torch.load(weights_only=True), so a crafted
                         file cannot run code on --resume
    state.json           step, data position, anchor state, config
The folder is written under a temporary name, every file and the folder are fsynced, it is renamed into
place (and the parent fsynced), and `latest` (a one-line file) is replaced atomically after that, so a
crash or power loss mid-write never leaves a half checkpoint as the latest.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hadw.errors import UserError
from hadw.rollout.lora import write_base_record
from hadw.safe_files import atomic_write_text, refuse_link

LATEST = "latest"
CHECKPOINT_NAME = re.compile(r"checkpoint-\d{6,}")  # the only names `latest` may hold
CHECKPOINT_FILES = ("state.json", "trainer_state.pt")  # with model/: what a complete checkpoint holds


class CheckpointError(UserError):
    """A checkpoint that cannot be loaded (missing, tampered with, or written by an older version)."""


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a directory's fsync makes the names in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and folder under root, then root itself."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fsync_path(Path(dirpath) / name)
        fsync_path(Path(dirpath))


def replace_dir(tmp: Path, final: Path) -> None:
    """Durably move a fully written folder `tmp` to `final` (replacing it): fsync, rename, fsync parent."""
    fsync_tree(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_path(final.parent)


def rng_state() -> dict[str, Any]:
    """The RNG states as plain types and tensors (what torch.load(weights_only=True) accepts)."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, torch.tensor(internal, dtype=torch.int64), gauss],
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(int(x) for x in internal.tolist()), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])


def save_checkpoint(
    run_dir: Path,
    step: int,
    model,
    tokenizer,
    optimizer: torch.optim.Optimizer,
    scheduler,
    state: dict[str, Any],
    keep_last: int = 2,
) -> Path:
    """Write checkpoint-<step> atomically and point `latest` at it. `state` must be JSON-able."""
    run_dir.mkdir(parents=True, exist_ok=True)
    final = run_dir / f"checkpoint-{step:06d}"
    tmp = run_dir / f".tmp-checkpoint-{step:06d}"
    refuse_link(final)
    if tmp.is_symlink():  # a planted link: remove the link itself, never write into its target
        tmp.unlink()
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    model.save_pretrained(tmp / "model")
    tokenizer.save_pretrained(tmp / "model")
    write_base_record(model, tmp / "model")  # a LoRA adapter: the base it was trained on
    trainer_state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state()}
    torch.save(trainer_state, tmp / "trainer_state.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=1), encoding="utf-8")
    replace_dir(tmp, final)
    atomic_write_text(run_dir / LATEST, final.name + "\n")
    fsync_path(run_dir)
    _prune(run_dir, keep_last, final)
    return final


def _prune(run_dir: Path, keep_last: int, current: Path) -> None:
    """Keep the `keep_last` (>= 1) checkpoints up to and including `current`; never delete `current`, a
    link, or anything not named checkpoint-NNNNNN."""
    checkpoints = [p for p in checkpoint_dirs(run_dir) if p != current]
    older = [p for p in checkpoints if _step_of(p) < _step_of(current)]
    for old in older[: max(len(older) - (max(keep_last, 1) - 1), 0)]:
        shutil.rmtree(old, ignore_errors=True)


def _step_of(path: Path) -> int:
    return int(path.name.split("-", 1)[1])


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """The folders named checkpoint-NNNNNN directly in run_dir (links excluded), oldest step first."""
    found = [p for p in run_dir.glob("checkpoint-*") if CHECKPOINT_NAME.fullmatch(p.name) and not p.is_symlink()]
    return sorted((p for p in found if p.is_dir()), key=_step_of)


def is_complete(path: Path) -> bool:
    """True when a checkpoint folder holds everything a resume reads (a killed write leaves none of these
    under the final name, but a hand-made or damaged folder may)."""
    return (
        all((path / name).is_file() and not (path / name).is_symlink() for name in CHECKPOINT_FILES)
        and (path / "model").is_dir()
    )


def read_latest(run_dir: Path) -> Path:
    """The checkpoint `latest` names; CheckpointError saying what is wrong with it otherwise. `latest` must
    be a regular file holding one name checkpoint-NNNNNN of a complete folder directly inside run_dir: an
    absolute path, ../, a link or anything else is refused, so a resume never loads from outside the run."""
    pointer = run_dir / LATEST
    if pointer.is_symlink():
        raise CheckpointError(f"{pointer} is a symbolic link; it must be a file naming a checkpoint-NNNNNN folder")
    if not pointer.exists():
        raise CheckpointError(f"{pointer} is missing")
    if not pointer.is_file():
        raise CheckpointError(f"{pointer} is not a regular file")
    try:
        name = pointer.read_bytes()[:256].decode("utf-8").strip()
    except OSError as err:  # named: a resume falls back to the newest complete checkpoint, saying why
        raise unreadable(pointer, err) from None
    except UnicodeDecodeError:
        raise CheckpointError(f"{pointer} is not UTF-8 text; it must hold a name checkpoint-NNNNNN") from None
    if not CHECKPOINT_NAME.fullmatch(name):
        shown = name if len(name) <= 60 else name[:60] + "..."
        raise CheckpointError(f"{pointer} holds {shown!r}; allowed: a name checkpoint-NNNNNN in {run_dir}")
    path = run_dir / name
    if path.is_symlink() or not path.is_dir():
        raise CheckpointError(f"{pointer} names {name}, which is {'a link' if path.is_symlink() else 'missing'}")
    if not is_complete(path):
        missing = [n for n in (*CHECKPOINT_FILES, "model") if not (path / n).exists()]
        absent = ", ".join(missing) or "usable files"
        raise CheckpointError(f"{pointer} names {name}, which is incomplete (no {absent})")
    return path


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint `latest` names, or None when there is none usable (see read_latest for why)."""
    try:
        return read_latest(run_dir)
    except CheckpointError:
        return None


def resume_checkpoint(run_dir: Path, warn=None) -> Path | None:
    """The checkpoint --resume continues from: the one `latest` names; when `latest` is unusable (missing,
    empty, dangling, garbage), the newest complete checkpoint-NNNNNN folder, with a warning via `warn`;
    None when the folder holds no checkpoint folder at all. Checkpoint folders that exist but are all
    incomplete are a CheckpointError: a resume never silently starts over beside them."""
    try:
        return read_latest(run_dir)
    except CheckpointError as err:
        reason = str(err)
    found = checkpoint_dirs(run_dir)
    complete = [p for p in found if is_complete(p)]
    if complete:
        if warn is not None:
            warn(f"--resume: {reason}; resuming from the newest complete checkpoint {complete[-1]}")
        return complete[-1]
    if found:
        raise CheckpointError(
            f"--resume: {reason}, and no checkpoint folder in {run_dir} is complete "
            f"({', '.join(p.name for p in found)}); move them aside to start over, or restore one"
        )
    if (run_dir / LATEST).exists() or (run_dir / LATEST).is_symlink():
        raise CheckpointError(f"--resume: {reason}, and {run_dir} holds no checkpoint folder")
    return None


# ------------------------------------------------------------------------------------ loading, checked
def _fail(where: Path, field: str, problem: str) -> CheckpointError:
    return CheckpointError(
        f"{where}: {field} {problem}; resume from another checkpoint (edit {where.parent.parent / LATEST}) "
        "or start a new train.output_dir"
    )


def unreadable(path: Path | str, err: OSError) -> CheckpointError:
    """One line for a file of a run that cannot be read (permission denied, an I/O error of failing storage)."""
    why = err.strerror or os.strerror(err.errno or 0) or type(err).__name__
    return CheckpointError(
        f"{path}: cannot be read ({why}); fix its permissions or restore it, or resume from another checkpoint "
        "(edit latest) or start a new train.output_dir"
    )


def check_readable(folder: Path) -> None:
    """Open every file of a checkpoint folder and read its first byte, before any is loaded: a file this process
    may not read, or one on storage that fails, is one line naming it (torch.load and safetensors would report
    it as a damaged file, or as a traceback)."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                os.read(fd, 1)
            finally:
                os.close(fd)
        except OSError as err:
            raise unreadable(path, err) from None


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def read_state_json(path: Path) -> dict[str, Any]:
    """state.json of a checkpoint folder, with its fields checked (step and data_position non-negative
    integers, the step that of the folder's name, anchor and config mappings)."""
    where = path / "state.json"
    try:
        data = where.read_bytes()
    except OSError as err:
        raise unreadable(where, err) from None
    try:
        state = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise _fail(where, "the file", f"is not JSON ({type(err).__name__})") from None
    if not isinstance(state, dict):
        raise _fail(where, "the file", f"holds a {type(state).__name__}, not an object")
    for key in ("step", "data_position"):
        if not _is_int(state.get(key)) or state[key] < 0:
            raise _fail(where, f"field {key!r}", f"is {state.get(key)!r}; allowed: an integer >= 0")
    if CHECKPOINT_NAME.fullmatch(path.name) and state["step"] != _step_of(path):
        raise _fail(where, "field 'step'", f"is {state['step']} but the folder is {path.name}")
    for key in ("anchor", "config"):
        if not isinstance(state.get(key), dict):
            raise _fail(where, f"field {key!r}", f"is {type(state.get(key)).__name__}; allowed: an object")
    return state


def check_trainer_state(trainer_state: Any, optimizer: torch.optim.Optimizer, scheduler, where: Path) -> None:
    """Refuse a trainer_state.pt that does not fit this run before any of it is used: every optimiser state
    tensor must have its parameter's shape and be floating point (a wrong shape would let a fused AdamW step
    write out of bounds), the scheduler and RNG states their types. CheckpointError names the field."""
    if not isinstance(trainer_state, dict) or not {"optimizer", "scheduler", "rng"} <= set(trainer_state):
        raise _fail(where, "the file", "lacks one of 'optimizer', 'scheduler', 'rng'")
    opt = trainer_state["optimizer"]
    if (
        not isinstance(opt, dict)
        or not isinstance(opt.get("state"), dict)
        or not isinstance(opt.get("param_groups"), list)
    ):
        raise _fail(where, "optimizer", "is not an optimiser state (state, param_groups)")
    groups = optimizer.param_groups
    if len(opt["param_groups"]) != len(groups):
        raise _fail(where, "optimizer.param_groups", f"has {len(opt['param_groups'])} groups, the run {len(groups)}")
    params: dict[Any, torch.Tensor] = {}
    for g, (saved, group) in enumerate(zip(opt["param_groups"], groups, strict=True)):
        ids = saved.get("params") if isinstance(saved, dict) else None
        if not isinstance(ids, list) or len(ids) != len(group["params"]):
            raise _fail(where, f"optimizer.param_groups[{g}].params", f"does not list the run's {len(group['params'])}")
        for key in ("lr", "eps", "weight_decay"):
            if key in saved and not _is_number(saved[key]):
                raise _fail(where, f"optimizer.param_groups[{g}].{key}", f"is {saved[key]!r}; allowed: a finite number")
        betas = saved.get("betas", (0.9, 0.999))
        if not isinstance(betas, list | tuple) or len(betas) != 2 or not all(_is_number(b) for b in betas):
            raise _fail(where, f"optimizer.param_groups[{g}].betas", f"is {betas!r}; allowed: two numbers")
        params |= dict(zip(ids, group["params"], strict=True))
    for pid, entry in opt["state"].items():
        if pid not in params:
            raise _fail(where, f"optimizer.state[{pid!r}]", "belongs to no parameter of the run")
        if not isinstance(entry, dict):
            raise _fail(where, f"optimizer.state[{pid!r}]", f"is a {type(entry).__name__}, not a mapping")
        param = params[pid]
        for key, value in entry.items():
            field = f"optimizer.state[{pid}].{key}"
            if key == "step":
                ok = _is_number(value) or (isinstance(value, torch.Tensor) and value.numel() == 1)
                if not ok or float(value) < 0 or not math.isfinite(float(value)):
                    raise _fail(where, field, f"is {value!r}; allowed: one number >= 0")
                continue
            if not isinstance(value, torch.Tensor):
                raise _fail(where, field, f"is a {type(value).__name__}; allowed: a tensor")
            if tuple(value.shape) != tuple(param.shape):
                raise _fail(where, field, f"has shape {list(value.shape)}, its parameter {list(param.shape)}")
            if not value.is_floating_point():
                raise _fail(where, field, f"has dtype {value.dtype}; allowed: a floating-point dtype")
    sched = trainer_state["scheduler"]
    if not isinstance(sched, dict) or not _is_int(sched.get("last_epoch")) or sched["last_epoch"] < -1:
        raise _fail(where, "scheduler.last_epoch", "is missing or not an integer >= -1")
    for key in ("base_lrs", "_last_lr"):
        value = sched.get(key, [])
        if not isinstance(value, list) or len(value) not in (0, len(groups)) or not all(map(_is_number, value)):
            raise _fail(where, f"scheduler.{key}", f"is {value!r}; allowed: one number per parameter group")
    _check_rng(trainer_state["rng"], where)


def _check_rng(rng: Any, where: Path) -> None:
    """The RNG states rng_state() writes: python [version, int64[625], gauss], numpy [name, int64[624], pos,
    has_gauss, cached], torch uint8[...] of this torch's size."""
    if not isinstance(rng, dict) or not {"python", "numpy", "torch"} <= set(rng):
        raise _fail(where, "rng", "lacks one of 'python', 'numpy', 'torch'")
    py = rng["python"]
    if not (
        isinstance(py, list | tuple)
        and len(py) == 3
        and _is_int(py[0])
        and isinstance(py[1], torch.Tensor)
        and py[1].dtype == torch.int64
        and tuple(py[1].shape) == (625,)
        and (py[2] is None or _is_number(py[2]))
        and bool(((py[1][:624] >= 0) & (py[1][:624] < 1 << 32)).all())
        and 0 <= int(py[1][624]) <= 624
    ):
        raise _fail(where, "rng.python", "is not a Python random state (version, 625 integers, gauss)")
    npy = rng["numpy"]
    if not (
        isinstance(npy, list | tuple)
        and len(npy) == 5
        and npy[0] == "MT19937"
        and isinstance(npy[1], torch.Tensor)
        and npy[1].dtype == torch.int64
        and tuple(npy[1].shape) == (624,)
        and bool(((npy[1] >= 0) & (npy[1] < 1 << 32)).all())
        and _is_int(npy[2])
        and 0 <= npy[2] <= 624
        and _is_int(npy[3])
        and _is_number(npy[4])
    ):
        raise _fail(where, "rng.numpy", "is not a numpy MT19937 state (name, 624 integers, pos, has_gauss, cached)")
    t = rng["torch"]
    expected = torch.get_rng_state()
    if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or t.shape != expected.shape:
        raise _fail(where, "rng.torch", f"is not a torch RNG state (uint8 tensor of shape {list(expected.shape)})")


def load_model_weights(model, model_dir: Path) -> None:
    """Load saved weights into an existing model in place (so the optimiser keeps its parameters). A damaged
    or mismatched file is a CheckpointError naming it."""
    from safetensors.torch import load_file

    from hadw.rollout.lora import ADAPTER_CONFIG, is_lora

    if (model_dir / ADAPTER_CONFIG).is_file() or is_lora(model):
        _load_adapter(model, model_dir)
        return
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():  # sharded: the index maps each tensor to its shard file
        try:
            shards = sorted(set(json.loads(index.read_bytes().decode("utf-8"))["weight_map"].values()))
        except Exception as err:
            raise _fail(index, "weight_map", f"cannot be read ({type(err).__name__})") from None
        if not all(isinstance(s, str) and s == Path(s).name and not s.startswith(".") for s in shards):
            raise _fail(index, "weight_map", "names a shard outside the model folder")
    else:
        shards = ["model.safetensors"]
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        if not (model_dir / shard).is_file():
            raise _fail(model_dir / shard, "the file", "is missing")
        try:
            state.update(load_file(model_dir / shard))
        except Exception as err:
            problem = f"is not a readable safetensors file ({_first_line(err)})"
            raise _fail(model_dir / shard, "the file", problem) from None
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as err:  # a tensor of another shape
        raise _fail(model_dir, "the weights", f"do not match the model ({_first_line(err)})") from None
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    really_missing = [k for k in missing if k not in tied and not k.endswith("lm_head.weight")]
    if really_missing or unexpected:
        problem = f"do not match the model: missing {really_missing[:5]}, unexpected {list(unexpected)[:5]}"
        raise _fail(model_dir, "the weights", problem)


def _load_adapter(model, model_dir: Path) -> None:
    """A LoRA checkpoint's adapter weights into the training model's adapters, in place; refused when the base now
    at model.path is not the one the adapter was trained on."""
    from hadw.rollout.lora import ADAPTER_WEIGHTS, adapter_state, check_base, is_lora, load_adapter_weights

    if is_lora(model):
        try:
            check_base(model_dir, model.peft_config["default"].base_model_name_or_path)
        except ValueError as err:
            raise CheckpointError(str(err)) from None

    if not is_lora(model) or not (model_dir / ADAPTER_WEIGHTS).is_file():
        saved = "a LoRA adapter" if (model_dir / ADAPTER_WEIGHTS).is_file() else "no LoRA adapter"
        training = "LoRA adapters" if is_lora(model) else "every weight (no LoRA)"
        raise _fail(model_dir, "the weights", f"hold {saved} but this run trains {training} (model.lora.enabled)")
    try:
        state = adapter_state(model_dir)
    except Exception as err:
        problem = f"is not a readable safetensors file ({_first_line(err)})"
        raise _fail(model_dir / ADAPTER_WEIGHTS, "the file", problem) from None
    try:
        missing, unexpected = load_adapter_weights(model, state)
    except RuntimeError as err:  # a tensor of another shape (another rank)
        raise _fail(model_dir, "the adapter", f"does not match the model ({_first_line(err)})") from None
    if missing or unexpected:
        problem = f"does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        raise _fail(model_dir, "the adapter", problem)


def _first_line(err: BaseException) -> str:
    text = " ".join(str(err).strip().splitlines()[:1]).strip()
    return (text or type(err).__name__)[:200]


def load_checkpoint(path: Path, model, optimizer, scheduler) -> dict[str, Any]:
    """Restore model, optimiser, scheduler and RNG states in place; return state.json's contents. Everything is
    read and checked (state.json's fields, every optimiser tensor against its parameter, the scheduler and
    RNG states) before any of it is used; a bad file is a CheckpointError naming the file and the field."""
    check_readable(path)
    state = read_state_json(path)
    where = path / "trainer_state.pt"
    try:  # weights_only: tensors and plain containers only; a pickled object (code) is refused
        trainer_state = torch.load(where, weights_only=True, map_location="cpu")
    except OSError as err:  # failing storage mid-file: not a damaged file
        raise unreadable(where, err) from None
    except Exception as err:
        raise CheckpointError(
            f"{where}: refused to load (not a plain tensor file: {_first_line(err)}); resume from "
            "another checkpoint or start a new train.output_dir"
        ) from None
    check_trainer_state(trainer_state, optimizer, scheduler, where)
    load_model_weights(model, path / "model")
    try:
        optimizer.load_state_dict(trainer_state["optimizer"])
        scheduler.load_state_dict(trainer_state["scheduler"])
        set_rng_state(trainer_state["rng"])
    except (ValueError, TypeError, KeyError, IndexError, RuntimeError, OverflowError) as err:
        raise _fail(where, "the state", f"does not fit this run ({_first_line(err)})") from None
    return state
