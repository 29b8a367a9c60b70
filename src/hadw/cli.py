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
# Listed in `hadw --help` in this order: the main job first.
COMMAND_MODULES: list[str] = [
    "hadw.train.cli",  # train, sft
    "hadw.eval.cli",  # eval, probe
    "hadw.experiments.cli",  # compare, demo, plot
    "hadw.theory.cli",  # bias
]


def build_app() -> typer.Typer:
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(app)
    app.command("version")(version)
    return app


@app.callback()
def _root() -> None:
    """RLVR (GRPO / GSPO / DAPO) with History-Aware Adaptive Difficulty Weighting."""


def version() -> None:
    """Print the installed hadw version."""
    from hadw import __version__

    typer.echo(__version__)


def main() -> None:
    build_app()()


if __name__ == "__main__":
    main()
