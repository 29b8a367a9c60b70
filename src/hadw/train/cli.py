"""Commands: `hadw train`, `hadw sft`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hadw.data.tasks import TINY_LEVELS, TINY_TASK, TINY_WARM_START_ACCURACY


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
    show_config: Annotated[
        bool, typer.Option("--show-config", help="print the resolved config with each field's doc, then exit")
    ] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="move a run already in output_dir aside (to <dir>.old-N) and start anew")
    ] = False,
    accept_changes: Annotated[
        bool,
        typer.Option("--accept-changes", help="with --resume: apply settings that differ from the saved run's"),
    ] = False,
    interpolate: Annotated[
        bool,
        typer.Option(
            "--interpolate", help="resolve ${...} in values (${train.seed}, ${oc.env:VAR}); else they are literal text"
        ),
    ] = False,
) -> None:
    """Train with GRPO / GSPO / DAPO (algorithm.preset), with or without HA-DW (hadw.enabled)."""
    from hadw.train.config import load_config

    overrides = list(overrides or [])
    if config is not None and "=" in str(config) and not config.is_file():  # `hadw train key=value ...`
        config, overrides = None, [str(config), *overrides]
    from hadw.train.run_dir import check_flags

    check_flags(resume, overwrite)  # before load_config's --resume check: the contradiction is the error to name
    # errors: one line, exit 2 (hadw.cli.handle_user_errors); --resume's run is checked before any reward import
    cfg = load_config(config, overrides, interpolate, resume=resume)
    if show_config:
        from hadw.train.config_docs import show_config as render

        typer.echo(render(cfg), nl=False)
        if cfg.engine == "trl":  # and what TRL is given: the GRPOConfig fields hadw sets
            from hadw.train.engines.trl_args import show

            typer.echo(show(cfg, Path(cfg.train.output_dir).absolute()), nl=False)
        return
    # after the config: a mistake in it is one line without transformers (tests/test_cli_startup.py)
    from hadw.train.engines import train_run
    from hadw.train.engines.trl_launch import TRLWorkerError
    from hadw.train.result import NonFiniteLossError

    if cfg.engine == "native":  # (the engine=trl parent loads no model: its workers have their own logging)
        _quiet_transformers()
    from hadw.train.model_defaults import start_line

    typer.echo(start_line(cfg))  # the first line: what it trains, its recipe and warm start, before anything slow
    try:
        result = train_run(cfg, resume=resume, overwrite=overwrite, accept_changes=accept_changes)
    except NonFiniteLossError as err:
        typer.secho(str(err), fg="red", err=True)
        raise typer.Exit(3) from None
    except TRLWorkerError as err:  # its traceback is the worker's, above; the parent's would only add the launch
        typer.secho(f"error: {err}", fg="red", err=True)
        raise typer.Exit(1) from None
    if result.eval_failure is not None:  # never a 0.000 that is the reward's failure
        typer.secho(
            f"done: {result.run_dir} (final evaluation failed: reward {cfg.reward.correctness!r} failed on every "
            f"completion: {result.eval_failure}; fix it, then: hadw eval {result.run_dir})",
            fg="red",
        )
        raise typer.Exit(1)
    if result.final_eval and "all" in result.final_eval:
        typer.echo(f"done: {result.run_dir} (final greedy accuracy {result.final_eval['all']['greedy']:.3f})")
    else:
        typer.echo(f"done: {result.run_dir} (no evaluation prompts: data.eval_size=0 or too few rows)")


def sft(
    out_dir: Annotated[Path, typer.Argument(help="where the warm-started model is saved")],
    task: Annotated[str, typer.Option(help="built-in task")] = TINY_TASK,
    data: Annotated[
        str | None, typer.Option("--data", help="instead of --task: benchmark:NAME, hf:ORG/NAME or a file")
    ] = None,
    prompt_field: Annotated[str | None, typer.Option(help="--data: the question field (dotted path)")] = None,
    answer_field: Annotated[str | None, typer.Option(help="--data: the gold-answer field (dotted path)")] = None,
    levels: Annotated[str, typer.Option(help="comma-separated levels")] = ",".join(map(str, TINY_LEVELS)),
    model: Annotated[Path | None, typer.Option(help="start from this model folder (default: a new tiny model)")] = None,
    target_accuracy: Annotated[float, typer.Option(help="stop at this greedy accuracy")] = TINY_WARM_START_ACCURACY,
    max_steps: Annotated[int, typer.Option(help="stop after this many SFT steps")] = 3000,
    max_seconds: Annotated[float | None, typer.Option(help="stop after this many seconds")] = None,
    lr: Annotated[float, typer.Option(help="AdamW learning rate")] = 2e-3,
    batch_size: Annotated[int, typer.Option(help="problems per step")] = 64,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="write into OUT_DIR even when it already holds files (a model)")
    ] = False,
) -> None:
    """SFT warm start on a built-in task, stopping at a target accuracy; saves a normal HF model."""
    import tempfile

    from hadw.cli_lists import check_range, parse_ints
    from hadw.data import TASKS, DatasetError, make_fields

    # every option checked before a model is built or loaded: a bad one fails in a second, in one line
    check_range("--target-accuracy", target_accuracy, 0.0, 1.0)  # above 1 would never be reached
    check_range("--max-steps", max_steps, 0)
    check_range("--max-seconds", max_seconds, 0.0, low_open=True)
    check_range("--lr", lr, 0.0, 1.0, low_open=True)
    check_range("--batch-size", batch_size, 1, 1 << 20)
    level_list = parse_ints(levels, "--levels")
    if not data:
        if task not in TASKS:
            raise typer.BadParameter(f"{task!r}; allowed: {', '.join(TASKS)}", param_hint="'--task'")
        bad = [level for level in level_list if level not in TASKS[task].levels]
        if bad:
            allowed = ", ".join(map(str, TASKS[task].levels))
            raise typer.BadParameter(f"{bad} not levels of task {task!r}; allowed: {allowed}", param_hint="'--levels'")
    try:
        fields = make_fields("auto", prompt_field, answer_field)
    except DatasetError as err:
        raise typer.BadParameter(str(err), param_hint="'--prompt-field' / '--answer-field'") from None
    if model is not None and not (model.is_dir() and (model / "config.json").is_file()):
        raise typer.BadParameter(f"{model}: not a model folder (no config.json)", param_hint="'--model'")
    _check_sft_out(out_dir, overwrite)

    # imported after the option checks: a bad option is one line without torch (tests/test_cli_startup.py)
    import torch

    from hadw.rollout import build_tiny_model, load_model
    from hadw.train.sft import SFTConfig, sft_warm_start

    _quiet_transformers()
    torch.manual_seed(seed)
    scratch = tempfile.TemporaryDirectory(prefix="hadw-sft-")  # the random init: nothing left in OUT_DIR on failure
    start = model or build_tiny_model(Path(scratch.name) / "random_init", seed=seed)
    try:
        net, tokenizer = load_model(start)
    except Exception as err:
        from hadw.rollout.models import model_load_error

        raise typer.BadParameter(
            f"{start}: cannot load the model: {model_load_error(err)}", param_hint="'--model'"
        ) from None
    cfg = SFTConfig(
        task=task,
        source=data or "",
        fields=fields,
        levels=level_list,
        batch_size=batch_size,
        lr=lr,
        max_steps=max_steps,
        target_accuracy=target_accuracy,
        max_seconds=max_seconds,
        seed=seed,
    )
    try:
        result = sft_warm_start(net, tokenizer, cfg, log=lambda e: typer.echo(e), progress=None)
    except DatasetError as err:
        typer.secho(f"data error: {err}", fg="red", err=True)
        raise typer.Exit(2) from None
    net.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    scratch.cleanup()
    typer.echo(f"saved {out_dir}: {result.steps} steps, greedy accuracy {result.accuracy:.3f}")


def _check_sft_out(out_dir: Path, overwrite: bool) -> None:
    """OUT_DIR must be new or empty (or --overwrite): saving the model writes config.json, weights and tokenizer
    files over whatever model or files are there."""
    from hadw.safe_files import refuse_link

    refuse_link(out_dir, "(OUT_DIR): remove it or choose another folder")
    if out_dir.exists() and not out_dir.is_dir():
        raise typer.BadParameter(f"{out_dir} is a file, not a folder", param_hint="'OUT_DIR'")
    # random_init/ alone: left by a `hadw sft` of an earlier version that stopped before saving
    if not overwrite and out_dir.is_dir() and {p.name for p in out_dir.iterdir()} - {"random_init"}:
        raise typer.BadParameter(
            f"{out_dir} already holds files ({', '.join(sorted(p.name for p in out_dir.iterdir())[:3])}, ...); "
            "choose a new folder, or pass --overwrite to write the model over them",
            param_hint="'OUT_DIR'",
        )


def register(app: typer.Typer) -> None:
    app.command("train")(train)
    app.command("sft")(sft)
