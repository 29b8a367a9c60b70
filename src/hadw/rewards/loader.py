"""Rewards by import path, with TRL's signature, and hadw's rewards as TRL reward functions.

    reward.functions: [math, "my_pkg.rewards:accuracy"]

An import path "module:attribute" names either
  * a function with TRL's reward signature, `f(prompts, completions, **kwargs) -> list[float | None]`,
    called once per batch with keyword arguments: `prompts` (the prompt texts, the template filled in,
    no chat markup), `completions` (the response texts) and the dataset's columns, one list each: every
    top-level field of the rows (except `prompt`), plus `answer` (the gold answer) and `level` when the
    rows have no such field. A TRL user's function works unchanged. It runs in a verifier-pool process,
    in its main thread (math-verify's signal.alarm timeouts work there, as under TRL), under
    `reward.timeout_s` per item: a reward that overruns is killed with its process, never left running, and
    the working directory of the trainer is never changed by it. None, NaN, a non-number or a wrong-length
    result scores 0 and is counted.
  * or, when the name is listed in `reward.isolated`, a per-item function `f(completion, answer) -> float`
    run in the verifier pool under `reward.timeout_s` (a hang or a crash scores 0 and is counted);
  * or a hadw `RewardFunction`, used as it is.
The current directory is importable, as with `python -m`: `my_rewards.py` beside you is `my_rewards:f`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hadw.rewards.base import (
    DEFAULT_TIMEOUT_S,
    NOT_A_NUMBER,
    FailureWatch,
    ItemScores,
    RewardFn,
    RewardFunction,
    ScoreError,
    get_reward,
    run_batch,
    run_batch_isolated,
    run_reward,
)

if TYPE_CHECKING:
    from hadw.data import Problem


def is_import_path(name: str) -> bool:
    return ":" in name


@dataclass(frozen=True)
class RewardState:
    """What TRL passes a reward as `trainer_state`, the fields that mean something here: the optimiser step being
    scored (0-based, TRL's global_step) and the run's train.steps. None in `hadw eval` / `hadw probe`."""

    global_step: int
    max_steps: int


def _trl_call(
    fn: Callable,
    completions: list[str],
    prompts: list[str],
    columns: Mapping[str, list],
    completion_format: str = "text",
    extra: Mapping[str, Any] | None = None,
) -> list[object]:
    """fn called as TRL calls a reward: keyword arguments, only those it names when it takes no **kwargs; the
    completions as text, or as TRL passes them for a conversational dataset (completion_format="messages");
    extra: arguments for the whole batch (trainer_state)."""
    if completion_format == "messages":
        completions = [[{"role": "assistant", "content": c}] for c in completions]  # type: ignore[misc]
    kwargs: dict[str, Any] = {"prompts": prompts, "completions": completions, **columns, **(extra or {})}
    params = inspect.signature(fn).parameters.values()
    if not any(p.kind is p.VAR_KEYWORD for p in params):  # no **kwargs: pass only what it names
        names = {p.name for p in params}
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    try:
        result = fn(**kwargs)
    except TypeError as err:  # trl.rewards.accuracy_reward on text: completion[0]["content"] of a string
        if completion_format == "text" and "string indices must be integers" in str(err):
            raise TypeError(
                f"{err} (the reward reads each completion as chat messages, completion[0]['content']: set "
                "reward.completion_format=messages)"
            ) from None
        raise
    if isinstance(result, Mapping | str | bytes):  # list() of a {row: score} dict would score its keys
        raise ScoreError(NOT_A_NUMBER, f"the reward returned a {type(result).__name__}; return a list, one score "
                                       "per completion")  # fmt: skip
    return list(result)


@dataclass(frozen=True)
class ImportPathCall:
    """A picklable stand-in for an import-path reward, called in a verifier-pool process: the process imports the
    function by its path, from `folder` (the trainer's working directory when it resolved the reward), when it
    receives it (unpickling), so the import is not charged to an item's timeout; a module that does not import
    there fails each call in one line (scored 0 and counted), never the worker."""

    spec: str
    folder: str
    sha256: str = ""  # of the module files this process ran: the pool process runs them only with these bytes

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        with contextlib.suppress(Exception):
            _import(self.spec, self.folder, self.sha256)  # cached: the calls find it loaded (or raise its error)

    def __call__(self, *args: Any) -> list[object]:
        """_trl_call's arguments after the function: (completions, prompts, columns, completion_format, extra)."""
        return _trl_call(_import(self.spec, self.folder, self.sha256), *args)


@dataclass(frozen=True)
class ImportPathItem(ImportPathCall):
    """An isolated per-item import-path reward as the pool calls it, f(completion, answer): imported in the pool
    process as ImportPathCall imports it (the bytes this process checked and ran), never by pickle's own import."""

    def __call__(self, *args: Any) -> Any:  # type: ignore[override]
        return _import(self.spec, self.folder, self.sha256)(*args)


@dataclass(frozen=True)
class TRLReward:
    """A batch reward with TRL's signature; `run` passes the prompts and the dataset columns. `remote`: how a pool
    process calls it (an import-path reward); None runs it in a thread of this process (a function object)."""

    name: str
    fn: Callable[..., Sequence[float | None]]
    remote: ImportPathCall | None = None

    def _call(self, *args: Any) -> list[object]:
        """_trl_call's arguments after the function, as ImportPathCall takes them."""
        return _trl_call(self.fn, *args)

    def run(
        self,
        completions: list[str],
        answers: list[str],
        prompts: list[str] | None = None,
        columns: Mapping[str, list] | None = None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        completion_format: str = "text",
        extra: Mapping[str, Any] | None = None,
    ) -> ItemScores:
        """One call for the batch under timeout_s per item; if it raises, exits or times out, item by item, so
        one bad item scores 0 and is counted by kind (hadw.rewards.base.run_batch). None scores 0 and is counted.
        extra: keyword arguments for the whole batch (trainer_state), passed as they are."""
        prompts = prompts if prompts is not None else [""] * len(completions)
        columns = {"answer": answers, **(columns or {})}

        def args(rows: list[int]) -> tuple[list[str], list[str], dict[str, list], str, Mapping[str, Any] | None]:
            picked = {k: [v[i] for i in rows] for k, v in columns.items()}
            return [completions[i] for i in rows], [prompts[i] for i in rows], picked, completion_format, extra

        if self.remote is not None and timeout_s is not None:
            return run_batch_isolated(self.name, self.remote, args, len(completions), timeout_s)
        return run_batch(self.name, lambda rows: self._call(*args(rows)), len(completions), timeout_s)

    def __call__(self, completions: list[str], answers: list[str]) -> list[float]:
        return self.run(completions, answers).scores


class _SourceBytesLoader(importlib.machinery.SourceFileLoader):
    """Compiles the source bytes it was given (those the trust check hashed), never a __pycache__ file: Python
    would run a planted .pyc whose header matches the .py's mtime and size, not the .py that was read."""

    def __init__(self, fullname: str, path: str, data: bytes):
        super().__init__(fullname, path)
        self._data = data

    def path_stats(self, path: str) -> Mapping[str, Any]:
        raise OSError("no bytecode cache")  # SourceLoader.get_code then neither reads nor writes one

    def get_data(self, path: str) -> bytes:
        if path == self.path:
            return self._data
        raise OSError(f"{path}: only the checked source is read")


class _SourceBytesFinder:
    """A meta-path finder for exactly the modules of one import path (name -> (file, bytes)), first in line."""

    def __init__(self, sources: dict[str, tuple[str, bytes]]):
        self.sources = sources

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.sources:
            return None
        import importlib.util

        file, data = self.sources[name]
        return importlib.util.spec_from_file_location(name, file, loader=_SourceBytesLoader(name, file, data))


@contextlib.contextmanager
def _checked_sources(spec: str, folder: str, expected: str | None):
    """While importing `spec`'s module: its files (as hadw.rewards.trust.locate finds them, the search the trust
    check made) are read once, hashed (ValueError when `expected` is given and differs: changed since checked) and
    compiled from those bytes; the hash is recorded in trust.EXECUTED. Modules already imported, and a module that
    is not plain source files (an extension, a namespace package), are left to Python's own import."""
    from hadw.rewards import trust

    module_name = spec.partition(":")[0]
    files = trust.locate(spec, [folder])
    if files is None or not all(f.suffix == ".py" for f in files):
        yield
        return
    data = [f.read_bytes() for f in files]
    digest = trust.digest_bytes(data)
    if expected and digest != expected:
        raise ValueError(
            f"reward {spec!r}: {files[-1]} changed since it was checked (sha256 {digest[:12]}, checked "
            f"{expected[:12]}); not run"
        )
    parts = module_name.split(".")
    names = [".".join(parts[: i + 1]) for i in range(len(parts))]
    sources = {n: (str(f), b) for n, f, b in zip(names, files, data, strict=True) if n not in sys.modules}
    finder = _SourceBytesFinder(sources)
    sys.meta_path.insert(0, finder)  # type: ignore[arg-type]
    try:
        yield
    finally:
        sys.meta_path.remove(finder)  # type: ignore[arg-type]
    trust.EXECUTED[spec] = digest


@functools.cache
def _import(spec: str, folder: str | None = None, sha256: str = "") -> Any:
    """The object at "module:attribute"; its module is found in `folder` (default: the folder a trusted run config's
    reward was found in, else the current directory, as `python -m` would), then on sys.path, and compiled from the
    bytes read (_checked_sources; sha256: the digest they must have). Never a module of the standard library
    (hadw.rewards.trust). ValueError in one line when it cannot be imported or called."""
    from hadw.rewards.trust import ACCEPTED, IMPORT_FOLDERS, RewardTrustError, refuse_standard_library

    module_name, _, attribute = spec.partition(":")
    try:
        refuse_standard_library(spec)
    except RewardTrustError as err:
        raise ValueError(str(err).removeprefix(f"reward {spec!r}: ")) from None
    folder = folder or IMPORT_FOLDERS.get(spec) or os.getcwd()
    if folder not in sys.path and ("" not in sys.path or folder != os.getcwd()):  # the `hadw` console script
        sys.path.append(folder)  # the module's own imports of its neighbours
    argv, sys.argv = sys.argv, [module_name]  # a module that parses sys.argv on import must not read hadw's
    try:
        with _checked_sources(spec, folder, sha256 or ACCEPTED.get(spec)):
            obj: Any = importlib.import_module(module_name)
    except SystemExit as e:  # `sys.exit(main())` at the top level: hadw must not end with it
        code = e.code if e.code is not None else ""
        raise ValueError(
            f"reward {spec!r}: importing module {module_name!r} called sys.exit({code}); keep a script's top level "
            "under `if __name__ == '__main__':`"
        ) from None
    except ValueError as e:
        if str(e).startswith(f"reward {spec!r}: "):  # _checked_sources: changed since checked
            raise
        raise ValueError(f"reward {spec!r}: cannot import module {module_name!r}: {type(e).__name__}: {e}") from None
    except Exception as e:
        raise ValueError(f"reward {spec!r}: cannot import module {module_name!r}: {type(e).__name__}: {e}") from None
    finally:
        sys.argv = argv
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"reward {spec!r}: {module_name!r} has no attribute {attribute!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"reward {spec!r}: {attribute!r} is a {type(obj).__name__}, not a function")
    return obj


def resolve_reward(name: str, isolated: bool = False) -> RewardFn | TRLReward:
    """A registered reward by name, or one loaded from an import path "module:function" (module docstring).
    isolated: the import path is a per-item function to run in the verifier pool. Raises ValueError."""
    if not is_import_path(name):
        if isolated:
            raise ValueError(f"reward.isolated: {name!r} is not an import path (module:function)")
        return get_reward(name)  # not cached: register_reward may replace it
    return _load(name, isolated)


@functools.cache
def _load(name: str, isolated: bool) -> RewardFn | TRLReward:
    obj = _import(name)
    if isinstance(obj, RewardFunction):
        return replace(obj, name=name)
    from hadw.rewards.trust import EXECUTED, IMPORT_FOLDERS

    folder, digest = IMPORT_FOLDERS.get(name) or os.getcwd(), EXECUTED.get(name, "")
    if isolated:  # the pool process imports it as this one did, not by pickle's own import (which reads bytecode)
        return RewardFunction(name, ImportPathItem(name, folder, digest) if digest else obj, isolated=True)
    return TRLReward(name, obj, ImportPathCall(name, folder, digest))


def reward_inputs(problems: Sequence[Problem], template: str) -> tuple[list[str], dict[str, list]]:
    """(prompts, columns) for TRL-signature rewards: the filled-in template of each problem, and every
    raw row field (except `prompt`) as a column, with `answer` / `level` from the Problem if absent."""
    from hadw.data import fill_template

    prompts = [fill_template(p.question, template) for p in problems]
    keys = dict.fromkeys(k for p in problems for k in (p.row or {}) if k != "prompt")
    columns = {k: [(p.row or {}).get(k) for p in problems] for k in keys}
    columns.setdefault("answer", [p.answer for p in problems])
    columns.setdefault("level", [p.level for p in problems])
    return prompts, columns


def _text(completion: Any) -> str:
    """TRL completions are strings, or (conversational datasets) a list of messages: the last content."""
    if isinstance(completion, list) and completion and isinstance(completion[-1], Mapping):
        return str(completion[-1].get("content", ""))
    return str(completion)


def trl_reward(
    name: str,
    answer_column: str = "answer",
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    max_failed_calls: int = 3,
) -> Callable:
    """A hadw reward as a TRL reward function `f(prompts, completions, **columns)`, named `name`.

    The gold answer is read from the dataset column `answer_column`; isolated rewards (math, math_any)
    keep their verifier-pool timeout, the others run in a thread under timeout_s. A failed item scores 0
    and is counted by kind in `f.error_counts`; the first one is logged once (warning), and `max_failed_calls`
    consecutive calls in which every item failed raise RewardFailure (0 = never).
    For `HADWGRPOTrainer(reward_funcs=[trl_reward("math")])`.
    """
    import logging

    fn = get_reward(name)
    log = logging.getLogger("hadw.rewards")
    watch = FailureWatch(name, max_failed_calls, lambda name, line, error, row: log.warning(line))

    def reward(prompts=None, completions=(), **columns) -> list[float]:
        if answer_column not in columns:
            raise ValueError(f"reward {name!r} reads the gold answer from the dataset column {answer_column!r}")
        answers = [str(a) for a in columns[answer_column]]
        texts = [_text(c) for c in completions]
        result = run_reward(fn, texts, answers, timeout_s)
        rows = [{"completion": t, "answer": a} for t, a in zip(texts, answers, strict=True)]
        watch.see(result.kinds, result.first_error, result.all_failed, rows, "calls")
        return result.scores

    reward.__name__ = reward.__qualname__ = name
    reward.error_counts = watch.counts  # type: ignore[attr-defined]
    return reward
