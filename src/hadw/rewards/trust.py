"""Whose code runs: an import-path reward is code, and a run folder's config.yaml is data.

The rule (docs/data.md, "Whose code runs"):
  * hadw imports a reward's module only when you named it: on the command line (key=value, `--reward`), in a
    config file you start a run with, or in HADW_TRUST_REWARDS (comma-separated import paths);
  * an import path read from a run folder's own config.yaml (`hadw train RUN/config.yaml --resume`, `hadw eval
    RUN`, `hadw probe RUN`) is trusted only when its module file is one you ran before on this machine: each reward
    you name is remembered by the sha256 of its module's files in your own trust file
    ($XDG_CONFIG_HOME/hadw/trusted_rewards.json, never inside a run). A folder you received, or a module changed
    since, is refused in one line that says how to confirm it;
  * never a module of Python's standard library (`subprocess:getoutput`, `os:system`, `builtins:eval`), and never
    one inside the run folder: a run folder is not put on the import path.

Modules are located without being run (importlib's PathFinder, one dotted part at a time).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import sys
from pathlib import Path

from hadw.errors import UserError

TRUST_ENV = "HADW_TRUST_REWARDS"
TRUST_FILE = "trusted_rewards.json"
MAX_ENTRIES = 1000  # the oldest are forgotten first


# spec -> the folder its module is imported from (hadw.rewards.loader), for an import path read from a run folder's
# config and trusted (check_saved): the folder where the trusted file was found, never the working directory
IMPORT_FOLDERS: dict[str, str] = {}


# spec -> the sha256 of the module files hadw.rewards.loader executed for it (read once, hashed, compiled from those
# bytes): what `remember` records, and what a pool process must find again before it runs them
EXECUTED: dict[str, str] = {}
# spec -> the sha256 that check_saved accepted: the loader executes the files only if their bytes still have it
ACCEPTED: dict[str, str] = {}


def import_from(spec: str, folder: str) -> None:
    """Import `spec`'s module from `folder` (set before it is first resolved)."""
    IMPORT_FOLDERS[spec] = folder


class RewardTrustError(UserError):
    """An import-path reward that hadw will not import: one line naming it, where it came from, and what to do."""


def module_name(spec: str) -> str:
    return spec.partition(":")[0]


def refuse_standard_library(spec: str, where: str = "") -> None:
    """RewardTrustError when the spec's module is Python's own (a shell command, eval, file removal are one
    import path away: `subprocess:getoutput`); rewards are your functions or hadw's registered ones."""
    top = module_name(spec).split(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise RewardTrustError(
            f"{where}reward {spec!r}: {top!r} is a module of Python's standard library, not a reward; name a "
            "function of your own module (module:function) or a registered reward (math, math_any, exact, format)"
        )


def locate(spec: str, folders: list[str]) -> list[Path] | None:
    """The files that importing the spec's module runs (each package's __init__ and the module), found in
    `folders` then sys.path without running any of them; None when it is not there as source files."""
    parts = module_name(spec).split(".")
    search: list[str] | None = [*folders, *sys.path]
    files = []
    for part in parts:
        found = importlib.machinery.PathFinder.find_spec(part, search)
        if found is None or not found.origin or not os.path.isfile(found.origin):
            return None
        files.append(Path(found.origin).resolve())
        search = list(found.submodule_search_locations or [])
    return files


def digest_bytes(contents: list[bytes]) -> str:
    h = hashlib.sha256()
    for data in contents:
        h.update(data)
    return h.hexdigest()


def _digest(files: list[Path]) -> str:
    return digest_bytes([path.read_bytes() for path in files])


def trust_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "hadw" / TRUST_FILE


def _folder_problem() -> str | None:
    """A trust file's folder that anyone may write: whatever hadw writes there can be replaced (no sticky bit)."""
    import stat

    path = trust_file()
    try:
        mode = os.stat(path.parent).st_mode
    except OSError:
        return None
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        return f"the folder of your trust file, {path.parent}, is world-writable, so {path} is not used; chmod o-w it"
    return None


def trust_file_problem() -> str | None:
    """Why your trust file cannot be used (None: it can, or there is none yet): a file anyone may write could list
    any module as trusted, so a world-writable one (or one in a world-writable folder) is never read."""
    import stat

    path = trust_file()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"your trust file {path} cannot be read ({err.strerror}), so nothing is trusted from it"
    fix = f"remove it (hadw writes a new one) or fix it: chmod 600 {path}"
    if stat.S_ISLNK(st.st_mode):
        return f"your trust file {path} is a link, never followed; {fix.split(' or ')[0]}"
    if not stat.S_ISREG(st.st_mode):
        return f"your trust file {path} is not a regular file; remove it"
    if st.st_mode & stat.S_IWOTH:
        return f"your trust file {path} is world-writable (mode {stat.S_IMODE(st.st_mode):o}), so not used; {fix}"
    if st.st_uid != os.getuid():
        return f"your trust file {path} belongs to another user (uid {st.st_uid}), so not used; {fix}"
    if _folder_problem():
        return _folder_problem()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        return f"your trust file {path} cannot be read ({err.strerror}), so nothing is trusted from it"
    except ValueError as err:
        return f"your trust file {path} is not JSON ({type(err).__name__}), so nothing is trusted from it; {fix}"
    if not isinstance(data, dict) or not isinstance(data.get("rewards"), list):
        return f"your trust file {path} is not a mapping with a 'rewards' list, so nothing is trusted from it; {fix}"
    return None


def _entries() -> list[dict]:
    if trust_file_problem() is not None:
        return []  # unusable: nothing is trusted from it (a confirmation still works; the refusal says why)
    try:
        data = json.loads(trust_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    items = data.get("rewards") if isinstance(data, dict) else None
    return [e for e in items if isinstance(e, dict)] if isinstance(items, list) else []


def remember(spec: str, folder: str) -> None:
    """Record that you named `spec` (found from `folder`): its module files' sha256, in your trust file. Best
    effort: a read-only home is no reason to stop a run."""
    from hadw.safe_files import atomic_write_text

    files = locate(spec, [folder])
    if files is None:
        return
    digest = EXECUTED.get(spec, _digest(files))  # what ran, when it ran here (hadw.rewards.loader)
    entry = {"spec": spec, "folder": str(Path(folder).resolve()), "sha256": digest}
    problem = trust_file_problem()
    if problem is not None:
        # a file in a folder anyone may write cannot be made safe from here; any other is replaced by a fresh one
        print(f"warning: {problem}" + ("" if _folder_problem() else "; writing a new one"), file=sys.stderr)
        if _folder_problem():
            return
    entries = [*[e for e in _entries() if e != entry][-(MAX_ENTRIES - 1) :], entry]
    path = trust_file()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"rewards": entries}, indent=1) + "\n")
        if not path.is_symlink():
            os.chmod(path, 0o600)  # yours alone, whatever the umask (a world-writable one is never read)
    except OSError:
        pass


def confirmed_in_environment(spec: str) -> bool:
    return spec in {s.strip() for s in os.environ.get(TRUST_ENV, "").split(",") if s.strip()}


def check_saved(spec: str, run_dir: Path, where: str) -> str | None:
    """Allow an import path read from a run folder's config (`where`: that file) or refuse it in one line; returns
    the folder to import it from (None: from sys.path as installed). See the module docstring for the rule."""
    refuse_standard_library(spec, f"{where}: ")
    run = run_dir.resolve()
    _refuse_inside(spec, locate(spec, [str(run)]), run, where)  # the folder's own module, whatever else is trusted
    entries = [e for e in _entries() if e.get("spec") == spec]
    folders = [str(e["folder"]) for e in entries if isinstance(e.get("folder"), str)] + [str(run.parent)]
    for folder in [*folders, None]:
        files = locate(spec, [folder] if folder else [])
        if files is None:
            continue
        _refuse_inside(spec, files, run, where)
        digest = _digest(files)
        if confirmed_in_environment(spec) or any(e.get("sha256") == digest for e in entries):
            ACCEPTED[spec] = digest
            return folder
        problem = trust_file_problem()
        raise RewardTrustError(
            f"{where}: reward {spec!r} ({files[-1]}, sha256 {digest[:12]}) is not one you have run on this machine "
            f"(a run folder's config is data, not code); to run it, name it yourself: {TRUST_ENV}={spec} before "
            "the command, or give the reward on the command line" + (f" ({problem})" if problem else "")
        )
    raise RewardTrustError(
        f"{where}: reward {spec!r}: its module is not importable here (not installed, and not beside the run "
        f"{run}); install it, or put it beside the run, then name it: {TRUST_ENV}={spec}"
    )


def _refuse_inside(spec: str, files: list[Path] | None, run: Path, where: str) -> None:
    if files is not None and any(f == run or run in f.parents for f in files):
        raise RewardTrustError(
            f"{where}: reward {spec!r} is a module inside the run folder ({files[-1]}); a run folder is data "
            "and never imported from: install the module or keep it outside the run"
        )


def is_run_config(path: Path) -> bool:
    """A run folder's own config.yaml (hadw train wrote it), as opposed to a recipe file you wrote."""
    from hadw import metrics as M

    folder = path.absolute().parent
    markers = (M.METRICS_FILE, M.LOCK_FILE, "latest", "final_model", "init_model")
    has_run = any((folder / name).exists() for name in markers) or any(folder.glob("checkpoint-*"))
    return path.name == "config.yaml" and has_run


def reward_specs(reward: object) -> list[str]:
    """The import paths a config's `reward` section (a RewardConfig) names."""
    names = [*getattr(reward, "functions", []), getattr(reward, "correctness", ""), *getattr(reward, "isolated", [])]
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and ":" in n))


def guard_config(
    reward: object,
    config_path: Path | None,
    given_on_command_line: set[str],
    as_run: bool | None = None,
    run_dir: Path | None = None,
) -> None:
    """Before a config's rewards are imported: every import path is checked against the standard library; one read
    from a run's config, and not given again on the command line, must be trusted (check_saved), and is then
    imported from the folder it was found in (never from the config's own folder). The others you named: remembered
    (after they import). as_run: the config is a run's (hadw.train.config.load_config: resumed, or training into
    its own folder); None: when its folder holds run files (is_run_config). run_dir: the run folder, whose modules
    are never imported (default: the config's folder)."""
    saved = config_path is not None and (is_run_config(config_path) if as_run is None else as_run)
    overridden = {"reward", "reward.functions", "reward.correctness", "reward.isolated"} & given_on_command_line
    for spec in reward_specs(reward):
        refuse_standard_library(spec)
        if saved and not overridden:
            folder = check_saved(spec, run_dir or config_path.parent, str(config_path))  # type: ignore[union-attr]
            if folder is not None:
                import_from(spec, folder)


def remember_named(
    reward: object, config_path: Path | None, given_on_command_line: set[str], as_run: bool | None = None
) -> None:
    """Remember the import paths you named (not those read from a run's config; as_run as in guard_config): a later
    --resume, `hadw eval RUN` or `hadw probe RUN` of that run runs them without asking, while their files are
    unchanged."""
    saved = config_path is not None and (is_run_config(config_path) if as_run is None else as_run)
    if saved and not ({"reward", "reward.functions", "reward.correctness", "reward.isolated"} & given_on_command_line):
        return
    for spec in reward_specs(reward):
        remember(spec, os.getcwd())
