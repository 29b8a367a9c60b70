"""`hadw data list` and `hadw data download`: where each benchmark is read from, and how to get it offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

data_app = typer.Typer(help="Benchmarks and datasets: where they are read from; download them for offline use.")


@data_app.command("list")
def list_cmd(
    data_dir: Annotated[
        str | None, typer.Option("--data-dir", help="Look here instead of the default data folders.")
    ] = None,
) -> None:
    """Each benchmark: the local file it is read from, or the Hub dataset it falls back to."""
    from hadw.data import BENCHMARKS, HUB_BENCHMARKS, default_data_dirs
    from hadw.data.sources import find_benchmark

    folders = [Path(data_dir)] if data_dir else default_data_dirs()
    typer.echo("data folders searched: " + ", ".join(map(str, folders)))
    for name in BENCHMARKS:
        found = find_benchmark(name, data_dir)
        hub = HUB_BENCHMARKS[name]
        hub_name = hub.repo + (f" ({hub.config})" if hub.config else "")
        where = str(found[0]) if found else f"not here: the Hub, {hub_name}"
        typer.echo(f"  {name:14s} {where}")


@data_app.command("download")
def download_cmd(
    name: Annotated[str, typer.Argument(help="A benchmark name (math500, aime25, ...) or hf:ORG/NAME[:split].")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Data folder to write to (default: ~/.cache/hadw/data).")
    ] = None,
) -> None:
    """Save a benchmark's public Hub copy (or any Hub dataset) as JSONL, to use on an offline machine.

    A benchmark lands in OUT/NAME/from_hub.jsonl, where `benchmark:NAME` finds it when OUT is the data folder
    (HADW_SHARED_DATA=OUT, --data-dir OUT or data.data_dir=OUT). A hf: dataset lands in OUT/ORG__NAME/SPLIT.jsonl.
    """
    from hadw.data import DatasetError, download
    from hadw.data.sources import user_data_dir

    try:
        path, rows = download(name, out or user_data_dir())
    except DatasetError as err:
        typer.secho(f"data error: {err}", fg="red", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {path} ({rows} rows)")


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
