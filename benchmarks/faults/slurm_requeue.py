"""A requeued or preempted Slurm run, N tries each: does the sweep wait for it, exit 0, and equal the local launcher?

On a one-node Slurm started here (scripts/slurm_local.sh), each try is one `hadw compare --launcher slurm` sweep of
1 arm × 2 seeds (the launcher tests' tiny recipe, 8 steps, a checkpoint after each). Once seed 0 has a checkpoint,
it is interrupted in one of two ways:

- `requeue`: `scontrol requeue <array>_0`, as an admin or a preempting job with PreemptMode=REQUEUE does;
- `usr2`: SIGUSR2 to the run's process, the signal Slurm sends before a time limit or on preemption (submitit's
  path: the run checkpoints, submitit requeues it).

A try passes when the sweep exits 0, reports no failed run, and both runs' metrics (timings aside) and final evals
equal the local launcher's. Writes benchmarks/faults/slurm_requeue.raw.json (one row per try) and the table in
benchmarks/faults/slurm_requeue.md.

Usage: python benchmarks/faults/slurm_requeue.py run [--tries 10] [--out runs/slurm_requeue]
       python benchmarks/faults/slurm_requeue.py rebuild
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import raw_tables

sys.path.insert(0, str(raw_tables.ROOT))
from tests.conftest import TINY_COMPARE_RECIPE  # the launcher tests' recipe, one home

RAW = Path(__file__).with_suffix(".raw.json")
TABLES = [Path(__file__).with_suffix(".md")]
RECIPE = [x for o in [*TINY_COMPARE_RECIPE, "train.steps=8"] for x in ("--set", o)]
SWEEP = ["--arm", "grpo:", "--seeds", "0-1", "--smooth", "1", *RECIPE]
FAULTS = ("requeue", "usr2")
NOT_DETERMINISTIC = ("timing_s/", "perf/")


def run_metrics(run_dir: Path) -> tuple[list[dict], str]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [{k: v for k, v in r.items() if not k.startswith(NOT_DETERMINISTIC)} for r in rows]
    return steps, (run_dir / "final_eval.json").read_text()


def hadw(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "hadw.cli", "compare", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def one_try(fault: str, out: Path, reference: Path) -> dict:
    command = ["--out", str(out), "--launcher", "slurm", "--poll", "0.5", "--time-min", "10", *SWEEP]
    started = time.perf_counter()
    cli = hadw(*command)
    run_dir = out / "grpo" / "seed0"
    row: dict = {"fault": fault}
    try:
        deadline = time.time() + 240
        while not (run_dir / "latest").is_file() and cli.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        row["interrupted_before_the_end"] = not (run_dir / "final_model").exists()
        if fault == "requeue":
            (array,) = [d.name for d in (out / ".slurm").iterdir() if d.name.isdigit()]
            subprocess.run(["scontrol", "requeue", f"{array}_0"], capture_output=True, text=True)
        else:
            log = (run_dir / "launcher.log").read_text().splitlines()
            pid = int([x for x in log if ": start (" in x][-1].split(" pid ")[1].split(":")[0])
            os.kill(pid, signal.SIGUSR2)
        output, _ = cli.communicate(timeout=600)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    row["seconds"] = round(time.perf_counter() - started, 1)
    row["rc"] = cli.returncode
    row["runs_line"] = next((x for x in output.splitlines() if x.startswith("runs: ") and "trained" in x), "")
    row["requeued_shown"] = "requeued)" in output
    starts = (run_dir / "launcher.log").read_text().count(": start (slurm job") if run_dir.exists() else 0
    row["attempts"] = starts
    try:
        row["equal_to_local"] = all(
            run_metrics(out / "grpo" / f"seed{s}") == run_metrics(reference / "grpo" / f"seed{s}") for s in (0, 1)
        )
    except OSError:
        row["equal_to_local"] = False
    row["passed"] = row["rc"] == 0 and "0 failed" in row["runs_line"] and row["equal_to_local"]
    return row


def run(args: argparse.Namespace) -> None:
    out = args.out.resolve()
    reference = out / "local"
    if not (reference / "grpo" / "seed1" / "final_model").exists():
        local = hadw("--out", str(reference), *SWEEP)
        text, _ = local.communicate()
        assert local.returncode == 0, text
    slurm = out / "slurm"
    script = raw_tables.ROOT / "scripts" / "slurm_local.sh"
    up = subprocess.run(["bash", str(script), "start", str(slurm)], capture_output=True, text=True)
    if up.returncode != 0:
        sys.exit(f"slurm_requeue: the one-node Slurm did not start: {up.stderr.strip()}")
    os.environ["SLURM_CONF"] = str(slurm / "slurm.conf")
    rows = []
    try:
        for i in range(args.tries):
            for fault in FAULTS:
                row = {"try": i, **one_try(fault, out / f"{fault}{i}", reference)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        subprocess.run(["bash", str(script), "stop", str(slurm)], capture_output=True, text=True)
    command = f"python benchmarks/faults/slurm_requeue.py run --tries {args.tries}"
    raw_tables.write_raw(RAW, TABLES, Path(__file__), command, rows, recipe=SWEEP)


def tables(raw: dict) -> dict[str, str]:
    """`tries`: per fault, how many tries passed, the attempts of the interrupted run, the wall time."""
    lines = ["| fault | tries | passed (exit 0, 0 failed, = local) | requeue shown | attempts of seed 0 | seconds |"]
    lines.append("|---|---|---|---|---|---|")
    for fault in FAULTS:
        rows = [r for r in raw["runs"] if r["fault"] == fault]
        attempts = sorted({r["attempts"] for r in rows})
        secs = [r["seconds"] for r in rows]
        lines.append(
            f"| {fault} | {len(rows)} | {sum(r['passed'] for r in rows)} | {sum(r['requeued_shown'] for r in rows)} "
            f"| {', '.join(map(str, attempts))} | {min(secs):.0f}–{max(secs):.0f} |"
        )
    return {"tries": "\n".join(lines)}


def main() -> None:
    raw_tables.command_line(__doc__, RAW, tables, run, _options)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tries", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("runs/slurm_requeue"))


if __name__ == "__main__":
    main()
