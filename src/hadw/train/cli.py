"""Commands: `hadw train`, `hadw sft`, `hadw demo`, `hadw plot`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def train(
    config: Annotated[Path | None, typer.Argument(help="YAML config (see examples/); omit for the defaults")] = None,
    overrides: Annotated[
        list[str] | None, typer.Argument(help="dotted overrides, e.g. hadw.enabled=true train.steps=50")
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="continue from the latest checkpoint of output_dir")] = False,
) -> None:
    """Train with GRPO / GSPO / DAPO (algorithm.preset), with or without HA-DW (hadw.enabled)."""
    from hadw.data import DatasetError
    from hadw.train.config import ConfigError, load_config
    from hadw.train.trainer import NonFiniteLossError, Trainer

    _quiet_transformers()
    overrides = list(overrides or [])
    if config is not None and "=" in str(config) and not config.is_file():  # `hadw train key=value ...`
        config, overrides = None, [str(config), *overrides]
    try:
        cfg = load_config(config, overrides)
    except ConfigError as err:
        typer.secho(f"config error: {err}", fg="red", err=True)
        raise typer.Exit(2) from None
    try:
        result = Trainer(cfg, resume=resume).train()
    except DatasetError as err:
        typer.secho(f"data error: {err}", fg="red", err=True)
        raise typer.Exit(2) from None
    except FileNotFoundError as err:  # model.path: no such folder, or a Hub id that cannot be had
        if not str(err).startswith("load_model:"):
            raise
        typer.secho(f"model error: model.path={cfg.model.path!r}: {err}", fg="red", err=True)
        raise typer.Exit(2) from None
    except NonFiniteLossError as err:
        typer.secho(str(err), fg="red", err=True)
        raise typer.Exit(3) from None
    typer.echo(f"done: {result.run_dir} (final greedy accuracy {result.final_eval['all']['avg@k']:.3f})")


def sft(
    out_dir: Annotated[Path, typer.Argument(help="where the warm-started model is saved")],
    task: Annotated[str, typer.Option(help="built-in task")] = "addition",
    data: Annotated[
        str | None, typer.Option("--data", help="instead of --task: benchmark:NAME, hf:ORG/NAME or a file")
    ] = None,
    prompt_field: Annotated[str | None, typer.Option(help="--data: the question field (dotted path)")] = None,
    answer_field: Annotated[str | None, typer.Option(help="--data: the gold-answer field (dotted path)")] = None,
    levels: Annotated[str, typer.Option(help="comma-separated levels")] = "1,2,3",
    model: Annotated[Path | None, typer.Option(help="start from this model folder (default: a new tiny model)")] = None,
    target_accuracy: Annotated[float, typer.Option(help="stop at this greedy accuracy")] = 0.5,
    max_steps: Annotated[int, typer.Option(help="stop after this many SFT steps")] = 3000,
    max_seconds: Annotated[float | None, typer.Option(help="stop after this many seconds")] = None,
    lr: Annotated[float, typer.Option(help="AdamW learning rate")] = 2e-3,
    batch_size: Annotated[int, typer.Option(help="problems per step")] = 64,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
) -> None:
    """SFT warm start on a built-in task, stopping at a target accuracy; saves a normal HF model."""
    import torch

    from hadw.rollout import build_tiny_model, load_model
    from hadw.train.sft import SFTConfig, sft_warm_start

    _quiet_transformers()
    torch.manual_seed(seed)
    start = model or build_tiny_model(out_dir / "random_init", seed=seed)
    net, tokenizer = load_model(start)
    from hadw.data import DatasetError, make_fields

    try:
        fields = make_fields("auto", prompt_field, answer_field)
    except DatasetError as err:
        raise typer.BadParameter(str(err), param_hint="'--prompt-field' / '--answer-field'") from None
    cfg = SFTConfig(
        task=task,
        source=data or "",
        fields=fields,
        levels=[int(x) for x in levels.split(",")],
        batch_size=batch_size,
        lr=lr,
        max_steps=max_steps,
        target_accuracy=target_accuracy,
        max_seconds=max_seconds,
        seed=seed,
    )
    try:
        result = sft_warm_start(net, tokenizer, cfg, log=lambda e: typer.echo(e))
    except DatasetError as err:
        typer.secho(f"data error: {err}", fg="red", err=True)
        raise typer.Exit(2) from None
    net.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    typer.echo(f"saved {out_dir}: {result.steps} steps, greedy accuracy {result.accuracy:.3f}")


def demo(
    out_dir: Annotated[Path, typer.Option(help="where runs, table and plot go")] = Path("runs/demo"),
    steps: Annotated[int | None, typer.Option(help="RL steps per arm (default: the demo's 100)")] = None,
    seed: Annotated[int, typer.Option(help="random seed (same for both arms)")] = 0,
) -> None:
    """Tiny model, CPU: warm start, then GRPO vs GRPO+HA-DW from the same start; table + PNG."""
    from hadw.train.demo import DemoSettings, run_demo

    _quiet_transformers()
    settings = DemoSettings(out_dir=out_dir, seed=seed)
    if steps is not None:
        settings.steps = steps
    run_demo(settings)


def plot(
    run_dirs: Annotated[list[Path], typer.Argument(help="one or more run folders (with metrics.jsonl)")],
    out: Annotated[Path, typer.Option(help="PNG to write")] = Path("curves.png"),
) -> None:
    """Draw the training curves (accuracy, anchor) of finished or running runs."""
    from hadw.train.demo import plot_runs

    typer.echo(plot_runs({d.name: d for d in run_dirs}, out))


def register(app: typer.Typer) -> None:
    app.command("train")(train)
    app.command("sft")(sft)
    app.command("demo")(demo)
    app.command("plot")(plot)
