"""Config hashes without paths: one recipe run on two machines (other folders, other absolute paths) hashes alike."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

# ----------------------------------------------------------------------------------------- config hash
# What a run's config hash leaves out: where the run and its inputs lie on this machine, not what it learns.
# train.output_dir is the sweep folder + arm label; data.data_dir only where benchmark files are found;
# train.num_threads is speed only (as _without_threads).
_NOT_RECIPE = (("train", "output_dir"), ("train", "num_threads"), ("data", "data_dir"))


_PATH_SETTINGS = (("model", "path"), ("data", "source"), ("data", "eval_source"))


_SCHEMES = ("task:", "benchmark:", "hf:")


def path_free(value: str, root: str | Path | None = None) -> str:
    """A path setting without this machine's folders: relative to `root` (the sweep folder) when under it, else its
    last component ("/models/SmolLM2-135M" -> "SmolLM2-135M", "file:/data/x.jsonl" -> "file:x.jsonl"). Names
    with a scheme (task:, benchmark:, hf:) and Hub ids ("Qwen/Qwen2.5-0.5B": not absolute, no ./ ../ ~, not a path
    here) are kept as they are."""
    prefix, rest = ("file:", value[5:]) if value.startswith("file:") else ("", value)
    if not rest or rest.startswith(_SCHEMES):
        return value
    looks_local = os.path.isabs(rest) or rest.startswith(("./", "../", "~")) or Path(rest).exists()
    if not looks_local:
        return value
    path = Path(rest).expanduser()
    if root is not None:
        with contextlib.suppress(ValueError, OSError):
            return prefix + path.resolve().relative_to(Path(root).resolve()).as_posix()
    return prefix + (path.resolve().name if path.name in ("", ".", "..") else path.name)


def config_hash(config: dict | str | Path, root: str | Path | None = None) -> str:
    """sha256 (hex) of a run's settings in a path-free form, so that one recipe run on two machines (or in two
    folders) hashes alike and any change of a setting changes it. config: the parsed config.yaml mapping, its
    text, or its path. Left out: train.output_dir, train.num_threads, data.data_dir (_NOT_RECIPE); model.path,
    data.source and data.eval_source go through path_free (relative to `root`, the sweep folder, else the last
    component). (Before issue 40 a raw file's config_sha256 was the sha256 of config.yaml's bytes, absolute
    paths included; that value is not this one.)"""
    import hashlib

    if isinstance(config, Path):
        config = config.read_text(encoding="utf-8")
    if isinstance(config, str):
        from hadw.train.config import parse_yaml

        config = parse_yaml(config, "config.yaml")
    if not isinstance(config, dict):
        raise ValueError(f"config_hash: expected the mapping of a config.yaml, got a {type(config).__name__}")
    tree = json.loads(json.dumps(config))  # a deep copy, of plain JSON values
    for section, name in _NOT_RECIPE:
        if isinstance(tree.get(section), dict):
            tree[section].pop(name, None)
    for section, name in _PATH_SETTINGS:
        value = tree.get(section, {}).get(name) if isinstance(tree.get(section), dict) else None
        if isinstance(value, str):
            tree[section][name] = path_free(value, root)
    return hashlib.sha256(json.dumps(tree, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
