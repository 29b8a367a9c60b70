"""Generation's cost per row against the batch's row count, at SmolLM2-135M's shapes, in float32 and in bf16.

A decode step reads every weight once whatever the number of rows, so with few rows a step costs about the time to
stream the weights (135 M × 4 bytes in float32, × 2 in bf16) and its cost per row falls as rows are added, until
the matmuls themselves dominate. This measures `HFRolloutEngine.generate` (the fused decoder, packing chosen by
measured speed) at 8–128 rows (prompts of G = 8 rows), 1 thread, the row counts alternating in each round so that
load drifts hit all alike. For each: CPU seconds per generate call, per token step and per row; the rate at which
a step streams the weights (their bytes over the step's time); the per-row cost over the 128-row one; and the
step's floor, the weights' bytes over the copy bandwidth measured in the same run.

    python benchmarks/speed/rollout_rows.py [--repeats 3] [--new-tokens 16] [--report FILE]
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
from bench_models import MODELS
from bench_report import add_report_option, report
from cpu_info import native_bf16, read_cpu
from roofline import bandwidth

from hadw.rollout import HFRolloutEngine, SamplingParams, build_tiny_model, load_model

ROWS = (8, 16, 32, 64, 128)


def measure(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model, tok = load_model(build_tiny_model(tmp, **MODELS["135M"]), device="cpu")
    engine = HFRolloutEngine(model, tok, decoder="fused")
    copy_gbs = statistics.median(bandwidth(3)[1])
    weight_bytes = {"float32": 4 * model.num_parameters(), "bf16": 2 * model.num_parameters()}
    print(f"135M shapes ({model.num_parameters() / 1e6:.1f} M parameters), 1 thread, prompt 32 tokens, "
          f"{args.new_tokens} new tokens (EOS ignored), copy bandwidth {copy_gbs:.1f} GB/s (median of 3)")  # fmt: skip
    precisions = ("float32", "bf16") if native_bf16(read_cpu().flags) or args.all_precisions else ("float32",)
    if precisions == ("float32",):
        print("this CPU has no native bf16 (no AVX512-BF16 / AMX): float32 only (--all-precisions for both)")
    for precision in precisions:
        context = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16" else torch.no_grad
        seconds: dict[int, list[float]] = {rows: [] for rows in ROWS}
        for repeat in range(args.repeats + 1):  # the first round warms up (and measures packing once per shape)
            for rows in ROWS:
                prompts = [[4 + (i * 7 + j) % 200 for j in range(32)] for i in range(rows // 8)]
                params = SamplingParams(n=8, max_new_tokens=args.new_tokens, ignore_eos=True, seed=repeat)
                start = time.process_time()
                with context():
                    engine.generate(prompts, params)
                if repeat:
                    seconds[rows].append(time.process_time() - start)
        floor_ms = 1e3 * weight_bytes[precision] / (copy_gbs * 1e9)
        print(f"\n{precision}: weights {weight_bytes[precision] / 1e6:.0f} MB, read once per step: a step's floor "
              f"{floor_ms:.1f} ms at the copy bandwidth")  # fmt: skip
        print("| rows | CPU s per generate (min / median / max) | ms per token step | weights streamed at | "
              "ms per row | × the 128-row cost per row |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        per_row_128 = statistics.median(seconds[128]) / 128
        for rows in ROWS:
            values = sorted(seconds[rows])
            med = statistics.median(values)
            step = med / args.new_tokens  # the prefill included (one per distinct prompt: small beside the steps)
            print(f"| {rows} | {values[0]:.2f} / {med:.2f} / {values[-1]:.2f} | {1e3 * step:.1f} | "
                  f"{weight_bytes[precision] / step / 1e9:.1f} GB/s | {1e3 * med / rows:.1f} | "
                  f"×{med / rows / per_row_128:.2f} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--all-precisions", action="store_true", help="bf16 too on a CPU without native bf16")
    add_report_option(parser)
    args = parser.parse_args()
    with report(args.report, parser, args):
        measure(args)


if __name__ == "__main__":
    main()
