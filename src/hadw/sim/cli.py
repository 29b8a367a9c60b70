"""`hadw sim`: GRPO ± HA-DW on simulated prompts with known success rates (see docs/sim.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from hadw.cli_lists import parse_floats, parse_ints
from hadw.errors import UserError
from hadw.progress import stdout_console


class SimInputError(UserError):
    """A `hadw sim` option outside what the simulator allows."""


def _anchor_options(pairs: list[str]) -> dict[str, float | int]:
    options: dict[str, float | int] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            options[key] = int(value) if value.lstrip("-").isdigit() else float(value)
        except ValueError:
            sep = ""
        if not sep or not key:
            raise SimInputError(f"--anchor-opt {pair!r}: expected KEY=NUMBER, e.g. k=10, eta=1.0, value=0.5")
    return options


def _check_numbers(steps, prompts, group_size, eval_every, spread, skill_lr, lam, lr, level_prompts, anchor) -> None:
    """The numeric options, checked before a progress bar starts: NaN / inf / out of range is one line."""
    from hadw.cli_lists import check_range
    from hadw.core import ANCHORS

    for option, value, low in (
        ("--steps", steps, 1),
        ("--prompts", prompts, 1),
        ("--group-size", group_size, 2),
        ("--eval-every", eval_every, 1),
        ("--spread", spread, 0.0),
        ("--skill-lr", skill_lr, 0.0),
    ):
        check_range(option, value, low)
    check_range("--lam", lam, 0.0, 100.0, low_open=True)
    check_range("--lr", lr, 0.0, low_open=True)
    if min(parse_ints(level_prompts, "--level-prompts")) < 1:
        raise SimInputError(f"--level-prompts {level_prompts!r}: every level needs >= 1 prompt")
    if anchor not in ANCHORS:
        raise SimInputError(f"--anchor {anchor!r}: unknown anchor; allowed: {', '.join(ANCHORS)}")


def _owned_json(data: bytes) -> bool:
    """A --json file hadw sim wrote (its marker, or how a version before the marker began the file)."""
    from hadw.safe_files import owned_json

    return owned_json("sim")(data) or data.startswith(b'{\n "settings": ')


def _check_outputs(plot_path: Path, json_path: str | None, overwrite: bool) -> None:
    """--plot and --json follow the rules of every file hadw writes (hadw.safe_files.check_output)."""
    from hadw.safe_files import check_figure, check_output

    check_figure(plot_path, "--plot", overwrite)
    if json_path not in (None, "-"):
        check_output(Path(json_path), "--json", _owned_json, overwrite)


def sim(
    arms: Annotated[
        str,
        typer.Option(
            "--arms",
            help="Comma-separated arms: grpo, grpo_lam, hadw, hadw_norm, hadw_oracle, "
            "debiased; the first is the baseline of the paired differences.",
        ),
    ] = "grpo,grpo_lam,hadw,hadw_norm,hadw_oracle,debiased",
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds, e.g. 0-19 or 0,1,2.")] = "0-19",
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="softmax (K answers, shared parameters, the trainer's optimiser) | logit "
            "(the old one-logit-per-prompt SGD model).",
        ),
    ] = "softmax",
    optimizer: Annotated[
        str, typer.Option("--optimizer", help="adamw (the trainer's default) | sgd (plain, as optim.name=sgd).")
    ] = "adamw",
    steps: Annotated[int, typer.Option("--steps", help="Rollout batches (training steps) per run.")] = 200,
    prompts: Annotated[int, typer.Option("--prompts", help="Prompts per step (rollout batch = prompts × G).")] = 16,
    group_size: Annotated[int, typer.Option("--group-size", help="G: responses per prompt.")] = 8,
    level_prompts: Annotated[
        str, typer.Option("--level-prompts", help="Prompts in each difficulty level, e.g. 1000,1000,1000.")
    ] = "1000,1000,1000",
    offsets: Annotated[
        str, typer.Option("--offsets", help="Initial logit of each level's success rate (harder: lower).")
    ] = "0.25,-1.45,-2.2",
    spread: Annotated[float, typer.Option("--spread", help="Std of the per-prompt logit jitter.")] = 1.0,
    lr: Annotated[
        float | None, typer.Option("--lr", help="Learning rate (default: the model and optimiser's calibrated one).")
    ] = None,
    skill_lr: Annotated[float, typer.Option("--skill-lr", help="logit model: SGD rate of the shared skill.")] = 0.0005,
    lam: Annotated[float, typer.Option("--lam", help="λ of HA-DW (Φ = λ·exp(D·M)).")] = 1.3,
    normalize: Annotated[
        str, typer.Option("--normalize", help="The hadw arm's Φ: none | batch (mean 1 over informative responses).")
    ] = "none",
    advantage_scale: Annotated[
        float, typer.Option("--advantage-scale", help="Every arm's Â·Φ times this (algorithm.advantage_scale).")
    ] = 1.0,
    anchor: Annotated[
        str, typer.Option("--anchor", help="Anchor kind from hadw.core.make_anchor (window, kalman, ema, fixed, ...).")
    ] = "window",
    anchor_opt: Annotated[
        list[str], typer.Option("--anchor-opt", help="KEY=NUMBER option of the anchor, e.g. k=10 (repeat).")
    ] = [],
    answers: Annotated[int, typer.Option("--answers", help="softmax: K candidate answers (per token) per prompt.")] = 4,
    tokens: Annotated[
        int,
        typer.Option(
            "--tokens",
            help="softmax: T tokens per answer (right when all are); T > 1: wrong answers "
            "share tokens with the right one, as a language model's do.",
        ),
    ] = 1,
    wrong_concentration: Annotated[
        float,
        typer.Option(
            "--wrong-concentration", help="softmax: share of the wrong mass on the dominant wrong answer at the start."
        ),
    ] = 0.6,
    features: Annotated[int, typer.Option("--features", help="softmax: random feature dims per prompt.")] = 16,
    mini_batch_prompts: Annotated[
        int, typer.Option("--mini-batch-prompts", help="softmax: prompts per optimiser step.")
    ] = 4,
    ppo_epochs: Annotated[int, typer.Option("--ppo-epochs", help="softmax: passes over each rollout batch.")] = 1,
    grad_clip: Annotated[float, typer.Option("--grad-clip", help="softmax: global-norm clip (0 = off).")] = 1.0,
    warmup_steps: Annotated[int, typer.Option("--warmup-steps", help="softmax: optimiser steps of warm-up.")] = 5,
    weight_decay: Annotated[float, typer.Option("--weight-decay", help="softmax: weight decay.")] = 0.0,
    kl_coef: Annotated[float, typer.Option("--kl-coef", help="softmax: β of the KL to the initial policy.")] = 0.0,
    entropy_coef: Annotated[float, typer.Option("--entropy-coef", help="softmax: entropy bonus weight.")] = 0.0,
    paired_sd: Annotated[
        float,
        typer.Option(
            "--paired-sd",
            help="SD of a real run's paired difference (for 'seeds needed'); default: the tiny model's measured one.",
        ),
    ] = 0.013,
    eval_every: Annotated[int, typer.Option("--eval-every", help="Record the true accuracy every N steps.")] = 5,
    plot_path: Annotated[
        Path, typer.Option("--plot", help="Figure of the learning curves (.png, .pdf, .svg, .eps or .ps).")
    ] = Path("runs/sim/sim.png"),
    json_path: Annotated[
        str | None, typer.Option("--json", help="Write the results as JSON to this file ('-' = stdout).")
    ] = None,
    threads: Annotated[int, typer.Option("--threads", help="torch threads (the work is many small ops).")] = 1,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace existing output files that hadw did not write.")
    ] = False,
) -> None:
    """Simulate GRPO ± HA-DW on prompts with known success rates; curves per difficulty level, over seeds."""
    import torch

    from hadw.progress import Bar
    from hadw.sim.engine import ARMS, SimSettings, simulate
    from hadw.sim.report import caveat, plot, rich_table, to_json

    _check_numbers(steps, prompts, group_size, eval_every, spread, skill_lr, lam, lr, level_prompts, anchor)
    arm_list = [a for a in arms.replace(" ", "").split(",") if a]
    if not arm_list or any(a not in ARMS for a in arm_list):
        raise SimInputError(f"--arms {arms!r}: allowed arms are {', '.join(ARMS)}")
    if not paired_sd > 0:
        raise SimInputError(f"--paired-sd {paired_sd}: must be > 0")
    _check_outputs(plot_path, json_path, overwrite)  # before the simulation, not after
    settings = SimSettings(
        model=model,
        prompts_per_level=parse_ints(level_prompts, "--level-prompts"),
        level_offsets=parse_floats(offsets, "--offsets"),
        prompt_spread=spread,
        group_size=group_size,
        prompts=prompts,
        steps=steps,
        lr=lr,
        skill_lr=skill_lr,
        lam=lam,
        normalize=normalize,
        advantage_scale=advantage_scale,
        anchor=anchor,
        anchor_options=_anchor_options(anchor_opt),
        seeds=parse_ints(seeds, "--seeds"),
        arms=arm_list,
        eval_every=eval_every,
        answers=answers,
        tokens=tokens,
        wrong_concentration=wrong_concentration,
        features=features,
        optimizer=optimizer,
        weight_decay=weight_decay,
        warmup_steps=warmup_steps,
        grad_clip=grad_clip,
        mini_batch_prompts=mini_batch_prompts,
        ppo_epochs=ppo_epochs,
        kl_coef=kl_coef,
        entropy_coef=entropy_coef,
    )
    torch.set_num_threads(max(1, threads))
    start = time.perf_counter()
    try:
        with Bar(steps * len(arm_list), "sim", unit="step") as bar:
            result = simulate(settings, progress=bar.update)
    except (ValueError, TypeError, KeyError) as err:  # bad settings or anchor options, found by the engine
        raise SimInputError(f"hadw sim: {err}") from None
    console = stdout_console()
    console.print(rich_table(result, paired_sd=paired_sd))
    if note := caveat(result):
        console.print(f"[bold yellow]Caveat:[/] {note}")
    png = plot(result, plot_path)
    console.print(f"{time.perf_counter() - start:.1f} s; curves: {png}")
    if json_path == "-":
        typer.echo(json.dumps(to_json(result, paired_sd=paired_sd), indent=1))
    elif json_path:
        from hadw.safe_files import write_output

        data = {"written_by": "hadw sim", **to_json(result, paired_sd=paired_sd)}
        write_output(Path(json_path), json.dumps(data, indent=1) + "\n", "--json", _owned_json, overwrite)


def register(app: typer.Typer) -> None:
    app.command("sim")(sim)
