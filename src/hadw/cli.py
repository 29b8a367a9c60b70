"""The `hadw` command line. Each sub-command lives beside the code it drives and registers itself here."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="hadw",
    help="RLVR (GRPO / GSPO / DAPO) with History-Aware Adaptive Difficulty Weighting.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

# Modules exposing `register(app: typer.Typer) -> None`. Imported lazily in `main` so that
# `import hadw.cli` stays cheap.
COMMAND_MODULES: list[str] = [
    "hadw.theory.cli",
    "hadw.eval.cli",
    "hadw.train.cli",
    "hadw.data.cli",
]


def build_app() -> typer.Typer:
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(app)
    return app


@app.callback()
def _root() -> None:
    """RLVR (GRPO / GSPO / DAPO) with History-Aware Adaptive Difficulty Weighting."""


@app.command("version")
def version() -> None:
    """Print the installed hadw version."""
    from hadw import __version__

    typer.echo(__version__)


def main() -> None:
    build_app()()


if __name__ == "__main__":
    main()
