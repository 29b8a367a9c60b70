"""The `hadw` command line. Each sub-command lives beside the code it drives and registers itself here."""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib
import os
import sys

import typer

from hadw.errors import UserError, missing_extra

app = typer.Typer(
    name="hadw",
    help="RLVR (GRPO / GSPO / DAPO) with History-Aware Adaptive Difficulty Weighting.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

# Modules exposing `register(app: typer.Typer) -> None`, with the commands each registers. Imported lazily in
# `main` so that `import hadw.cli` stays cheap. Listed in `hadw --help` in this order: the main job first.
# A module whose optional packages are missing (the base install has torch, numpy, scipy, typer, rich)
# registers its commands as one-line "pip install 'hadw[extra]'" errors instead, so `hadw --help` always works.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "hadw.train.cli": ("train", "sft"),
    "hadw.eval.cli": ("eval", "probe"),
    "hadw.experiments.cli": ("compare", "demo", "plot"),
    "hadw.theory.cli": ("bias",),
    "hadw.sim.cli": ("sim",),
    "hadw.data.cli": ("data",),
}
# The extra each command needs in full (pyproject.toml); a command not listed needs the base install only.
COMMAND_EXTRAS = {"train": "train", "sft": "train", "compare": "train", "demo": "train", "plot": "train",
                  "eval": "eval", "probe": "eval", "data": "eval", "sim": "theory", "bias": "theory"}  # fmt: skip


# The commands that may score with the verifier pool: its environment setting is checked before they start.
POOL_COMMANDS = {"train", "compare", "demo", "eval", "probe"}


# OS errors a user fixes (a path, a permission, a full disk), shown as one line like a UserError.
USER_OS_ERRORS = {
    errno.ENOENT,
    errno.EACCES,
    errno.EPERM,
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EISDIR,
    errno.ENOTDIR,
    errno.ENAMETOOLONG,
    errno.EEXIST,
}  # EEXIST: a folder asked for where a file is


def user_error_line(err: BaseException) -> str | None:
    """The one line shown for a user error, or None when err is a bug (which keeps its traceback)."""
    if isinstance(err, UserError):
        return " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, OSError) and err.errno in USER_OS_ERRORS:
        where = f": {err.filename}" if err.filename else ""
        return f"{err.strerror or os.strerror(err.errno)}{where}"
    return None


def handle_user_errors(fn, command: str | None = None):
    """Wrap a command: a user error prints one line and exits with its code (2); HADW_DEBUG=1 re-raises
    it with the traceback. Applied to every registered command, so no command handles errors itself."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            if (command or fn.__name__) in POOL_COMMANDS:  # a bad setting is one line before the work, not a hang
                from hadw.rewards.pool import default_num_workers

                default_num_workers()
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except Exception as err:
            name = command or fn.__name__
            err = missing_extra(err, f"hadw {name}", COMMAND_EXTRAS.get(name)) or err
            line = user_error_line(err)
            if line is None or os.environ.get("HADW_DEBUG") == "1":
                raise
            with contextlib.suppress(OSError):  # a closed terminal (SIGHUP): the exit code still tells
                typer.secho(f"{getattr(err, 'prefix', 'error: ')}{line}", fg="red", err=True)
            raise typer.Exit(getattr(err, "exit_code", 2)) from None

    return wrapper


def build_app() -> typer.Typer:
    if any(info.name == "version" for info in app.registered_commands):  # built already
        return app
    for module_name, commands in COMMAND_MODULES.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            if missing_extra(err) is None:
                raise
            for command in commands:
                _register_missing(command, err)
            continue
        module.register(app)
    app.command("version")(version)
    for info in app.registered_commands:
        if not getattr(info.callback, "_hadw_wrapped", False):
            info.callback = handle_user_errors(info.callback, info.name or info.callback.__name__)
            info.callback._hadw_wrapped = True  # type: ignore[attr-defined]
    return app


def _register_missing(command: str, err: ImportError) -> None:
    """`hadw COMMAND ...` as a one-line error naming the extra its module needs (listed in --help as such)."""
    problem = missing_extra(err, f"hadw {command}", COMMAND_EXTRAS.get(command))

    def missing(ctx: typer.Context) -> None:
        raise problem

    missing.__name__ = command
    app.command(
        command,
        help=f"(not installed: {problem})",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
        add_help_option=False,
    )(missing)


def _print_version(value: bool) -> None:
    """`hadw --version`: the version and exit, before any command is looked for (an eager option)."""
    if value:
        version()
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", help="Print the installed hadw version and exit.", callback=_print_version, is_eager=True
    ),
) -> None:
    """RLVR (GRPO / GSPO / DAPO) with History-Aware Adaptive Difficulty Weighting."""


def version() -> None:
    """Print the installed hadw version."""
    from hadw import __version__

    typer.echo(__version__)


def _usage_error_line(err: typer.TyperException) -> str | None:
    """One line for a command-line usage error (a bad option value, a missing argument), or None when err is
    not one (e.g. `hadw` alone, which shows the help)."""
    if type(err).__name__ == "NoArgsIsHelpError" or not hasattr(err, "format_message"):
        return None
    ctx = getattr(err, "ctx", None)
    command = ctx.command_path if ctx is not None else "hadw"
    return f"error: {command}: {' '.join(err.format_message().split())} (see {command} --help)"


def _writable_in_any_encoding() -> None:
    """stdout / stderr in an encoding that cannot write hadw's text (PYTHONIOENCODING=ascii, a C locale): a
    character it lacks (×, −, Â, —) is replaced instead of ending the command with a UnicodeEncodeError traceback."""
    sample = "\u2212×Â—"
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        with contextlib.suppress(AttributeError, LookupError, TypeError, ValueError, OSError):  # a replaced stream
            if encoding and sample.encode(encoding, errors="ignore").decode(encoding) != sample:
                stream.reconfigure(errors="replace")


def main() -> None:
    _writable_in_any_encoding()
    debug = os.environ.get("HADW_DEBUG") == "1"
    try:
        code = build_app()(standalone_mode=False)
    except typer.TyperException as err:  # the command line itself is wrong: one line, exit 2
        line = _usage_error_line(err)
        if line is None or debug:
            err.show()
            sys.exit(getattr(err, "exit_code", 2))
        print(line, file=sys.stderr)
        sys.exit(getattr(err, "exit_code", 2))
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(1)
    except Exception as err:  # raised outside a command (or with HADW_DEBUG=1)
        line = user_error_line(missing_extra(err, "hadw") or err)
        if line is None or debug:
            raise
        print(f"{getattr(err, 'prefix', 'error: ')}{line}", file=sys.stderr)
        sys.exit(getattr(err, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
