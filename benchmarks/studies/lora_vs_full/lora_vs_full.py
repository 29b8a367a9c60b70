"""LoRA vs full fine-tuning with `hadw train` on SmolLM2-135M-Instruct: checkpoint size, peak memory, seconds per
step, learning on the real-model benchmark's task (benchmarks/studies/real_model_rl/real_model_rl.py: its recipe,
reward and figures), and a bit-exact resume of the LoRA run.

Arms (each its own process, one torch thread, same checkpoint and seed): `full` (every weight, the benchmark's lr)
and `lora` (model.lora.enabled=true, rank 16, alpha 32, all-linear, its own lr: LoRA usually wants ~10× the full
fine-tuning lr). Then the resume check: LoRA for 2 steps straight vs 1 step + `--resume` to 2; every adapter tensor
must be equal.

    python benchmarks/smollm2_from_gguf.py runs/smollm2-135m-instruct
    python benchmarks/studies/lora_vs_full/lora_vs_full.py --model runs/smollm2-135m-instruct \
        --report benchmarks/studies/lora_vs_full/lora_vs_full.md
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: the shared helpers
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "real_model_rl"))  # its task, reward and figures
import real_model_rl as bench

LORA = ["model.lora.enabled=true", "model.lora.rank=16", "model.lora.alpha=32", "model.lora.target_modules=all-linear"]


def arms(args: argparse.Namespace) -> dict[str, str]:
    """Each arm's overrides after the benchmark's own (one string, as real_model_rl.ARMS)."""
    return {"full": f"optim.lr={args.lr}", "lora": " ".join([*LORA, f"optim.lr={args.lora_lr}"])}


def _child(arm: str, args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    overrides = arms(args)[arm].split()
    bench.ARMS = {arm: overrides[0]}  # real_model_rl.run_arm applies one override per arm
    extra = overrides[1:]
    original = bench.overrides
    bench.overrides = lambda a, out: [*original(a, out), *extra]
    bench.run_arm(arm, args)


def resume_check(args: argparse.Namespace) -> dict:
    """LoRA, 2 steps straight vs 1 step then --resume to 2: the adapters must be equal bit for bit."""
    import torch

    from hadw.train.config import load_config
    from hadw.train.trainer import Trainer

    torch.set_num_threads(1)
    base = [*bench.overrides(args, args.out / "resume"), *LORA, f"optim.lr={args.lora_lr}", "data.eval_size=4"]

    def run(folder: str, steps: int, resume: bool = False) -> Trainer:
        cfg = load_config(None, [*base, f"train.output_dir={args.out / folder}", f"train.steps={steps}"])
        trainer = Trainer(cfg, resume=resume)
        trainer.train(progress="off")
        return trainer

    t0 = time.perf_counter()
    straight = run("resume_straight", 2)
    run("resume_split", 1)
    resumed = run("resume_split", 2, resume=True)
    both = zip(straight.model.named_parameters(), resumed.model.named_parameters(), strict=True)
    pairs = [(n, p, q) for (n, p), (_, q) in both if p.requires_grad]  # the adapters
    unequal = [n for n, p, q in pairs if not torch.equal(p, q)]
    return {"adapter_tensors": len(pairs), "unequal": unequal, "seconds": time.perf_counter() - t0}


def _resume_child(args: argparse.Namespace) -> None:
    (args.out / "resume_check.json").write_text(json.dumps(resume_check(args), indent=1))


def _context() -> str:
    """Date, commit and library versions of the run (written with the report)."""
    import datetime
    import importlib.metadata as md
    import os
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    versions = ", ".join(f"{name} {md.version(name)}" for name in ("torch", "transformers", "peft"))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"Run: {datetime.date.today()}, commit {commit or '?'}, {versions}; load average at the report {load}."


def tables(raw: dict) -> dict[str, str]:
    """lora_vs_full.md's table from the raw per-arm figures (benchmarks/raw_tables.py)."""
    lines = [
        "| arm | greedy before | greedy after | reward, first 3 steps | reward, last 3 steps | s / step (median) "
        "| peak RSS GiB | checkpoint MiB | final_model MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in raw["runs"]:
        curve, per_step = r["reward_curve"], [s for s in r["seconds_per_step"] if s == s]
        lines.append(
            f"| {r['arm']} | {r['before']:.3f} | {r['after']:.3f} | {statistics.mean(curve[:3]):.3f} | "
            f"{statistics.mean(curve[-3:]):.3f} | {statistics.median(per_step):.1f} | {r['cpu_peak_rss_gb']:.2f} | "
            f"{r['checkpoint_gb'] * 1024:.1f} | {r['model_gb'] * 1024:.1f} |"
        )
    return {"arms": "\n".join(lines)}


def report(args: argparse.Namespace, command: str) -> str:
    rows = {arm: json.loads((args.out / arm / "real_model_rl.json").read_text()) for arm in arms(args)}
    resume = json.loads((args.out / "resume_check.json").read_text())
    full, lora = rows["full"], rows["lora"]
    lines = [
        "# LoRA vs full fine-tuning: SmolLM2-135M-Instruct, `hadw train` (one seed each, CPU)",
        "",
        f"Command: `{command}`",
        "",
        _context(),
        "",
        "Task and reward: benchmarks/studies/real_model_rl/real_model_rl.py's (`sums` levels 1–2 as a chat question, "
        "`final_number`), "
        f"G = 8, {args.prompts} prompts per step, {args.max_new_tokens} new tokens, T = 1, {args.steps} steps, "
        f"seed {args.seed}, fp32, one torch thread per arm, both arms at once. Held-out: {args.eval_size} problems, "
        f"greedy. full: every weight, lr {args.lr}. lora: rank 16, alpha 32, all-linear, lr {args.lora_lr}.",
        "",
        "<!-- rebuilt from benchmarks/studies/lora_vs_full/lora_vs_full.raw.json: arms -->",
        tables({"runs": list(rows.values())})["arms"],
        "<!-- /rebuilt -->",
    ]
    ratio = lora["checkpoint_gb"] / full["checkpoint_gb"]
    lines += [
        "",
        f"LoRA checkpoint / full checkpoint: {ratio:.1%} (the adapter and its AdamW state; the full one holds every "
        "weight and its AdamW state).",
        "",
        f"Resume (LoRA, 2 steps straight vs 1 + `--resume` to 2): {resume['adapter_tensors']} adapter tensors, "
        f"{len(resume['unequal'])} unequal"
        + (f": {resume['unequal'][:5]}" if resume["unequal"] else " (bit for bit)")
        + ".",
        "",
        "Reward (mean over the step's responses) per step:",
        "",
    ]
    lines += [f"- {arm}: " + " ".join(f"{x:.2f}" for x in r["reward_curve"]) for arm, r in rows.items()]
    lines += ["", "Per level (greedy):", ""]
    for arm, r in rows.items():
        levels = {k: (r["before_levels"][k]["greedy"], r["after_levels"][k]["greedy"])
                  for k in r["after_levels"] if k.startswith("sums/")}  # fmt: skip
        lines.append(f"- {arm}: " + ", ".join(f"{k} {b:.3f} → {a:.3f}" for k, (b, a) in levels.items()))
    lines += [
        "",
        "Seconds per step are wall seconds on a 2-core machine shared with other jobs; peak RSS is the process's "
        "(model, rollouts, optimiser). One seed per arm: whether each learns, not which learns better. Raw results: "
        f"`{args.out}/*/real_model_rl.json` and `{args.out}/resume_check.json`, kept as "
        "benchmarks/studies/lora_vs_full/lora_vs_full.raw.json.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a local model folder or a Hub id")
    parser.add_argument("--out", type=Path, default=Path("runs/lora_vs_full"))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-5, help="full fine-tuning's lr (the benchmark's)")
    parser.add_argument("--lora-lr", type=float, default=1e-4, help="LoRA's lr")
    parser.add_argument("--eval-size", type=int, default=40)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step (G = 8 responses each)")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--report", type=Path, help="write the markdown report here (and the raw JSON beside it)")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_child, args=(arm, args)) for arm in arms(args)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    check = ctx.Process(target=_resume_child, args=(args,))
    check.start()
    check.join()
    if any(p.exitcode for p in [*procs, check]):
        raise SystemExit(f"a run failed: exit codes {[p.exitcode for p in [*procs, check]]}")
    command = shlex.join(["python", "benchmarks/studies/lora_vs_full/lora_vs_full.py", *sys.argv[1:]])
    text = report(args, command)
    print(text)
    if args.report:
        import raw_tables

        args.report.write_text(text)
        rows = [json.loads((args.out / arm / "real_model_rl.json").read_text()) for arm in arms(args)]
        resume = json.loads((args.out / "resume_check.json").read_text())
        raw_path = Path(__file__).with_suffix(".raw.json")
        raw_tables.write_raw(raw_path, [args.report], Path(__file__), command, rows, resume_check=resume)


if __name__ == "__main__":
    main()
