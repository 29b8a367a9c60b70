"""Issue 49, findings 1-3 and 7 (the trust file): a received config is data wherever it sits, the code that runs is
the code that was hashed, and --resume trains the run the user named.

Every case runs the real `hadw train` command (CliRunner) or load_config, never a model: each fails before training.
"""

from __future__ import annotations

import json
import os
import py_compile
import stat
import sys
from pathlib import Path

import pytest

EVIL = "open({marker!r}, 'w').write('ran')\ndef f(prompts, completions, **k):\n    return [0.0] * len(completions)\n"
GOOD = "def f(prompts, completions, **k):\n    return [1.0] * len(completions)\n"


def _invoke(args: list[str]):
    from typer.testing import CliRunner

    from hadw.cli import build_app

    return CliRunner().invoke(build_app(), args)


def _trusted_specs() -> list[str]:
    from hadw.rewards import trust

    path = trust.trust_file()
    if not path.is_file():
        return []
    return [e.get("spec") for e in json.loads(path.read_text())["rewards"]]


def _received(folder: Path, module: str, marker: Path, output_dir: str = ".") -> Path:
    """A folder as a user may receive it: a config.yaml naming a reward module that sits beside it; no run files."""
    folder.mkdir(parents=True)
    (folder / f"{module}.py").write_text(EVIL.format(marker=str(marker)))
    (folder / "config.yaml").write_text(f"train:\n  output_dir: {output_dir}\nreward:\n  functions: ['{module}:f']\n")
    return folder / "config.yaml"


@pytest.mark.parametrize("output_dir", [".", "../elsewhere"])
def test_a_received_config_resumed_from_its_folder_imports_nothing_and_is_not_remembered(
    tmp_path, monkeypatch, output_dir
):
    """`cd RECV && hadw train config.yaml --resume` imported RECV/recv_rw.py before failing with "no checkpoint",
    and remembered it as trusted (a later received run naming it ran unasked)."""
    module = f"recv_rw_{output_dir.strip('./') or 'own'}"
    marker = tmp_path / "pwned"
    _received(tmp_path / "RECV", module, marker, output_dir)
    monkeypatch.chdir(tmp_path / "RECV")
    monkeypatch.syspath_prepend(str(tmp_path / "RECV"))  # as `python -m`: the working directory importable
    done = _invoke(["train", "config.yaml", "--resume"])
    assert done.exit_code == 2, done.output
    assert "--resume: no checkpoint in train.output_dir=" in done.output
    assert not marker.exists() and f"{module}:f" not in _trusted_specs()


def test_a_config_that_trains_in_its_own_folder_is_a_run_s_its_own_module_never_imported(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    _received(tmp_path / "RECV", "recv_rw_fresh", marker)
    monkeypatch.chdir(tmp_path / "RECV")
    monkeypatch.syspath_prepend(str(tmp_path / "RECV"))
    done = _invoke(["train", "config.yaml", "train.steps=1"])
    assert done.exit_code == 2, done.output
    assert "is a module inside the run folder" in done.output and "recv_rw_fresh.py" in done.output
    assert not marker.exists() and "recv_rw_fresh:f" not in _trusted_specs()


def test_resume_refuses_a_run_config_whose_output_dir_is_another_run(tmp_path):
    """mine/config.yaml with train.output_dir ../other trained `other` (rewrote its final model, pruned its oldest
    checkpoint) and exited 0."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    (mine / "config.yaml").write_text("train:\n  output_dir: ../other\n")
    (mine / "metrics.jsonl").write_text('{"step": 0}\n')  # a run folder's files
    (other / "metrics.jsonl").write_text('{"step": 0}\n')
    done = _invoke(["train", str(mine / "config.yaml"), "--resume"])
    assert done.exit_code == 2, done.output
    line = " ".join(done.output.split())
    assert f"is the config of the run in {mine}" in line and f"({other})" in line, line
    assert "train.output_dir: ." in line
    assert sorted(p.name for p in other.iterdir()) == ["metrics.jsonl"]  # nothing written there

    # named on the command line: allowed, and said before anything else happens
    done = _invoke(["train", str(mine / "config.yaml"), "--resume", f"train.output_dir={tmp_path / 'third'}"])
    line = " ".join(done.output.split())
    assert f"--resume: training train.output_dir={tmp_path / 'third'} (given on the command line)" in line, line
    assert done.exit_code == 2 and "no checkpoint" in line


def _planted_pyc(folder: Path, module: str, marker: Path) -> None:
    """module.py holds GOOD; its __pycache__ holds EVIL compiled, with a header matching GOOD's mtime and size."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / f"{module}.py"
    evil = EVIL.format(marker=str(marker))
    good = GOOD.ljust(len(evil) - 1) + "\n"
    assert len(good) == len(evil)
    source.write_text(evil)
    py_compile.compile(str(source), doraise=True)
    mtime = source.stat().st_mtime_ns
    source.write_text(good)
    os.utime(source, ns=(mtime, mtime))


def test_the_bytes_hashed_are_the_bytes_run_never_a_planted_pyc(tmp_path, monkeypatch):
    from hadw.rewards import loader, trust

    marker = tmp_path / "pwned"
    _planted_pyc(tmp_path / "mod", "planted_rw", marker)
    monkeypatch.chdir(tmp_path / "mod")
    fn = loader._import("planted_rw:f", str(tmp_path / "mod"))
    assert fn(["a", "b"], ["c", "d"]) == [1.0, 1.0]  # GOOD ran; before: EVIL's 0.0 (and the marker)
    assert not marker.exists()
    expected = trust.digest_bytes([(tmp_path / "mod" / "planted_rw.py").read_bytes()])
    assert trust.EXECUTED["planted_rw:f"] == expected  # what `remember` records is what ran
    sys.modules.pop("planted_rw", None)


def test_a_module_changed_since_its_check_is_not_run(tmp_path):
    from hadw.rewards import loader

    (tmp_path / "changed_rw.py").write_text(GOOD)
    with pytest.raises(ValueError, match=r"reward 'changed_rw:f': .*changed_rw.py changed since it was checked"):
        loader._import("changed_rw:f", str(tmp_path), "0" * 64)
    assert "changed_rw" not in sys.modules


def test_an_isolated_import_path_reward_runs_in_the_pool_from_the_checked_bytes(tmp_path, monkeypatch):
    import pickle

    from hadw.rewards import loader

    (tmp_path / "iso_rw.py").write_text("def g(completion, answer):\n    return float(completion == answer)\n")
    monkeypatch.chdir(tmp_path)
    fn = loader._load("iso_rw:g", True)
    item = fn.item_fn
    assert isinstance(item, loader.ImportPathItem) and len(item.sha256) == 64
    assert pickle.loads(pickle.dumps(item))("x", "x") == 1.0  # as a pool process receives it
    sys.modules.pop("iso_rw", None)


def _saved_run_with(tmp_path: Path, module: str) -> Path:
    """A run folder (a metrics row) whose config names `module`:f, the module beside it (not inside)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    (run / "config.yaml").write_text(f"train:\n  output_dir: .\nreward:\n  functions: ['{module}:f']\n")
    (tmp_path / f"{module}.py").write_text(GOOD)
    return run


def test_a_world_writable_trust_file_is_not_used_and_says_so(tmp_path, monkeypatch):
    from hadw.rewards import trust
    from hadw.train.config import ConfigError, load_config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    run = _saved_run_with(tmp_path, "ww_rw")
    monkeypatch.chdir(tmp_path)
    trust.remember("ww_rw:f", str(tmp_path))  # you ran it here: trusted
    path = trust.trust_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # yours alone
    assert load_config(run / "config.yaml").reward.correctness == "ww_rw:f"
    path.chmod(0o666)  # anyone may now add a module to it
    with pytest.raises(ConfigError, match=rf"{path} is world-writable \(mode 666\), so not used; .*chmod 600"):
        load_config(run / "config.yaml")
    path.write_text("{not json")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match=rf"{path} is not JSON \(JSONDecodeError\), so nothing is trusted"):
        load_config(run / "config.yaml")
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ConfigError, match=rf"{path} is a link, never followed"):
        load_config(run / "config.yaml")


def test_remembering_replaces_a_world_writable_trust_file_with_one_of_yours(tmp_path, monkeypatch, capsys):
    from hadw.rewards import trust

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "mine_rw.py").write_text(GOOD)
    path = trust.trust_file()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"rewards": [{"spec": "planted:f", "folder": "/x", "sha256": "0" * 64}]}))
    path.chmod(0o666)
    trust.remember("mine_rw:f", str(tmp_path))
    assert "world-writable" in capsys.readouterr().err
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [e["spec"] for e in json.loads(path.read_text())["rewards"]] == ["mine_rw:f"]  # the planted entry gone


def test_a_recipe_beside_your_reward_resumes_while_the_module_is_the_one_you_ran(tmp_path, monkeypatch):
    """A config resumed is a run's: its reward must be trusted. Your own recipe beside your module (the common
    layout) resumes, since naming it recorded its hash; the same module changed since is refused."""
    from hadw.train.config import ConfigError, load_config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "own_rw.py").write_text(GOOD)
    (project / "recipe.yaml").write_text("train:\n  output_dir: runs/a\nreward:\n  functions: ['own_rw:f']\n")
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    assert load_config("recipe.yaml").reward.correctness == "own_rw:f"  # you named it: remembered
    (project / "runs" / "a").mkdir(parents=True)
    (project / "runs" / "a" / "metrics.jsonl").write_text('{"step": 0}\n')
    assert load_config("recipe.yaml", resume=True).reward.correctness == "own_rw:f"
    (project / "own_rw.py").write_text(GOOD + "# changed\n")
    with pytest.raises(ConfigError, match=r"reward 'own_rw:f' .* is not one you have run on this machine"):
        load_config("recipe.yaml", resume=True)
    sys.modules.pop("own_rw", None)
