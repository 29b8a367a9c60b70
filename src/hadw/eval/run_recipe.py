"""`hadw eval RUN_DIR` / `hadw probe RUN_DIR`: score a trained run the way it was trained.

A run folder's config.yaml holds the prompt recipe the trainer resolved once (hadw.train.config.resolve_recipe):
source, template, chat template, field names, correctness reward, answer length, levels, seed and the held-out
size. Evaluating the run's model with those, instead of the per-source defaults of a bare model, measures what
was trained; an explicit option still overrides each one.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from hadw.errors import UserError
from hadw.rewards.combine import RewardRecipe

RUN_CONFIG = "config.yaml"


@dataclass(frozen=True)
class RunRecipe:
    """What `hadw eval` needs from a run folder (config.yaml's keys in comments)."""

    model: Path  # final_model/, else the newest checkpoint-*/
    data: str  # data.eval_source, else data.source
    data_dir: str  # data.data_dir
    template: str  # data.template (resolved: never "auto")
    chat_template: str  # data.chat_template: auto | always | never
    # reward.correctness, the 0/1 signal the trainer evaluates with, called as training calls it (reward.isolated,
    # reward.completion_format, reward.timeout_s; every data column by its name)
    reward: RewardRecipe
    max_new_tokens: int  # rollout.max_new_tokens
    fields: tuple[str | None, str | None, str | None]  # data.fields.prompt / answer / level
    levels: list[int] | None  # data.levels (task sources)
    seed: int  # train.seed: picks a task's held-out items
    eval_size: int  # data.eval_size: how many held-out items the trainer scored
    system_prompt: str = ""  # data.system_prompt: the system turn before every prompt


# Config keys that name a file or folder: a run's config.yaml and checkpoints record them relative to the run folder
# (portable_path), so a project copied to another path or machine resumes and evaluates with no edit.
RUN_PATH_KEYS = ("model.path", "data.source", "data.eval_source", "data.data_dir", "train.output_dir")


def portable_path(value: str, run_dir: Path) -> str:
    """A local path as written into a run's files: relative to the run folder ("../../data/q.jsonl"); a spec
    (task:, benchmark:, hf:), a Hub id or a path that does not exist stays as it is."""
    if not value or ":" in value or not Path(value).exists():
        return value
    return os.path.relpath(Path(value).absolute(), run_dir.absolute())


RUN_PATHS_FILE = "run_paths.json"  # beside config.yaml: the same paths, absolute (a run moved without its data)


def write_run_paths(run_dir: Path, paths: dict[str, str]) -> None:
    """Record the absolute form of the run's path keys (key -> path) beside its config.yaml."""
    import json

    from hadw.safe_files import atomic_write_text

    absolute = {k: str(Path(v).absolute()) for k, v in paths.items() if v and ":" not in v and Path(v).exists()}
    atomic_write_text(run_dir / RUN_PATHS_FILE, json.dumps(absolute, indent=1) + "\n")


def resolve_run_path(value: str, run_dir: Path, key: str = "") -> str:
    """A path read from a run's files: relative to the run folder when it exists from there (portable_path's form:
    a project moved whole), else the absolute path recorded for `key` in run_paths.json when that exists (the run
    folder moved alone), else as written (an older run's, relative to where it was started)."""
    if not value or ":" in value or Path(value).is_absolute():
        return value
    candidate = run_dir / value
    if candidate.exists():
        return os.path.normpath(candidate.absolute())
    recorded = _recorded_paths(run_dir).get(key)
    return recorded if isinstance(recorded, str) and Path(recorded).exists() else value


def _recorded_paths(run_dir: Path) -> dict:
    import json

    path = run_dir / RUN_PATHS_FILE
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 16:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_run_dir(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / RUN_CONFIG).is_file() and not (path / "config.json").is_file()


def read_run(path: str | Path) -> RunRecipe:
    """The recipe of the run in `path` (a folder `hadw train` wrote). One-line UserError when it is not usable."""
    import yaml  # transformers' dependency: present wherever `hadw eval` runs

    path = Path(path)
    config_file = path / RUN_CONFIG
    try:
        cfg = yaml.safe_load(config_file.read_text(encoding="utf-8"))
        data, reward, rollout, train = cfg["data"], cfg["reward"], cfg["rollout"], cfg["train"]
        fields = data.get("fields") or {}
        recipe = RunRecipe(
            model=_run_model(path, resolve_run_path((cfg.get("model") or {}).get("path") or "", path, "model.path")),
            data=resolve_run_path(
                data.get("eval_source") or data["source"],
                path,
                "data.eval_source" if data.get("eval_source") else "data.source",
            ),
            data_dir=resolve_run_path(data.get("data_dir") or "", path, "data.data_dir"),
            template=data["template"],
            chat_template=data.get("chat_template", "auto"),
            reward=RewardRecipe.from_config(reward),
            max_new_tokens=int(rollout["max_new_tokens"]),
            fields=(fields.get("prompt") or None, fields.get("answer") or None, fields.get("level") or None),
            levels=data.get("levels"),
            seed=int(train.get("seed", 0)),
            eval_size=int(data.get("eval_size", 200)),
            system_prompt=str(data.get("system_prompt") or ""),
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, IndexError) as err:
        raise UserError(f"{config_file}: not a usable run config ({type(err).__name__}: {err})") from None
    if recipe.template == "auto":  # a run written before the recipe was resolved at load time
        from hadw.data import default_recipe

        recipe = replace(recipe, template=default_recipe(recipe.data).template)
    return recipe


_CHECKPOINT_NAME = re.compile(r"checkpoint-\d{6,}")  # hadw.train.checkpoint's names (not imported: no torch here)


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise UserError(
            f"{path} is a symbolic link (to {os.readlink(path)}); hadw never reads a run's weights through a link: "
            "remove it, or evaluate the folder it points to by its own path"
        )


def _newest_checkpoint(path: Path) -> Path | None:
    """checkpoint-NNNNNN/model of the newest step, or None when the run has no checkpoint. A link there, or a newest
    checkpoint without a model, is one line (it was skipped for an older checkpoint without a word)."""
    found = [
        p for p in path.glob("checkpoint-*") if _CHECKPOINT_NAME.fullmatch(p.name) and (p.is_dir() or p.is_symlink())
    ]
    if not found:
        return None
    found.sort(key=lambda p: int(p.name.split("-", 1)[1]))
    newest = found[-1]
    _refuse_link(newest)
    _refuse_link(newest / "model")
    if not _holds_model(newest / "model"):
        other = f"evaluate an older one by its path (hadw eval {found[-2] / 'model'}), or " if len(found) > 1 else ""
        raise UserError(
            f"{newest}: the run's newest checkpoint holds no model ({newest / 'model'} has no config.json or "
            f"adapter_config.json); {other}remove the damaged checkpoint"
        )
    return newest / "model"


def _holds_model(folder: Path) -> bool:
    """A model folder: full weights (config.json) or a LoRA adapter (adapter_config.json)."""
    return (folder / "config.json").is_file() or (folder / "adapter_config.json").is_file()


def _run_model(path: Path, start: str) -> Path:
    """The run's newest weights: final_model/ when it finished, else its newest checkpoint, else the weights it
    started from (init_model/, or model.path) — so a run still in its first steps can be looked at too. Never
    through a link (out of the run), and never an older checkpoint in silence when the newest has no model."""
    for name in ("final_model", "init_model"):
        _refuse_link(path / name)
    if _holds_model(path / "final_model"):  # a LoRA run's: its adapter (hadw.rollout.load_model adds the base)
        return path / "final_model"
    newest = _newest_checkpoint(path)
    if newest is not None:
        return newest
    if (path / "init_model" / "config.json").is_file():
        return path / "init_model"
    if start:
        return Path(start)
    raise UserError(f"{path}: a run folder without a final_model/, a checkpoint or a start model; nothing to evaluate")
