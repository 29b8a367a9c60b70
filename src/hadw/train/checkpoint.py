"""Atomic checkpoints that resume a run bit-for-bit on CPU.

checkpoint-000040/
    model/               save_pretrained (weights, config, tokenizer): loadable on its own
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
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hadw.errors import UserError

LATEST = "latest"


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


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp / "model")
    tokenizer.save_pretrained(tmp / "model")
    trainer_state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state()}
    torch.save(trainer_state, tmp / "trainer_state.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=1), encoding="utf-8")
    replace_dir(tmp, final)
    _atomic_write_text(run_dir / LATEST, final.name + "\n")
    fsync_path(run_dir)
    _prune(run_dir, keep_last, final)
    return final


def _prune(run_dir: Path, keep_last: int, current: Path) -> None:
    """Keep the `keep_last` (>= 1) checkpoints up to and including `current`; never delete `current`."""
    checkpoints = [p for p in sorted(run_dir.glob("checkpoint-*")) if p != current]
    older = [p for p in checkpoints if p.name < current.name]
    for old in older[: max(len(older) - (max(keep_last, 1) - 1), 0)]:
        shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = run_dir / LATEST
    if not pointer.is_file():
        return None
    path = run_dir / pointer.read_text(encoding="utf-8").strip()
    return path if (path / "state.json").is_file() else None


def load_model_weights(model, model_dir: Path) -> None:
    """Load saved weights into an existing model in place (so the optimiser keeps its parameters)."""
    from safetensors.torch import load_file

    index = model_dir / "model.safetensors.index.json"
    if index.is_file():  # sharded: the index maps each tensor to its shard file
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        state.update(load_file(model_dir / shard))
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    really_missing = [k for k in missing if k not in tied and not k.endswith("lm_head.weight")]
    if really_missing or unexpected:
        raise RuntimeError(
            f"checkpoint {model_dir} does not match the model: missing {really_missing}, unexpected {list(unexpected)}"
        )


def load_checkpoint(path: Path, model, optimizer, scheduler) -> dict[str, Any]:
    """Restore model, optimiser, scheduler and RNG states in place; return state.json's contents."""
    load_model_weights(model, path / "model")
    try:  # weights_only: tensors and plain containers only; a pickled object (code) is refused
        trainer_state = torch.load(path / "trainer_state.pt", weights_only=True)
    except Exception as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"{path / 'trainer_state.pt'}: refused to load (not a plain tensor file: {first}); resume from "
            "another checkpoint or start a new train.output_dir"
        ) from None
    optimizer.load_state_dict(trainer_state["optimizer"])
    scheduler.load_state_dict(trainer_state["scheduler"])
    set_rng_state(trainer_state["rng"])
    return json.loads((path / "state.json").read_text(encoding="utf-8"))
