"""`hadw demo`: a tiny model learns arithmetic with GRPO and with GRPO+HA-DW, side by side, on 2 CPU cores.

1. build a tiny Qwen2 model offline and warm-start it with SFT until it solves some problems of every
   level (RL needs groups that are neither all right nor all wrong);
   the task is `sums` levels 2–4 (a 2-digit number plus a 1-digit one, 2+2 digits, 3+2 digits): steps gentle
   enough that 200 RL steps lift all three levels (measured; on `addition` 1–3 only 1-digit sums moved);
2. train GRPO and GRPO+HA-DW from that same start and seed, in two processes (one core each);
3. evaluate both (greedy, by difficulty level) against the warm start; print a table; plot the curves.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from hadw import metrics as M
from hadw.data.tasks import TINY_LEVELS, TINY_TASK, TINY_WARM_START_ACCURACY, TINY_WARM_START_LEVEL_FLOOR
from hadw.experiments.plots import final_eval, plot_runs
from hadw.processes import die_with_parent
from hadw.train.config import load_config
from hadw.train.warm_starts import DEMO_WARM_START

DEMO_TASK = TINY_TASK
DEMO_LEVELS = list(TINY_LEVELS)


@dataclass
class DemoSettings:
    out_dir: Path = Path("runs/demo")
    # 200 steps: L2 / L3 / L4 go 0.75 / 0.47 / 0.23 -> 0.93 / 0.58 / 0.36 greedy (seed 0); 100 steps moved
    # L3 only +0.06. RL on this model costs ~0.3 s a step on one core.
    steps: int = 200
    # SFT stops at the first evaluation (every 50 steps) at or above the target; on `sums` accuracy jumps
    # between evaluations, so the warm start lands at ~0.47 (0.75 / 0.47 / 0.23 by level): every level has
    # mixed groups for RL to learn from.
    sft_target: float = TINY_WARM_START_ACCURACY
    sft_max_steps: int = 1500
    # No wall-clock limit: a limit made a slow or busy machine stop SFT early, get another warm start and so
    # another table (and cache it for the next demo). sft_max_steps bounds it (1500 steps: ~5 min on one core).
    sft_seconds: float | None = None
    seed: int = 0
    # The shipped start (hadw.train.warm_starts; the same file on every machine), or "rebuild": SFT here, which gives
    # another start on another CPU's kernels.
    warm_start: str = DEMO_WARM_START
    eval_size: int = 300
    # Measured on this model (100 steps, 4 optimiser steps per batch): 1e-4 lifts the easiest level by 14-20
    # points (addition and sums); 2e-4 and above make GRPO lose accuracy (sums L1-3: +0.04 overall vs +0.14).
    lr: float = 1e-4
    mini_batch_prompts: int = 4  # 4 optimiser steps per rollout batch of 16 prompts
    overwrite: bool = False  # replace result files in out_dir that hadw demo did not write


def rl_overrides(settings: DemoSettings, model_path: Path, run_dir: Path, hadw: bool) -> list[str]:
    """The demo's RL recipe (also used by benchmarks/studies/hadw_effect/): tiny model, plain prompts, G = 8."""
    return [
        f"model.path={model_path}",
        f"data.source=task:{DEMO_TASK}",
        f"data.levels=[{','.join(map(str, DEMO_LEVELS))}]",
        "data.template=plain",
        "data.chat_template=never",
        f"data.eval_size={settings.eval_size}",
        "reward.functions=[exact]",
        "reward.correctness=exact",
        "rollout.group_size=8",
        "rollout.max_new_tokens=6",
        "rollout.temperature=1.0",
        f"train.steps={settings.steps}",
        "train.prompts_per_step=16",
        f"train.mini_batch_prompts={settings.mini_batch_prompts}",
        f"train.seed={settings.seed}",
        f"train.output_dir={run_dir}",
        "train.num_threads=1",
        f"optim.lr={settings.lr}",
        "optim.warmup_steps=5",
        "optim.weight_decay=0.0",
        f"hadw.enabled={str(hadw).lower()}",
        "logging.progress=false",
        "logging.sample_every=20",
    ]


def warm_start(
    out_dir: Path,
    seconds: float | None,
    target: float,
    seed: int = 0,
    levels=None,
    max_steps: int = 1500,
    log=print,
    model_shape: dict | None = None,
) -> Path:
    """Build the tiny model and SFT it here (`--warm-start rebuild`); returns its folder, out_dir/warm_start.

    The result depends on this CPU's kernels (hadw.train.warm_starts says why): the shipped starts are the default.
    A start this function built before is reused only when its record says it was built for the same request and
    its files are unchanged; a folder it did not build is refused, never reused or removed. A start with a level
    under the floor is refused in one line.
    seconds: a wall-clock limit (None: none; the demo's, so that its warm start does not depend on the machine's speed).
    """
    from hadw.rollout import build_tiny_model, load_model
    from hadw.train import warm_starts as W
    from hadw.train.sft import SFTConfig, sft_warm_start

    model_dir = out_dir / "warm_start"
    levels = list(levels or DEMO_LEVELS)
    request = {
        "task": DEMO_TASK,
        "levels": levels,
        "target": target,
        "level_floor": TINY_WARM_START_LEVEL_FLOOR,
        "seed": seed,
        "max_steps": max_steps,
        "seconds": seconds,
        "model_shape": model_shape or {},
    }
    hint = "use a shipped start (--warm-start " + W.DEMO_WARM_START + ") or raise the SFT step cap"
    record = W.reusable(model_dir, request)
    if record is not None:
        W.check_floor(record["result"]["level_accuracy"], TINY_WARM_START_LEVEL_FLOOR, f"warm start {model_dir}", hint)
        digest = record["files"][W.WEIGHTS][:12]
        log(f"reusing warm start in {model_dir} (built here for this request; sha256 {digest})")
        return model_dir
    _check_ours(model_dir)
    if model_dir.exists():
        log(f"rebuilding the warm start in {model_dir}: it was built for another request")
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory(prefix="hadw-random-init-") as scratch:  # never a folder of out_dir's
        model, tokenizer = load_model(build_tiny_model(Path(scratch) / "model", seed=seed, **(model_shape or {})))
    cfg = SFTConfig(
        task=DEMO_TASK,
        levels=levels,
        target_accuracy=target,
        level_floor=TINY_WARM_START_LEVEL_FLOOR,
        max_seconds=seconds,
        seed=seed,
        eval_every=50,
        max_steps=max_steps,
    )
    result = sft_warm_start(model, tokenizer, cfg, log=lambda e: log(_format_sft(e)), progress="auto")
    level_accuracy = {k.removeprefix("sft/acc_"): v for k, v in result.history[-1].items() if k.startswith("sft/acc_")}
    tmp = out_dir / ".warm_start.tmp"
    if tmp.is_symlink():  # a planted link: removed itself, never its target
        tmp.unlink()
    elif tmp.exists():  # ours: the temporary name of a build that stopped
        shutil.rmtree(tmp)
    _check_ours(model_dir)  # again: SFT took minutes, and the folder may have changed meanwhile
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    result_record = {"steps": result.steps, "accuracy": result.accuracy, "level_accuracy": level_accuracy}
    W.write_record(tmp, request, result_record)
    tmp.rename(model_dir)
    log(
        f"warm start: rebuilt on this CPU (its kernels shape the result; the README's numbers are the shipped "
        f"start's), {result.steps} SFT steps, greedy accuracy {result.accuracy:.3f}"
    )
    W.check_floor(level_accuracy, TINY_WARM_START_LEVEL_FLOOR, f"warm start {model_dir}", hint)
    return model_dir


def _check_ours(model_dir: Path) -> None:
    """WarmStartError unless `model_dir` is absent or exactly a warm start hadw built (warm_starts.built_here): a
    folder of the user's, with a record copied in or anything added, is never replaced or removed."""
    from hadw.train import warm_starts as W

    if (model_dir.exists() or model_dir.is_symlink()) and not W.built_here(model_dir):
        raise W.WarmStartError(
            f"{model_dir} exists and hadw did not build it (a link, no {W.RECORD}, or files its record does not "
            "list); move it away or pick another --out-dir"
        )


def demo_warm_start(settings: DemoSettings, out: Path) -> Path:
    """The shipped start named by settings.warm_start (checked by sha256), or one rebuilt here ("rebuild")."""
    from hadw.train import warm_starts as W

    if settings.warm_start != "rebuild":
        folder, start = W.resolve(settings.warm_start)
        print(start.line())
        return folder
    return warm_start(out, settings.sft_seconds, settings.sft_target, settings.seed, max_steps=settings.sft_max_steps)


def _format_sft(entry: dict) -> str:
    levels = " ".join(f"{k.split('_')[-1]}={v:.2f}" for k, v in entry.items() if k.startswith("sft/acc_"))
    step, loss, accuracy = entry["sft/step"], entry["sft/loss"], entry["sft/accuracy"]
    return f"  sft step {step:>5}  loss {loss:.3f}  accuracy {accuracy:.3f}  {levels}"


def _train_arm(overrides: list[str], parent_pid: int) -> None:
    from transformers.utils import logging as hf_logging

    from hadw.train.trainer import Trainer

    die_with_parent(parent_pid, signal.SIGTERM)  # a killed `hadw demo` stops its arms at a safe point

    hf_logging.disable_progress_bar()
    Trainer(load_config(None, overrides)).train(progress=False)


def _initial_eval(model_dir: Path, settings: DemoSettings) -> dict[str, dict[str, float]]:
    from hadw.data import make_task
    from hadw.eval.evaluate import evaluate
    from hadw.rollout import load_model
    from hadw.train.prompts import EVAL_SEED_OFFSET

    model, tokenizer = load_model(model_dir)
    problems = list(make_task(DEMO_TASK, DEMO_LEVELS, seed=settings.seed + EVAL_SEED_OFFSET, size=settings.eval_size))
    return evaluate(model, tokenizer, problems, "plain", "exact", max_new_tokens=6, use_chat_template=False).summary


def _watch(runs: dict[str, Path], processes: list, steps: int) -> None:
    """A live progress counter per arm, read from each run's metrics.jsonl: a bar on a terminal, a plain line every
    few seconds otherwise (hadw.progress; HADW_PROGRESS chooses)."""
    from hadw.progress import Bars

    with Bars("auto") as bars:
        counters = {name: bars.add(name, steps, unit="step") for name in runs}
        while any(p.is_alive() for p in processes):
            time.sleep(1.0)
            for name, run_dir in runs.items():
                records = M.read_run(run_dir).steps
                if records:
                    recent = records[-10:]
                    acc = sum(r[M.SCORE_MEAN] for r in recent) / len(recent)
                    anchor = records[-1].get(M.ANCHOR, float("nan"))
                    counters[name].update(completed=records[-1]["step"], acc=f"{acc:.3f}", C=f"{anchor:.2f}")
        for name in runs:
            counters[name].update(completed=steps)


def results_table(initial: dict[str, dict[str, float]], finals: dict[str, dict[str, float]]) -> str:
    """Markdown table: greedy accuracy by bucket for the warm start and each arm."""
    buckets = [b for b in sorted(initial) if b.startswith(f"{DEMO_TASK}/")] + ["all"]
    names = list(finals)
    lines = ["| level | n | warm start | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
    for b in buckets:
        label = b.split("/")[-1] if "/" in b else "all"
        row = [f"{finals[n][b]:.3f} ({finals[n][b] - initial[b][M.GREEDY]:+.3f})" for n in names]
        lines.append(f"| {label} | {int(initial[b][M.COUNT])} | {initial[b][M.GREEDY]:.3f} | " + " | ".join(row) + " |")
    return "\n".join(lines)


DEMO_MARKER = ".hadw_demo"  # in each arm's folder: made by `hadw demo`, so a later demo may replace it


def claim_demo_run(run_dir: Path) -> None:
    """Make `run_dir` an empty folder for a demo arm. A folder an earlier demo made (it holds the marker) is removed;
    any other non-empty folder is the user's: refused in one line, never removed."""
    from hadw.errors import UserError

    if run_dir.is_symlink():
        raise UserError(f"{run_dir} is a symbolic link; hadw demo never writes through one: remove it")
    if run_dir.exists():
        if (run_dir / DEMO_MARKER).is_file():
            shutil.rmtree(run_dir)
        elif any(run_dir.iterdir()):
            raise UserError(
                f"{run_dir} exists and was not made by hadw demo (no {DEMO_MARKER}); move it away or pick another "
                "--out-dir"
            )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / DEMO_MARKER).write_text("made by hadw demo; the next hadw demo in this folder replaces it\n")


# The result files `hadw demo` writes in its --out-dir, recognised as its own by their first bytes (the marker, or
# how a version before the marker began them); a figure by hadw's mark (or matplotlib's, under this name).
DEMO_JSON, DEMO_MD, DEMO_PNG = "demo_results.json", "demo_results.md", "demo_curves.png"
_LEGACY_STARTS = {DEMO_JSON: b'{\n "initial": ', DEMO_MD: b"| level | n | warm start |"}


def _owned_result(name: str):
    from hadw.safe_files import owned_json, owned_markdown

    marked = owned_markdown("demo") if name.endswith(".md") else owned_json("demo")
    return lambda data: marked(data) or data.startswith(_LEGACY_STARTS[name])


def check_demo_outputs(out: Path, overwrite: bool) -> None:
    """Each result file of the demo may be written (hadw.safe_files.check_output: no link, no special file, no
    file hadw demo did not write unless overwrite): checked before the warm start and the training, not after."""
    from hadw.experiments.compare import owned_sweep_figure
    from hadw.safe_files import check_figure, check_output

    for name in (DEMO_JSON, DEMO_MD):
        check_output(out / name, f"--out-dir {name}", _owned_result(name), overwrite)
    check_figure(out / DEMO_PNG, f"--out-dir {DEMO_PNG}", overwrite, owned_sweep_figure)


def _write_results(out: Path, summary: dict, table: str, overwrite: bool) -> None:
    """demo_results.json / .md, each marked as the demo's (what check_demo_outputs recognises)."""
    from hadw.safe_files import markdown_marker, write_output

    data = {"written_by": "hadw demo", **summary}
    write_output(out / DEMO_JSON, json.dumps(data, indent=1) + "\n", f"--out-dir {DEMO_JSON}",
                 _owned_result(DEMO_JSON), overwrite)  # fmt: skip
    write_output(out / DEMO_MD, markdown_marker("demo") + table + "\n", f"--out-dir {DEMO_MD}",
                 _owned_result(DEMO_MD), overwrite)  # fmt: skip


def run_demo(settings: DemoSettings) -> str:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    # One thread per process: the two RL arms run side by side on the 2 cores, and tiny matmuls gain
    # nothing from a second thread (they lose a lot when two busy processes fight over the cores).
    torch.set_num_threads(1)
    start = time.perf_counter()
    out = settings.out_dir
    check_demo_outputs(out, settings.overwrite)  # before minutes of SFT and RL
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"[1/3] warm start: tiny Qwen2 model after SFT on {DEMO_TASK} levels {DEMO_LEVELS} (until greedy accuracy "
        f"{settings.sft_target} with every level >= {TINY_WARM_START_LEVEL_FLOOR}); "
        + ("rebuilt on this CPU" if settings.warm_start == "rebuild" else "the shipped file")
    )
    model_dir = demo_warm_start(settings, out)
    initial = _initial_eval(model_dir, settings)

    print(f"[2/3] RL: GRPO and GRPO+HA-DW, {settings.steps} steps each, same start and seed, in parallel")
    runs = {"GRPO": out / "grpo", "GRPO+HA-DW": out / "grpo_hadw"}
    ctx = mp.get_context("spawn")
    processes = [
        ctx.Process(
            target=_train_arm,
            args=(rl_overrides(settings, model_dir, run_dir, hadw=name != "GRPO"), os.getpid()),
        )
        for name, run_dir in runs.items()
    ]
    for run_dir in runs.values():  # a fresh run each time: stale metrics would confuse the table
        claim_demo_run(run_dir)
    for p in processes:
        p.start()
    _watch(runs, processes, settings.steps)
    for p in processes:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a demo run failed (exit code {p.exitcode}); see {out}")

    print("[3/3] greedy accuracy on held-out problems (change vs the warm start):")
    finals = {name: final_eval(run_dir) for name, run_dir in runs.items()}
    table = results_table(initial, finals)
    check_demo_outputs(out, settings.overwrite)  # again: the folder may have changed during the training
    plot = plot_runs(runs, out / DEMO_PNG, initial=initial)
    summary = {"initial": initial, "final": finals, "seconds": time.perf_counter() - start}
    _write_results(out, summary, table, settings.overwrite)
    print(table)
    print(f"curves: {plot}   results: {out / DEMO_JSON}   total {summary['seconds']:.0f} s")
    return table
