import os
import re

import pytest
from typer.testing import CliRunner

from hadw import __version__
from hadw.cli import build_app
from tests.conftest import REPO_ROOT


def test_version_command_prints_package_version():
    result = CliRunner().invoke(build_app(), ["version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == __version__


def test_version_option_prints_the_version_the_changelog_releases():
    """`hadw --version` needs no command (an eager root option); the version it prints, defined once in
    hadw/__init__.py, is the newest release heading of CHANGELOG.md: cutting a release bumps both."""
    result = CliRunner().invoke(build_app(), ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"{__version__}\n"
    releases = re.findall(r"^## (\d+\.\d+\.\d+) \(", (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    assert releases[:1] == [__version__]


def _commands(command, path=()):
    """(path, command) for every leaf command of the click tree behind the typer app."""
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield path, command


def _leaf_commands():
    import typer

    return list(_commands(typer.main.get_command(build_app())))


def test_train_is_listed_first():
    import typer

    assert next(iter(typer.main.get_command(build_app()).commands)) == "train"


def test_every_option_has_help_and_a_real_long_name():
    """CLI polish: help text on every option and argument; no one-letter long names (`--p`, `--k`)."""
    problems = []
    for path, command in _leaf_commands():
        for param in command.params:
            where = f"hadw {' '.join(path)} {param.opts[0] if param.opts else param.name}"
            if not getattr(param, "help", None):
                problems.append(f"{where}: no help")
            problems += [f"{where}: one-letter long name {o}" for o in param.opts if o.startswith("--") and len(o) <= 3]
    assert problems == []


def test_no_options_that_differ_only_by_case():
    for path, command in _leaf_commands():
        names = [o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]
        assert len({n.lower() for n in names}) == len(set(names)), (path, names)


def test_one_typer_style_annotated():
    """Every command declares its options as `name: Annotated[T, typer.Option(...)] = default`: no parameter's
    default is a typer OptionInfo (the old style, where a shared option object also carried the default)."""
    import inspect

    import typer

    old_style = []
    app = build_app()
    callbacks = [c.callback for c in app.registered_commands]
    callbacks += [c.callback for g in app.registered_groups for c in g.typer_instance.registered_commands]
    for callback in callbacks:
        for name, param in inspect.signature(callback).parameters.items():
            if isinstance(param.default, typer.models.ParameterInfo):
                old_style.append(f"{callback.__module__}.{callback.__name__}({name})")
    assert len(callbacks) >= 12 and old_style == []


@pytest.mark.parametrize(
    "args, needle",
    [
        (["eval", "m", "--data", "task:addition", "-k", "abc"], "'--num-samples'"),
        (["eval"], "Missing argument 'model'"),
        (["train", "--nonsense"], "No such option: --nonsense"),
        (["bias", "table", "-p", "1.5"], "--success-rate values must lie in [0, 1]"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args, needle):
    """Bad command lines (typer/click usage errors) are one line naming the option, exit 2, no box."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "hadw.cli", *args], capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert needle in lines[0] and "--help" in lines[0] and "╭" not in result.stderr


@pytest.mark.parametrize("args", [["bias", "table", "-G", "8", "-p", "0.5"], ["compare", "--help"]])
def test_an_ascii_terminal_gets_the_output_not_a_unicode_traceback(args):
    """Issue 39, finding 9: PYTHONIOENCODING=ascii (or a terminal in a C locale) ended `hadw eval`, `probe`, `bias`
    and `--help` with a UnicodeEncodeError at the first ×, −, Â or —: the characters are replaced instead."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    proc = subprocess.run([sys.executable, "-m", "hadw.cli", *args], env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout.strip() and proc.stdout.isascii()
