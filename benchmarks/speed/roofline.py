"""This machine's limit, measured, and how close hadw's decoding and training step come to it.

1. fp32 matmul peak (GFLOP/s) at 1 thread and at all threads: the largest rate over a few square sizes
   and both of torch's fp32 matmul libraries, MKL (`torch.mm`) and oneDNN (its packed linear, which
   FusedDecoder uses). The peak is what the hardware gives the best-shaped matmul: here oneDNN's runs
   ~10-20 % above MKL's, so a peak probed with `torch.mm` alone flattered every fraction below. (The probe
   lives in cpu_info.py, which also gives every `--report` header the 1-thread fp32 and bf16 peaks.)
2. Memory bandwidth (GB/s): `copy_` of a 256 MiB tensor, counting bytes read + written.
3. For the tiny model (~0.8 M) and a ~5.6 M model (shapes printed): decode tokens/s with
   HFRolloutEngine's two decoders, measured alternately in one run (`hf`: transformers' forward with a
   DynamicCache; `fused`: hadw's FusedDecoder, the default on a CPU), and one optimiser step
   (teacher-forced log-probs + GRPO loss + backward + AdamW), each as achieved GFLOP/s and as a
   fraction of the 1-thread matmul peak (both run at 1 thread). The peak's matmul is timed again in
   every round next to the model runs, and each round's rate is divided by that round's peak.

FLOPs counted: 2 per weight per token for a forward (LM head included, embedding lookup not), plus
attention's 4·layers·hidden·context per token; a generate call is the prefill of each distinct prompt
plus new_tokens - 1 steps of every row; a training step is 3× its forward (forward + backward).
A fraction well under 1 with low arithmetic intensity means per-op overhead, not the hardware, sets
the speed. The machine may be shared: each figure is min / median / max over --repeats runs, by wall
time and by process CPU time; the fractions compare CPU-time rates, which time-sharing leaves alone,
measured in the same round, which drifting load (other tenants' memory traffic, clocks) hits alike.

    .venv/bin/python benchmarks/speed/roofline.py [--repeats 5] [--rows 64 --prompt-len 16 --new-tokens 64] \
        [--report FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import torch
from bench_models import MODELS
from bench_report import add_report_option, report
from cpu_info import matmul_peaks, peak_probe, spread, spread_alternating
from transformers.utils import logging as hf_logging

from hadw.core import LOSS_PRESETS, policy_loss
from hadw.rollout import HFRolloutEngine, SamplingParams, build_tiny_model, compute_logprobs, load_model

ROWS, PROMPT_LEN, NEW_TOKENS = 64, 16, 64  # defaults: 8 prompts x G = 8, the shape of one rollout batch


def fmt(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    vals = sorted(scale * v for v in values)
    return " / ".join(f"{v:8.{digits}f}" for v in (vals[0], statistics.median(vals), vals[-1]))


def report_peaks(label: str, peaks: dict[str, tuple[int, list[float], list[float]]]) -> tuple[str, int]:
    """Print each library's best matmul; return the peak's (library, n): the fastest by median CPU-time rate."""
    for library, (n, walls, cpus) in peaks.items():
        print(f"  fp32 matmul, {label:9s} {library:6s} n={n:<4d} GFLOP/s by wall {fmt(walls)}, by CPU time {fmt(cpus)}")
    library = max(peaks, key=lambda lib: statistics.median(peaks[lib][2]))
    return library, peaks[library][0]


def bandwidth(repeats: int) -> tuple[list[float], list[float]]:
    """GB/s (read + write) of a 1-thread 256 MiB copy, by wall and by CPU time."""
    torch.set_num_threads(1)
    src = torch.randn(64 * 2**20)  # 256 MiB
    dst = torch.empty_like(src)
    walls, cpus = spread(lambda: dst.copy_(src), repeats)
    return [2 * src.numel() * 4 / w / 1e9 for w in walls], [2 * src.numel() * 4 / c / 1e9 for c in cpus]


def model_flops_per_token(model, context: float) -> float:
    """Forward FLOPs per token: 2 per matmul weight (tied LM head counted once as a matmul) + attention."""
    cfg = model.config
    weights = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n)
    lm_head = cfg.vocab_size * cfg.hidden_size  # tied to the embedding, still a matmul per token
    attention = 4 * cfg.num_hidden_layers * cfg.hidden_size * context  # QK^T and PV
    return 2 * (weights + lm_head) + attention


def bench_model(
    name: str,
    shape: dict,
    repeats: int,
    peak: tuple[str, int],
    rows: int = ROWS,
    prompt_len: int = PROMPT_LEN,
    new_tokens: int = NEW_TOKENS,
) -> list[str]:
    """Report lines for one model: decode (both decoders) and a training step, on `rows` = prompts x 8.

    Each round also times the peak's matmul (peak = (library, n)), so every fraction divides a rate by the peak
    measured in the same round: load that drifts during the run (memory traffic of other tenants, clocks) hits both.
    """
    torch.set_num_threads(1)
    peak_probe_fn, peak_flop = peak_probe(*peak)

    with tempfile.TemporaryDirectory() as tmp:
        model, tok = load_model(build_tiny_model(tmp, **shape), device="cpu")
    cfg = model.config
    prompts = [[4 + (i * 7 + j) % 200 for j in range(prompt_len)] for i in range(rows // 8)]
    engines = {name: HFRolloutEngine(model, tok, decoder=name) for name in ("hf", "fused")}
    params = SamplingParams(n=8, max_new_tokens=new_tokens, ignore_eos=True, seed=0)
    batch = engines["fused"].generate(prompts, params)

    # The work of one generate call: one prefill per distinct prompt (its last position gives each row's first
    # token), then new_tokens - 1 one-token steps for every row.
    prefill_flop = (rows // 8) * prompt_len * model_flops_per_token(model, prompt_len / 2)
    steps_flop = rows * (new_tokens - 1) * model_flops_per_token(model, prompt_len + new_tokens / 2)
    decode_flop = prefill_flop + steps_flop
    runs = {name: (lambda e=e: e.generate(prompts, params)) for name, e in engines.items()}
    decode = spread_alternating({"peak": peak_probe_fn, **runs}, repeats)

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    ids, mask, rmask = batch.input_ids, batch.attention_mask, batch.response_mask
    adv = torch.randn(rows)

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        logprobs = compute_logprobs(model, ids, mask, rmask, 1.0)
        loss, _ = policy_loss(logprobs, batch.logprobs, adv, rmask, LOSS_PRESETS["grpo"])
        loss.backward()
        optimizer.step()

    seq = prompt_len + new_tokens
    train_flop = 3 * rows * seq * model_flops_per_token(model, seq / 2)
    train = spread_alternating({"peak": peak_probe_fn, "train": train_step}, repeats)
    model.eval()

    def line(what, flop, walls, cpus, peak_cpus, unit_count, unit):
        gf_cpu = [flop / c / 1e9 for c in cpus]
        fraction = [100 * (flop / c) / (peak_flop / pc) for c, pc in zip(cpus, peak_cpus, strict=True)]
        return (
            f"  {name:5s} {what:12s} {unit:8s} by wall {fmt([unit_count / w for w in walls])}, by CPU "
            f"{fmt([unit_count / c for c in cpus])} | GFLOP/s by CPU {fmt(gf_cpu)} = % of the round's peak "
            f"{fmt(fraction)}"
        )

    header = (
        f"{name}: {cfg.model_type}, hidden {cfg.hidden_size}, {cfg.num_hidden_layers} layers, "
        f"{cfg.num_attention_heads}/{cfg.num_key_value_heads} q/kv heads, MLP {cfg.intermediate_size}, vocab "
        f"{cfg.vocab_size}, {model.num_parameters() / 1e6:.2f} M params; {rows} rows, prompt {prompt_len}, "
        f"{new_tokens} new tokens"
    )
    speedup = [h / f for h, f in zip(decode["hf"][1], decode["fused"][1], strict=True)]  # same round
    return [
        header,
        line("decode hf", decode_flop, *decode["hf"], decode["peak"][1], rows * new_tokens, "tokens/s"),
        line("decode fused", decode_flop, *decode["fused"], decode["peak"][1], rows * new_tokens, "tokens/s"),
        f"  {name:5s} fused / hf tokens per CPU-second, round by round: {fmt(speedup, digits=2)} (min / median / max)",
        line("train step", train_flop, *train["train"], train["peak"][1], 1, "steps/s"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    # The two models this docstring names; 135M (added to bench_models.py later) takes many minutes a round.
    ap.add_argument("--models", nargs="+", default=["tiny", "5.6M"], choices=list(MODELS))
    ap.add_argument("--rows", type=int, default=ROWS, help="rows per batch (prompts x 8 samples; a multiple of 8)")
    ap.add_argument("--prompt-len", type=int, default=PROMPT_LEN)
    ap.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    add_report_option(ap)
    args = ap.parse_args()
    with report(args.report, ap, args):
        measure(args)


def measure(args: argparse.Namespace) -> None:
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    all_threads = os.cpu_count() or 1
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {all_threads} CPUs, "
        f"load average {os.getloadavg()[0]:.1f} (a shared machine lowers every figure), {args.repeats} runs each"
    )
    print("figures: min / median / max")
    n1 = report_peaks("1 thread", peaks1 := matmul_peaks(1, args.repeats))
    report_peaks(f"{all_threads} threads", matmul_peaks(all_threads, args.repeats))
    print(f"  peak (1 thread): {n1[0]} n={n1[1]}, the faster library by median (all-thread rates: CPU time x threads)")
    bw, bw_cpu = bandwidth(args.repeats)
    peak = statistics.median(peaks1[n1[0]][2])
    print(f"  memory copy, 1 thread    GB/s by wall {fmt(bw)}, by CPU time {fmt(bw_cpu)}  (256 MiB, read + write)")
    ridge = peak / statistics.median(bw_cpu)
    print(f"  ridge point (1 thread)   {ridge:.1f} FLOP/byte (by-CPU matmul peak / by-CPU copy bandwidth)")
    for name in args.models:
        for row in bench_model(name, MODELS[name], args.repeats, n1, args.rows, args.prompt_len, args.new_tokens):
            print(row)
    print(
        f"(model runs use 1 thread; % of the round's peak = GFLOP/s per CPU-second over the GFLOP/s per CPU-second "
        f"of the {n1[0]} n={n1[1]} matmul timed in the same round, so neither time the scheduler gives to other "
        "processes nor load that drifts during the run favours one side)"
    )


if __name__ == "__main__":
    main()
