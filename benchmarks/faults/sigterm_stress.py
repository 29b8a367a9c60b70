"""SIGTERM at random moments around step boundaries of a real `hadw train`: does every try end with a checkpoint
that loads? (issue 39, finding 12)

Each try starts `hadw train` (a tiny model, 8 steps, no periodic checkpoint, an evaluation after step 4, the
verifier pool scoring with `math`) in a session of its own, waits for the metrics row of a random step, then sleeps
a random 0..span-s (the next step, the mid-run evaluation, or after the last row the final evaluation, checkpoint
and model) and signals the way `timeout` does: SIGTERM to the process, then to its whole process group (the verifier
workers too). A try passes when the command exits 143 with the stop line naming a checkpoint of the last logged
step, or 0 with the final checkpoint and model (or -15 with them: the signal came after the trainer had finished);
the checkpoint's files must load (state.json, trainer_state.pt with weights_only, the model with transformers).

Found with it (issue 39, finding 12): the group's SIGTERM killed the verifier workers; the trainer's next send to one
raised BrokenPipeError, which click turns into a silent exit 1: no stop line, no checkpoint.

Usage: python benchmarks/faults/sigterm_stress.py [--tries 200] [--out /tmp/sigterm_stress] [--seed 0] [--after-row 8]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

STEPS = 8


def recipe(tiny: Path, run: Path) -> list[str]:
    return [
        f"model.path={tiny}",
        "data.chat_template=never",
        "data.eval_size=4",
        "rollout.group_size=4",
        "rollout.max_new_tokens=40",
        "train.prompts_per_step=4",
        "train.mini_batch_prompts=1",
        f"train.steps={STEPS}",
        f"train.output_dir={run}",
        "optim.warmup_steps=0",
        "logging.progress=lines",
        "train.num_threads=1",
        "checkpoint.every=0",
        "train.eval_every=4",
        "reward.functions=[math]",
        "reward.correctness=math",
    ]


def loads(checkpoint: Path) -> str:
    """'' when the checkpoint's files load, else what failed."""
    import torch
    from transformers import AutoModelForCausalLM

    from hadw.train.checkpoint import read_state_json

    try:
        read_state_json(checkpoint)
        torch.load(checkpoint / "trainer_state.pt", weights_only=True)
        AutoModelForCausalLM.from_pretrained(checkpoint / "model")
    except Exception as e:  # the try's failure, reported with the others
        return f"{type(e).__name__}: {e}"[:300]
    return ""


def one_try(
    tiny: Path, run: Path, rng: random.Random, span_s: float, after_row: int | None = None
) -> tuple[str, float, int, str]:
    """(verdict, delay, exit code, stderr tail): verdict '' when the try passed."""
    from hadw.train.checkpoint import latest_checkpoint

    argv = [sys.executable, "-m", "hadw.cli", "train", *recipe(tiny, run)]
    err_path = run.with_suffix(".err")
    with open(err_path, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    metrics = run / "metrics.jsonl"
    row, delay = after_row or rng.randint(1, STEPS), rng.uniform(0.0, span_s)  # after that step's row (STEPS: the end)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.is_file() and metrics.read_bytes().count(b"\n") >= row:
            break
        time.sleep(0.002)
    time.sleep(delay)
    if proc.poll() is not None:
        return "late", delay, proc.returncode, ""  # the run ended before the signal: no try
    os.kill(proc.pid, signal.SIGTERM)  # as `timeout` does: the command, then its process group
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        code = proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return "hang", delay, -1, ""
    tail = err_path.read_text(errors="replace")[-600:]
    last = latest_checkpoint(run) if run.is_dir() else None
    rows = metrics.read_text().splitlines() if metrics.is_file() else []
    if code in (0, -signal.SIGTERM):  # -15: the signal came after the trainer finished (its handlers gone)
        ok = last is not None and last.name == f"checkpoint-{STEPS:06d}" and (run / "final_model").is_dir()
        verdict = "" if ok else f"rc {code} without the final checkpoint/model ({last})"
    elif code == 143:
        ok = last is not None and last.name == f"checkpoint-{len(rows):06d}" and str(last) in tail
        verdict = "" if ok else f"rc 143, checkpoint {last} for {len(rows)} logged steps"
    else:
        verdict = f"rc {code}"
    if not verdict and (problem := loads(last)):
        verdict = f"checkpoint does not load: {problem}"
    if "Traceback" in tail:
        verdict = verdict or "traceback"
    return verdict, delay, code, tail


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("/tmp/sigterm_stress"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--after-row", type=int, default=None, help=f"always after this step's row ({STEPS}: the end)")
    parser.add_argument("--span-s", type=float, default=0.3, help="signal 0..span-s after a step's row")
    args = parser.parse_args()
    from hadw.rollout import build_tiny_model

    args.out.mkdir(parents=True, exist_ok=True)
    tiny = args.out / "tiny"
    if not tiny.is_dir():
        build_tiny_model(tiny, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64)
    rng, failed, late, codes = random.Random(args.seed), 0, 0, {}
    for i in range(args.tries):
        verdict, delay, code, tail = one_try(tiny, args.out / f"run{i:04d}", rng, args.span_s, args.after_row)
        codes[code] = codes.get(code, 0) + 1
        if verdict == "late":
            late += 1
        elif verdict:
            failed += 1
            print(f"try {i}: FAILED after {delay:.3f} s: {verdict}\n{tail}", flush=True)
        print(f"try {i}: delay {delay:.3f} s, rc {code}, {verdict or 'ok'}", flush=True)
    tried = args.tries - late
    print(
        f"{tried} tries signalled: {tried - failed} passed, {failed} failed ({late} ended before the signal); "
        f"exit codes {codes}"
    )


if __name__ == "__main__":
    main()
