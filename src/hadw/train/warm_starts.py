"""Warm starts that ship with hadw: the tiny model after its SFT warm start, as files of the package.

Why files and not a recipe: SFT of the tiny model is chaotic in floating-point summation order. The same code, seed
and data give another model on another CPU's kernels: on an AVX2 machine the demo's SFT stopped at greedy 0.330
(L3 / L4 at 0.08) where an AVX-512 one reached 0.495, and RL from the weaker start learned almost nothing (+0.010
against +0.133). A file is the same everywhere; what RL does from it still varies with the kernels, within the range
the README states (benchmarks/studies/demo_range/demo_results.md).

Each start is a `save_pretrained` folder `warm_starts/<name>/` (~3.3 MB) with an entry in `warm_starts/manifest.json`:
how it was made (task, levels, SFT seed, target, level floor), what it reached (steps, greedy accuracy overall and
per level on SFT's held-out problems), on what (CPU, torch), and the sha256 of every file, checked on each load.
`benchmarks/build_warm_starts.py` rebuilds them (and says that the result depends on the CPU).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from hadw.errors import UserError

SHIPPED_DIR = Path(__file__).parent / "warm_starts"
MANIFEST = SHIPPED_DIR / "manifest.json"
DEMO_WARM_START = "sums234-s0"  # the demo's: SFT seed 0, the tiny regime of hadw.data.tasks
WEIGHTS = "model.safetensors"
RECORD = "hadw_warm_start.json"  # beside a warm start that hadw built in a run folder: what it was built for


class WarmStartError(UserError):
    """A warm start that is unknown, altered, or below the level floor."""


@dataclass(frozen=True)
class WarmStart:
    """One shipped warm start (an entry of manifest.json)."""

    name: str
    task: str
    levels: tuple[int, ...]
    sft_seed: int
    target: float  # SFT stopped at the first evaluation at or above this greedy accuracy ...
    level_floor: float  # ... with every level at or above this
    steps: int  # SFT steps it took
    accuracy: float  # greedy accuracy on SFT's held-out problems when it stopped
    level_accuracy: dict[str, float]  # the same per level, e.g. {"L2": 0.79}
    files: dict[str, str]  # file name -> sha256
    built_with: dict[str, str]  # cpu, torch, transformers: where the file came from (not needed to use it)

    @property
    def sha256(self) -> str:
        """The weights' sha256: the name a start is cited by."""
        return self.files[WEIGHTS]

    def line(self) -> str:
        """The one line the demo prints for it."""
        levels = " ".join(f"{k}={v:.2f}" for k, v in self.level_accuracy.items())
        return (
            f"warm start: shipped {self.name} (sha256 {self.sha256[:12]}), {self.steps} SFT steps, "
            f"greedy accuracy {self.accuracy:.3f} ({levels})"
        )


def sha256_files(folder: Path) -> dict[str, str]:
    """sha256 of every regular file directly in `folder` (the record file excluded), by name."""
    out = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.is_symlink() and path.name != RECORD:
            out[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def shipped() -> dict[str, WarmStart]:
    """Every shipped warm start, by name. A manifest that is not JSON, or an entry with a missing, unknown or
    mistyped field, is a WarmStartError naming the manifest (it was a traceback)."""
    try:
        entries = json.loads(MANIFEST.read_text(encoding="utf-8"))["warm_starts"]
        starts = [WarmStart(**{**e, "levels": tuple(e["levels"])}) for e in entries if "name" in e]
        for start in starts:
            if not isinstance(start.files, dict) or not all(isinstance(v, str) for v in start.files.values()):
                raise TypeError(f"entry {start.name!r}: 'files' must map file names to sha256 strings")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise WarmStartError(
            f"{MANIFEST}: not a usable warm-start manifest ({type(err).__name__}: {err}); reinstall hadw"
        ) from None
    return {start.name: start for start in starts}


def get(name: str) -> WarmStart:
    """The manifest entry of `name`; one line naming what is allowed when there is none."""
    starts = shipped()
    if name not in starts:
        raise WarmStartError(f"warm start {name!r}: no such shipped warm start; allowed: {', '.join(starts)}")
    return starts[name]


def verify(folder: Path, files: dict[str, str], what: str) -> None:
    """WarmStartError unless `folder` holds exactly `files` with those sha256 (nothing loaded is trusted unchecked)."""
    if folder.is_symlink():  # a link is never loaded: its target is not the shipped files (and may change)
        raise WarmStartError(
            f"{what}: {folder} is a link (to {os.readlink(folder)}), not a folder; a warm start is loaded only from "
            "its own files: remove the link and reinstall hadw (or rebuild the start there)"
        )
    if not folder.is_dir():
        raise WarmStartError(f"{what}: {folder} is missing (reinstall hadw, or rebuild it)")
    # Every entry, not only the regular files: a link or a subfolder is loaded too (a linked added_tokens.json
    # changed the tokenizer and passed, issue 39).
    odd = sorted(p.name for p in folder.iterdir() if p.is_symlink() or not p.is_file())
    if odd:
        listed = ", ".join(odd)
        raise WarmStartError(f"{what}: {folder} holds links or folders it should not ({listed}); reinstall hadw")
    found = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}
    for name, digest in files.items():
        if found.get(name) != digest:
            got = found.get(name, "missing")[:12]
            raise WarmStartError(
                f"{what}: {folder / name} has sha256 {got}, expected {digest[:12]}: the file was changed; reinstall "
                "hadw (or rebuild the start)"
            )
    extra = sorted(set(found) - set(files))
    if extra:
        raise WarmStartError(f"{what}: {folder} holds files it should not ({', '.join(extra)}); reinstall hadw")


def resolve(name: str) -> tuple[Path, WarmStart]:
    """The folder of shipped start `name` after checking every file's sha256, and its entry."""
    start = get(name)
    folder = SHIPPED_DIR / name
    verify(folder, start.files, f"warm start {name}")
    return folder, start


def check_floor(level_accuracy: dict[str, float], floor: float, what: str, hint: str = "") -> None:
    """WarmStartError naming the levels whose greedy accuracy is under `floor` (RL gets all-wrong groups there)."""
    low = {k: v for k, v in level_accuracy.items() if v < floor}
    if low:
        levels = ", ".join(f"{k} {v:.3f}" for k, v in low.items())
        raise WarmStartError(
            f"{what}: greedy accuracy below the floor {floor} on {levels} (RL learns little from such a start)"
            + (f"; {hint}" if hint else "")
        )


def write_record(folder: Path, request: dict, result: dict) -> None:
    """Record, beside a warm start built in a run folder, what was asked for and the sha256 of what was made."""
    from hadw.safe_files import atomic_write_text

    record = {"request": request, "result": result, "files": sha256_files(folder)}
    atomic_write_text(folder / RECORD, json.dumps(record, indent=1) + "\n")


def built_here(folder: Path) -> bool:
    """True when `folder` holds exactly a warm start hadw built: its record and the files the record lists, unchanged,
    and nothing else (no link, no subfolder, no other file). Only such a folder may be replaced; a user's folder
    with a record copied in, or with anything added to it, is not hadw's to remove (issue 39, finding 6)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    path = folder / RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() and not path.is_symlink() else None
    except (OSError, ValueError):
        return False
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict):
        return False
    return {p.name for p in folder.iterdir()} == {*files, RECORD} and sha256_files(folder) == files


def reusable(folder: Path, request: dict) -> dict | None:
    """The record of a warm start in `folder` if it was built for exactly `request` and its files are unchanged,
    else None (a folder that merely exists is never reused)."""
    path = folder / RECORD
    if not path.is_file() or path.is_symlink():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("request") != request:
        return None
    if sha256_files(folder) != record.get("files"):
        return None
    return record


def manifest_entry(start: WarmStart) -> dict:
    """The JSON form of an entry (benchmarks/build_warm_starts.py writes these)."""
    return {**asdict(start), "levels": list(start.levels)}
