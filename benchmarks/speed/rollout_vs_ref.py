"""Rollout tokens/s of this checkout against an earlier revision's engine, in alternating processes.

What a release changed in generation speed, measured the only fair way across versions: the same script
times `HFRolloutEngine.generate` (its default decoder) in a child process that imports either this
checkout's `src/` or the reference revision's (checked out into a temporary git worktree), and the two
alternate, pair after pair, so load drifts hit both. Each child reports the median process CPU time of a
few calls per shape (1 thread); printed per shape: this / reference tokens per CPU-second, min / median /
max over the pairs. Needs the repository's git history (a clone, not an sdist). Sampling differs between
versions (0.2.0 drew with torch.multinomial, later ones by inverse CDF), so tokens differ; the work per
call (rows x new tokens, EOS ignored) is the same.

    .venv/bin/python benchmarks/speed/rollout_vs_ref.py                 # against 0.2.0 as released, 5 pairs
    .venv/bin/python benchmarks/speed/rollout_vs_ref.py --ref HEAD~3 --pairs 3
    .venv/bin/python benchmarks/speed/rollout_vs_ref.py --report benchmarks/speed/rollout_vs_ref.md   # also keep it
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
from bench_models import MODELS
from bench_report import add_report_option, report

RELEASE_0_2_0 = "21c14f4"  # the commit 0.2.0 was cut from (CHANGELOG "0.2.0")
SHAPES = [(128, 6, 16), (64, 64, 16), (64, 16, 128)]  # (rows = prompts x 8, new tokens, prompt tokens)
ROOT = Path(__file__).resolve().parents[2]


def child(models: list[str]) -> None:
    """Print {"model rows x new, prompt P": median CPU seconds per generate call} for the importable hadw."""
    import torch
    from transformers.utils import logging as hf_logging

    import hadw
    from hadw.rollout import HFRolloutEngine, SamplingParams, build_tiny_model, load_model

    if not Path(hadw.__file__).is_relative_to(os.environ["PYTHONPATH"]):  # an installed hadw took precedence
        raise SystemExit(f"imported {hadw.__file__}, not the checkout under {os.environ['PYTHONPATH']}")
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    out = {}
    for name in models:
        shape = MODELS[name]
        with tempfile.TemporaryDirectory() as tmp:
            model, tok = load_model(build_tiny_model(tmp, **shape), device="cpu")
        engine = HFRolloutEngine(model, tok)
        for rows, new, prompt in SHAPES:
            prompts = [[4 + (i * 7 + j) % 200 for j in range(prompt)] for i in range(rows // 8)]
            params = SamplingParams(n=8, max_new_tokens=new, ignore_eos=True, seed=0)
            engine.generate(prompts, params)  # warm-up
            seconds = []
            for _ in range(3 if new >= 64 else 9):
                start = time.process_time()
                engine.generate(prompts, params)
                seconds.append(time.process_time() - start)
            out[f"{name} {rows}x{new}, prompt {prompt}"] = statistics.median(seconds)
    print(json.dumps(out))


def run_child(src: Path, models: list[str]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, __file__, "--child", "--models", *models],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=src.parent,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default=RELEASE_0_2_0, help="git revision to compare against (default: 0.2.0)")
    ap.add_argument("--pairs", type=int, default=5)
    # Not 135M by default: its 49 k-row head makes a child run for many minutes (measure it on its own).
    ap.add_argument("--models", nargs="+", default=["tiny", "5.6M"], choices=list(MODELS))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_report_option(ap)
    args = ap.parse_args()
    if args.child:
        return child(args.models)
    with report(args.report, ap, args):
        measure(args)


def measure(args: argparse.Namespace) -> None:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    print(f"this checkout ({head.stdout.strip()}, working tree) vs {args.ref}; {args.pairs} alternating pairs")
    with tempfile.TemporaryDirectory() as tmp:
        worktree = Path(tmp) / "ref"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(worktree), args.ref], cwd=ROOT, check=True)
        try:
            results = {"ref": [], "this": []}
            for pair in range(args.pairs):
                results["ref"].append(run_child(worktree / "src", args.models))
                results["this"].append(run_child(ROOT / "src", args.models))
                print(f"  pair {pair + 1}/{args.pairs} done", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False)
    print("tokens per CPU-second, this / ref (same rows x new tokens per call), min / median / max over pairs:")
    for key in results["this"][0]:
        ratios = sorted(r[key] / t[key] for r, t in zip(results["ref"], results["this"], strict=True))
        ref_ms, this_ms = (1e3 * statistics.median(x[key] for x in results[side]) for side in ("ref", "this"))
        print(
            f"  {key:26s} x{ratios[0]:.2f} / {statistics.median(ratios):.2f} / {ratios[-1]:.2f}"
            f"   ({ref_ms:7.1f} -> {this_ms:7.1f} CPU ms per call)"
        )


if __name__ == "__main__":
    main()
