"""LoRA adapters through peft (the library TRL uses; pip install 'hadw[lora]'): the one home of hadw's LoRA.

    model = add_lora(model, LoraSettings(rank=16, alpha=32), base="path/to/base")   # the trainer
    with reference_policy(model): ...    # the adapter switched off: the base model, KL's reference (no copy)
    model.save_pretrained(folder)        # adapter_config.json + adapter_model.safetensors: megabytes, not gigabytes
    model, tokenizer = load_model(folder)   # hadw.rollout.load_model: base + adapter, merged for generation

An adapter folder names its base model (adapter_config.json's base_model_name_or_path); the trainer writes it as
an absolute path (or the Hub id), so `hadw eval RUN_DIR` finds the base from any working directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ALL_LINEAR = "all-linear"  # peft: every linear layer but the output head


@dataclass(frozen=True)
class LoraSettings:
    """peft.LoraConfig's fields that hadw sets (the trainer's model.lora.*)."""

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: str = ALL_LINEAR  # "all-linear" or comma-separated module names (q_proj,v_proj)


def target_list(target_modules: str) -> str | list[str]:
    """peft's target_modules from hadw's text: "all-linear" as is, else the comma-separated names."""
    text = target_modules.strip()
    return ALL_LINEAR if text == ALL_LINEAR else [t.strip() for t in text.split(",") if t.strip()]


def is_adapter_dir(path: str | Path) -> bool:
    """A folder peft's save_pretrained wrote (an adapter without the base weights)."""
    path = Path(path)
    return (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file()


def is_lora(model: Any) -> bool:
    """A peft model (adapters attached)."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def add_lora(model, settings: LoraSettings, base: str | Path | None = None):
    """`model` with fresh LoRA adapters (peft.get_peft_model); only the adapters require gradients. base: the
    folder or Hub id the base weights come from, written into the adapter's config (a folder as an absolute path)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=target_list(settings.target_modules),
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():  # peft reads the deprecated `is_gradient_checkpointing` (transformers 5)
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        peft_model = get_peft_model(model, config)
    if base is not None:
        local = Path(base)
        peft_model.peft_config["default"].base_model_name_or_path = (
            str(local.resolve()) if local.exists() else str(base)
        )
        peft_model.hadw_base_fingerprint = base_fingerprint(base)  # saved beside every adapter (write_base_record)
    return peft_model


@contextlib.contextmanager
def reference_policy(model) -> Iterator[Any]:
    """The base model, the adapter switched off, for the KL term's reference log-probs: no second copy of the
    weights (TRL and verl do the same with a LoRA policy)."""
    with model.disable_adapter():
        yield model


BASE_RECORD = "hadw_base_model.json"  # beside an adapter hadw saved: the identity of the base it was trained on
_EDGE = 1 << 20  # the first fingerprint (records without "v2:"): first and last MiB of each weights file
_SAMPLES, _WINDOW = 32, 256  # v2: per tensor, this many windows of this many bytes, spread evenly over its bytes
_V2 = "v2:"


def base_fingerprint(base: str | Path) -> str | None:
    """A fingerprint of a local base model folder, in milliseconds whatever its size: sha256 over its config.json
    and, for every .safetensors file, its name, size, header (every tensor's name, dtype, shape and offsets) and a
    strided sample of every tensor's bytes (_SAMPLES windows each; a small tensor whole); any other weights file is
    hashed whole. Another model or other weights at the same path differ, also when they differ only in the middle
    of the file (the first fingerprint read its first and last MiB only). None for a Hub id or a path that is not a
    folder."""

    def hash_file(f, path: Path, size: int, h) -> None:
        if path.suffix == ".safetensors":
            _sample_safetensors(f, size, h)
        else:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)

    digest = _folder_digest(base, hash_file)
    return None if digest is None else _V2 + digest


def _folder_digest(base: str | Path, hash_file) -> str | None:
    """sha256 over a model folder's config.json and, for each weights file, its name, size and what
    hash_file(f, path, size, h) adds of it; None when `base` is not a model folder."""
    folder = Path(base)
    if not folder.is_dir() or not (folder / "config.json").is_file():
        return None
    h = hashlib.sha256((folder / "config.json").read_bytes())
    for path in sorted([*folder.glob("*.safetensors"), *folder.glob("*.bin")]):
        size = path.stat().st_size
        h.update(f"{path.name}:{size}".encode())
        with open(path, "rb") as f:
            hash_file(f, path, size, h)
    return h.hexdigest()


def _sample_safetensors(f, size: int, h) -> None:
    """The header and a strided sample of each tensor's bytes into `h` (a file that is not safetensors: hashed
    whole, as any other file)."""
    head = f.read(8)
    length = int.from_bytes(head, "little") if len(head) == 8 else -1
    try:
        header = json.loads(f.read(length)) if 0 < length <= size - 8 else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        f.seek(0)
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
        return
    h.update(head + json.dumps(header, sort_keys=True).encode())
    start = 8 + length
    for name in sorted(k for k, v in header.items() if isinstance(v, dict)):
        offsets = header[name].get("data_offsets")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            continue
        low, high = start + offsets[0], start + offsets[1]
        if high - low <= _SAMPLES * _WINDOW:
            f.seek(low)
            h.update(f.read(high - low))
            continue
        stride = (high - low - _WINDOW) // (_SAMPLES - 1)
        for i in range(_SAMPLES):
            f.seek(low + i * stride)
            h.update(f.read(_WINDOW))


def _edge_fingerprint(base: str | Path) -> str | None:
    """The first fingerprint (an adapter saved before "v2:"), to check such a record as it was written."""

    def edges(f, path: Path, size: int, h) -> None:
        h.update(f.read(_EDGE))
        f.seek(max(0, size - _EDGE))
        h.update(f.read(_EDGE))

    return _folder_digest(base, edges)


def write_base_record(model, folder: Path) -> None:
    """After an adapter is saved into `folder`: the base it was trained on, by name and fingerprint."""
    if not is_lora(model):
        return
    from hadw.safe_files import atomic_write_text

    base = model.peft_config["default"].base_model_name_or_path
    record = {"base_model": base, "fingerprint": getattr(model, "hadw_base_fingerprint", None)}
    atomic_write_text(folder / BASE_RECORD, json.dumps(record, indent=1) + "\n")  # never through a planted link


def check_base(adapter_dir: Path, base: str | Path, required: bool = True) -> None:
    """ValueError in one line when the model now at `base` is not the one the adapter in `adapter_dir` was trained
    on (its recorded fingerprint): an adapter merged into another model would be silently wrong. A record that is a
    link, or not the JSON hadw writes, is refused; a missing one too when `required` (an adapter of a hadw run: a
    deleted record skipped the check), else a warning naming the risk (an adapter hadw did not save)."""
    path = Path(adapter_dir) / BASE_RECORD
    if path.is_symlink():
        raise ValueError(
            f"{path} is a link, not the record hadw writes; the base model at {base} cannot be checked against the "
            f"one the adapter was trained on: replace the link with the run's own {BASE_RECORD}"
        )
    if not path.is_file():
        risk = (
            f"{adapter_dir} has no {BASE_RECORD}, so the base model at {base} cannot be checked against the one the "
            "adapter was trained on (another model there would be merged into silently)"
        )
        if required:
            raise ValueError(f"{risk}; restore the file from the run (hadw writes it beside every adapter it saves)")
        warnings.warn(f"{risk}; an adapter hadw did not save is used as it is", stacklevel=2)
        return
    try:
        expected = json.loads(path.read_text(encoding="utf-8")).get("fingerprint")
    except (OSError, ValueError, AttributeError) as err:
        raise ValueError(
            f"{path}: not the record hadw writes ({type(err).__name__}); restore it from the run"
        ) from None
    if not isinstance(expected, str) or not expected:
        return  # the base was a Hub id: identified by its name
    found = base_fingerprint(base) if expected.startswith(_V2) else _edge_fingerprint(base)
    if found and expected != found:
        shown = found.removeprefix(_V2)[:12]
        raise ValueError(
            f"the base model at {base} is not the one the LoRA adapter in {adapter_dir} was trained on "
            f"(fingerprint {shown}, recorded {expected.removeprefix(_V2)[:12]} in {BASE_RECORD}); put that model "
            f"back at {base}"
        )


def adapter_base(adapter_dir: Path) -> str:
    """The base model an adapter folder names; ValueError with the file when it names none."""
    try:
        base = json.loads((adapter_dir / ADAPTER_CONFIG).read_text(encoding="utf-8"))["base_model_name_or_path"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{adapter_dir / ADAPTER_CONFIG}: names no base model ({type(err).__name__})") from None
    if not isinstance(base, str) or not base:
        raise ValueError(f"{adapter_dir / ADAPTER_CONFIG}: names no base model")
    return base


def attach_adapter(model, adapter_dir: Path, merge: bool = True):
    """`model` (the base) with the adapter of `adapter_dir`; merged into its weights (a plain model, for
    generation: every decoder works on it) unless merge=False (a peft model, e.g. to train on)."""
    from peft import PeftModel

    peft_model = PeftModel.from_pretrained(model, adapter_dir, is_trainable=not merge)
    return peft_model.merge_and_unload() if merge else peft_model


def adapter_state(adapter_dir: Path) -> dict[str, Any]:
    """The adapter weights saved in `adapter_dir` (peft's key names, without the adapter name)."""
    from safetensors.torch import load_file

    return load_file(adapter_dir / ADAPTER_WEIGHTS)


def load_adapter_weights(model, state: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Load saved adapter weights into a peft model in place (the optimiser keeps its parameters); returns the
    (missing adapter keys, unexpected keys)."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, state)
    missing = [k for k in result.missing_keys if "lora_" in k]
    return missing, list(result.unexpected_keys)
