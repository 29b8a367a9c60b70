"""HA-DW's cost on top of GRPO advantages, and its share of one training step, CPU, side by side.

1. Throughput: 1 M responses in 128 k groups (G = 8): GRPO advantages alone vs advantages + HA-DW
   weights + anchor update; ns per response and the ratio. Target (issue: foundation): HA-DW adds ≤ 30 %.
2. Share of a step: the same two calls at the demo's batch (16 prompts × G = 8 = 128 responses),
   where per-call overhead dominates, against one optimiser step of the tiny model on that batch
   (teacher-forced log-probs + GRPO loss + backward + AdamW, prompt 8 + 6 response tokens).

Every measurement is timed in turns (a, b, a, b, ...) so machine load hits all alike, and reported as
min / median / max over --repeats runs, in wall time and process CPU time.
Usage: python benchmarks/speed/core_overhead.py [--responses 1048576] [--group-size 8] [--repeats 11] [--threads 1]
       [--report FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import torch
from bench_report import add_report_option, report
from transformers.utils import logging as hf_logging

from hadw.core import LOSS_PRESETS, apply_hadw, compute_advantages, make_anchor, policy_loss
from hadw.rollout import build_tiny_model, compute_logprobs, load_model


def interleaved(fns, repeats: int) -> list[tuple[list[float], list[float]]]:
    """(wall seconds, CPU seconds) of each function over `repeats` turns (a, b, a, b, ...)."""
    for fn in fns:
        fn()  # warm-up: allocator and kernels
    times = [([], []) for _ in fns]
    for _ in range(repeats):
        for fn, (walls, cpus) in zip(fns, times, strict=True):
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    return times


def spread(values, scale: float) -> str:
    v = sorted(scale * x for x in values)
    return f"{v[0]:9.1f} / {statistics.median(v):9.1f} / {v[-1]:9.1f}"


def hadw_calls(n: int, group_size: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    difficulty = torch.rand(n // group_size, generator=gen).repeat_interleave(group_size)
    correctness = (torch.rand(n, generator=gen) < difficulty).float()
    group_ids = torch.arange(n) // group_size
    anchor = make_anchor("window", k=10)

    def advantages_only():
        return compute_advantages(correctness, group_ids, "grpo").advantages

    def advantages_and_hadw():
        adv = compute_advantages(correctness, group_ids, "grpo")
        return apply_hadw(adv.advantages, correctness, adv.groups, anchor).advantages

    return advantages_only, advantages_and_hadw


def tiny_train_step(rows: int, prompt: int = 8, response: int = 6):
    """One optimiser step of the tiny model on `rows` responses (what `hadw train` does per mini-batch)."""
    hf_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as tmp:
        model, _ = load_model(build_tiny_model(tmp), device="cpu")
    model.train()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 260, (rows, prompt + response), generator=gen)
    mask, rmask = torch.ones_like(ids), torch.ones(rows, response, dtype=torch.long)
    old, adv = -torch.rand(rows, response, generator=gen), torch.randn(rows, generator=gen)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss, _ = policy_loss(compute_logprobs(model, ids, mask, rmask), old, adv, rmask, LOSS_PRESETS["grpo"])
        loss.backward()
        optimizer.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=1 << 20)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--step-responses", type=int, default=128, help="responses per training step (demo: 128)")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: stable on a shared box)")
    add_report_option(parser)
    args = parser.parse_args()
    with report(args.report, parser, args):
        measure(args)


def measure(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    n, r = args.responses, args.repeats
    print(f"threads={torch.get_num_threads()}, {r} alternating runs; min / median / max")

    (adv_w, adv_c), (had_w, had_c) = interleaved(hadw_calls(n, args.group_size), r)
    print(f"\n1. {n:,} responses, {n // args.group_size:,} groups of {args.group_size}  (ns per response)")
    print(f"  GRPO advantages          wall {spread(adv_w, 1e9 / n)}   CPU {spread(adv_c, 1e9 / n)}")
    print(f"  GRPO advantages + HA-DW  wall {spread(had_w, 1e9 / n)}   CPU {spread(had_c, 1e9 / n)}")
    ratios = sorted(h / a for h, a in zip(had_c, adv_c, strict=True))
    low, mid, high = ratios[0], statistics.median(ratios), ratios[-1]
    print(f"  ratio HA-DW / plain (CPU, per pair) {low:.3f} / {mid:.3f} / {high:.3f}  (target <= 1.30)")

    m, calls = args.step_responses, 50  # a small call lasts ~0.1 ms: time 50 in a row, report one
    plain, with_hadw = hadw_calls(m, args.group_size, seed=1)
    loop = lambda fn: lambda: [fn() for _ in range(calls)]
    (pw, pc), (hw, hc), (sw, sc) = interleaved([loop(plain), loop(with_hadw), tiny_train_step(m)], r)
    print(f"\n2. one training step, {m} responses (tiny model)  (microseconds)")
    print(f"  GRPO advantages          wall {spread(pw, 1e6 / calls)}   CPU {spread(pc, 1e6 / calls)}")
    print(f"  GRPO advantages + HA-DW  wall {spread(hw, 1e6 / calls)}   CPU {spread(hc, 1e6 / calls)}")
    print(f"  optimiser step           wall {spread(sw, 1e6)}   CPU {spread(sc, 1e6)}")
    step, both = statistics.median(sc), statistics.median(hc) / calls
    extra = both - statistics.median(pc) / calls
    print(
        f"  share of a step (CPU medians): advantages + HA-DW {100 * both / step:.2f} %, "
        f"HA-DW alone {100 * extra / step:.2f} % ({1e6 * extra:.0f} us)"
    )


if __name__ == "__main__":
    main()
