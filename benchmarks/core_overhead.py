"""HA-DW's cost on top of GRPO advantages: 1 M responses in 128 k groups (G = 8), CPU, one run.

Prints the time of GRPO advantages alone and of advantages + HA-DW weights + anchor update, and the
ratio. Target (issue: foundation): HA-DW adds at most 30 %.
Usage: python benchmarks/core_overhead.py [--responses 1048576] [--group-size 8] [--repeats 11] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hadw.core import apply_hadw, compute_advantages, make_anchor


def interleaved_medians(fns, repeats: int) -> list[float]:
    """Median time of each function, timed in turns (a, b, a, b, ...) so machine load hits all alike."""
    for fn in fns:
        fn()  # warm-up: allocator and kernels
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, bucket in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=1 << 20)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: stable on a shared box)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    gen = torch.Generator().manual_seed(0)
    n = args.responses
    difficulty = torch.rand(n // args.group_size, generator=gen).repeat_interleave(args.group_size)
    correctness = (torch.rand(n, generator=gen) < difficulty).float()
    group_ids = torch.arange(n) // args.group_size
    anchor = make_anchor("window", k=10)

    def advantages_only():
        return compute_advantages(correctness, group_ids, "grpo").advantages

    def advantages_and_hadw():
        adv = compute_advantages(correctness, group_ids, "grpo")
        return apply_hadw(adv.advantages, correctness, adv.groups, anchor).advantages

    t_adv, t_hadw = interleaved_medians([advantages_only, advantages_and_hadw], args.repeats)
    print(f"responses={n:,} groups={n // args.group_size:,} threads={torch.get_num_threads()}")
    print(f"GRPO advantages            : {t_adv * 1e3:8.1f} ms (median of {args.repeats})")
    print(f"GRPO advantages + HA-DW    : {t_hadw * 1e3:8.1f} ms")
    print(f"ratio (HA-DW / plain)      : {t_hadw / t_adv:8.3f}  (target <= 1.30)")


if __name__ == "__main__":
    main()
