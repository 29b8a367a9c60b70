"""Crash consistency: kill -9 `hadw train` N times at random moments, resume each time, and check that the
finished run is bit-for-bit the run that was never interrupted.

    python benchmarks/faults/crash_consistency.py              # N = 20 kills, tiny model, 1 thread, ~5 min on CPU
    python benchmarks/faults/crash_consistency.py --kills 5    # quicker

Kill moments cycle through three kinds:
  startup     a random time while the process imports / loads (before its first step),
  step        after a random number of new steps, plus a random 0-40 ms into the next one,
  checkpoint  the moment a `.tmp-checkpoint-*` folder appears (mid checkpoint write).
After each kill the run is relaunched (`--resume` when the folder holds a run). The reference run goes
straight through in the same configuration. Printed: kills delivered, resumes that started cleanly,
whether the final weights and every per-step metric (except timings) are bit-exact, and leftovers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
TIMING_PREFIXES = ("timing_s/", "perf/")


def overrides(model: Path, out: Path, steps: int) -> list[str]:
    return [
        f"model.path={model}",
        "data.source=task:addition",
        "data.chat_template=never",
        "data.eval_size=4",
        "rollout.group_size=4",
        "rollout.max_new_tokens=4",
        "train.prompts_per_step=2",
        "train.mini_batch_prompts=1",
        f"train.steps={steps}",
        "optim.lr=1e-3",
        "optim.warmup_steps=3",
        "hadw.enabled=true",
        "checkpoint.every=1",
        "checkpoint.keep_last=2",
        "logging.progress=false",
        "logging.sample_every=1",
        "train.num_threads=1",
        f"train.output_dir={out}",
    ]


def launch(args: list[str]) -> subprocess.Popen:
    env = os.environ | {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "hadw.cli", "train", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def rows(run: Path) -> int:
    path = run / "metrics.jsonl"
    return path.read_bytes().count(b"\n") if path.is_file() else 0


def wait_until(proc: subprocess.Popen, ready, timeout: float = 120.0) -> bool:
    """Poll every 2 ms until ready() (True) or the process exits / the timeout passes (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        if ready():
            return True
        time.sleep(0.002)
    return False


def records(run: Path) -> list[dict]:
    out = []
    for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        out.append({k: v for k, v in record.items() if not k.startswith(TIMING_PREFIXES)})
    return out


def same_weights(a: Path, b: Path) -> bool:
    x, y = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=60, help="training steps of the run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill schedule")
    parser.add_argument("--out", type=Path, default=None, help="work folder (default: a temporary one)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = random.Random(args.seed)
    out = args.out or Path(tempfile.mkdtemp(prefix="hadw-crash-"))
    print(f"python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, work folder {out}")

    sys.path.insert(0, str(ROOT / "src"))
    from hadw.rollout import build_tiny_model

    model = build_tiny_model(
        out / "model", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64, seed=0
    )

    t0 = time.monotonic()
    ref = launch(overrides(model, out / "reference", args.steps))
    wait_until(ref, lambda: rows(out / "reference") > 0, timeout=600)
    startup = time.monotonic() - t0
    _, err = ref.communicate()
    if ref.returncode != 0:
        sys.exit(f"reference run failed (exit {ref.returncode}): {err.strip().splitlines()[-1:]}")
    total = time.monotonic() - t0
    print(f"reference run: {args.steps} steps in {total:.1f} s (first step after {startup:.1f} s)")

    run = out / "crashed"
    kills = launches = clean_starts = 0
    kinds = {"startup": 0, "step": 0, "checkpoint": 0}
    failures: list[str] = []
    while kills < args.kills:
        resume = (run / "metrics.jsonl").is_file() or (run / "latest").is_file()
        proc = launch(overrides(model, run, args.steps) + (["--resume"] if resume else []))
        launches += 1
        kind = ("startup", "step", "checkpoint")[kills % 3]
        if kind == "startup":
            time.sleep(rng.uniform(0.1, startup * 0.9))
        elif kind == "step":
            target = rows(run) + rng.randint(1, 3)
            wait_until(proc, lambda t=target: rows(run) >= t)
            time.sleep(rng.uniform(0.0, 0.04))
        else:
            wait_until(proc, lambda: any(run.glob(".tmp-checkpoint-*")))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            kinds[kind] += 1
            clean_starts += launches > 1  # a relaunch still running when killed had not failed
        else:
            _, err = proc.communicate()
            if proc.returncode == 0:
                print("the run finished before all kills were delivered; raise --steps")
                break
            failures.append(f"launch {launches} exit {proc.returncode}: {err.strip().splitlines()[-1:]}")
            break
    resume = (run / "metrics.jsonl").is_file() or (run / "latest").is_file()
    final = launch(overrides(model, run, args.steps) + (["--resume"] if resume else []))
    launches += 1
    _, err = final.communicate()
    if final.returncode != 0:
        failures.append(f"final resume exit {final.returncode}: {err.strip().splitlines()[-1:]}")
    else:
        clean_starts += launches > 1

    resumes = launches - 1  # every launch after the first resumes
    weights = not failures and same_weights(out / "reference" / "final_model", run / "final_model")
    metrics = not failures and records(out / "reference") == records(run)
    leftovers = sorted(p.name for p in run.glob(".tmp-*")) + sorted(p.name for p in run.glob(".final_model.tmp*"))
    print(
        f"kills: {kills} (kill -9: {kinds['startup']} at startup, {kinds['step']} mid-step, "
        f"{kinds['checkpoint']} during a checkpoint write)"
    )
    print(f"resumes: {clean_starts}/{resumes} relaunches ran without an error")
    print(
        f"bit-exact: {'yes' if weights and metrics else 'no'} (final weights {'equal' if weights else 'DIFFER'}, "
        f"{args.steps} per-step metric rows {'equal' if metrics else 'DIFFER'})"
    )
    print(f"leftover temporary folders: {leftovers or 'none'}")
    for failure in failures:
        print(f"FAILED: {failure}")
    sys.exit(0 if weights and metrics and not failures and clean_starts == resumes else 1)


if __name__ == "__main__":
    main()
