"""FusedDecoder's decode step with its projections packed for oneDNN vs MKL's F.linear, on real shapes.

The fused decoder packs a projection for oneDNN's linear where that is measured faster for its shape, row
count and number of steps (hadw/rollout/fused.py, packing_pays). This measures what that choice is worth on
the benchmark models and on Qwen2.5-0.5B's shapes (random weights from its config: nothing is
downloaded; ~2 GB of memory). Both variants run alternately in one process, 1 thread by default, on the
same prompts; reported: CPU ms per step and tokens/s (min / median / max over --repeats rounds), the
per-round speedup, and the one-off costs of building the decoder (weight copies, packing, cache) and of
the prefill (each distinct prompt once, on the same weights). Each round also times roofline.py's peak
matmul (the faster library at its best size, probed first; the fastest of 3 calls), and every step's rate is
given as a fraction of the peak timed in that round (FLOPs counted as in roofline.py: 2 per weight per
token, plus attention).

    .venv/bin/python benchmarks/speed/decode_step.py                      # qwen2.5-0.5b, 64 rows, 16 steps
    .venv/bin/python benchmarks/speed/decode_step.py --shape 5.6M --steps 32
    .venv/bin/python benchmarks/speed/decode_step.py --report benchmarks/speed/decode_step.md   # also keep it
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import torch
from bench_models import MODELS
from bench_report import add_report_option, report
from cpu_info import matmul_peaks, peak_probe
from roofline import model_flops_per_token, report_peaks
from transformers import AutoModelForCausalLM, Qwen2Config

from hadw.rollout import fused
from hadw.rollout.logprobs import prompt_groups

SHAPES = {  # Qwen2 configs: the benchmark models (bench_models.py, the tiny tokenizer's 260 tokens) and a real one
    **{
        name: dict(hidden_size=m["hidden_size"], intermediate_size=m["intermediate_size"],
                   num_hidden_layers=m["num_layers"], num_attention_heads=m["num_heads"],
                   num_key_value_heads=m["num_kv_heads"], vocab_size=260)
        for name, m in MODELS.items()
    },
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936),
}  # fmt: skip


def fmt(values: list[float], digits: int = 1) -> str:
    vals = sorted(values)
    return " / ".join(f"{v:.{digits}f}" for v in (vals[0], statistics.median(vals), vals[-1]))


def cpu_seconds(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


@torch.inference_mode()
def run(model, ids, mask, steps: int, pack_min_weights: int) -> tuple[float, float, float]:
    """CPU seconds (to build the decoder, to prefill, per step) for one pass of `steps` greedy steps."""
    fused.PACK_MIN_WEIGHTS = pack_min_weights
    start = time.process_time()
    decoder = fused.FusedDecoder(model, mask, max_new_tokens=steps)
    built = time.process_time()
    tokens = decoder.prefill(ids, *prompt_groups(ids, mask)).argmax(-1)
    prefilled = time.process_time()
    positions = mask.sum(1)
    for s in range(steps):
        tokens = decoder.step(tokens, positions + s).argmax(-1)
    return built - start, prefilled - built, (time.process_time() - prefilled) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=list(SHAPES))
    ap.add_argument("--rows", type=int, default=64, help="prompts x 8 samples (a multiple of 8)")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    add_report_option(ap)
    args = ap.parse_args()
    with report(args.report, ap, args):
        measure(args)


def measure(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = Qwen2Config(tie_word_embeddings=True, max_position_embeddings=4096, **SHAPES[args.shape])
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    ids = torch.randint(10, 250, (args.rows // 8, args.prompt_len)).repeat_interleave(8, 0)
    mask = torch.ones_like(ids)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s); {args.shape}: {model.num_parameters() / 1e6:.0f} M "
        f"params, {args.rows} rows, prompt {args.prompt_len}, {args.steps} steps; the engine packs a weight of >= "
        f"{fused.PACK_MIN_WEIGHTS} elements where packing is measured faster (fused.packing_pays); both forced here"
    )
    peak = report_peaks(f"{args.threads} thread(s)", matmul_peaks(args.threads, args.repeats))
    peak_fn, peak_flop = peak_probe(*peak)
    peak_cpu: list[float] = []  # CPU seconds of the peak's matmul, one per round
    step_flop = args.rows * model_flops_per_token(model, args.prompt_len + args.steps / 2)
    fused.PACKING = "always"  # measure both variants (PACK_MIN_WEIGHTS picks which) whatever the engine would choose
    variants = {"MKL F.linear": 10**15, "oneDNN packed": fused.PACK_MIN_WEIGHTS}
    results: dict[str, tuple[list, list, list]] = {name: ([], [], []) for name in variants}
    for threshold in variants.values():  # warm-up
        run(model, ids, mask, 1, threshold)
    for _ in range(args.repeats):
        peak_cpu.append(min(cpu_seconds(peak_fn) for _ in range(3)))  # the fastest of 3: the first after a
        # 0.5 B-shaped pass runs up to x2.5 slower (its allocations fault in pages the big pass returned)
        for name, threshold in variants.items():
            for store, value in zip(results[name], run(model, ids, mask, args.steps, threshold), strict=True):
                store.append(value)
    base = results["MKL F.linear"][2]
    for name, (builds, prefills, steps) in results.items():
        speedup = [b / s for b, s in zip(base, steps, strict=True)]
        of_peak = [100 * (step_flop / s) / (peak_flop / p) for s, p in zip(steps, peak_cpu, strict=True)]
        print(
            f"  {name:14s} ms/step (CPU) {fmt([1e3 * s for s in steps])} | tokens/s "
            f"{fmt([args.rows / s for s in steps])} = % of the round's peak {fmt(of_peak)} | x{fmt(speedup, 2)} "
            f"per round | build s {fmt(builds, 2)} "
            f"| prefill s {fmt(prefills, 2)}"
        )
    print("figures: min / median / max")


if __name__ == "__main__":
    main()
