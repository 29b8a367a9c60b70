"""Rollout throughput: HFRolloutEngine vs transformers' model.generate(), side by side in one run.

Same model, same left-padded batch (prompts of different lengths x n samples), same sampling
(temperature 1, no top-k/top-p), same number of steps: EOS is ignored by our engine
(ignore_eos=True) and held off in generate() with min_new_tokens = max_new_tokens, so both produce
exactly batch x max_new_tokens tokens. Runs alternate (ours, generate, ours, ...) so machine noise hits
both alike; min / median / max over the runs are reported, by wall time and by process CPU time (on a
shared machine the CPU-time figures are the stable ones). The model's shape is printed.

`--decoder` picks HFRolloutEngine's decoder (auto = fused on a CPU for Llama / Qwen2; hf = transformers'
forward). What made decoding faster (1 thread, CPU time; benchmarks/speed/roofline.py has the figures):
one prefill per distinct prompt instead of per row (the G samples of a group share it), inverse-CDF
sampling (one uniform per row; torch.multinomial drew 260 exponentials per row, ~0.4 ms a step),
FusedDecoder (~16 ops per layer instead of ~40), its large projections packed for oneDNN's fp32 linear
(benchmarks/speed/decode_step.py), and the prefill on the same weights, straight into the decoder's cache
(x1.1-1.3 less CPU time than transformers' forward plus the copy). Against earlier releases:
benchmarks/speed/rollout_vs_ref.py. Tried and not adopted:
- a preallocated cache under transformers' forward: same CPU time per step;
- torch.compile of transformers' decode step over StaticCache: ~110 s to compile, not faster once warm
  (11.1 vs 8.4-9.3 ms/step); of a static-shape FusedDecoder step (full-width cache): 19 s to compile,
  then 25 ms/step against 6.1 eager (tiny, 64 rows); of the FusedDecoder step with a dynamic column and
  one cache tensor per layer (no recompiles, writes in place): 14-30 s to compile, then the same time per
  step as eager: the matmul and bmm calls dominate, Inductor only fuses the elementwise ops around them;
- Inductor-generated attention (mul + sum, rows outer or rows innermost): 1.0-1.4x slower than MKL's bmm;
  re-measured in the engine (in-process A/B, 9 rounds, 64 x 64): x0.98 (tiny), x0.97 (5.6 M), although the
  attention alone runs x1.3-1.5 faster over a 5.6 M step's cache: each compiled call costs ~38 us of guards,
  and next to the projections the cache reads stall alike; with K stored d-major (the score reduction
  vectorised over columns): the same; SDPA's CPU flash kernel (a kv head's g query heads as 2 positions):
  ~10 % less attention time alone, within the noise of a step;
- block-diagonal attention over r rows at a time: same time at r = 2 and 4, 1.3x slower at r = 8;
- the prompt's K/V held once per group (prefix sharing) in torch ops: +1-2 % (the extra cat / bmm ops
  eat the saved bytes); a time-major cache [T, B*kv, D]: slower; MKL's packed sgemm: no gain in the loop;
- a C attention kernel (ctypes, cc -O3 -march=native, K stored transposed) reading the prompt's K/V once
  per group: decode x1.11 (tiny) and x1.10 (5.6 M), same tokens, in-process A/B; not adopted: hand-written
  C compiled at run time for ~10 %;
- transparent huge pages for cache and weights: not granted on this machine (THP = madvise, AnonHugePages
  stays 0); larger glibc mmap thresholds (the 5.6 M cache's page faults cost ~1.5 % system time): noise;
- K and V of a column side by side in the cache ([B*kv, T, 2, D], so that reading K brings V's cache lines):
  x0.85 (5.6 M, 64 x 64, 9 in-process rounds; MKL's bmm on the strided views is slower).
What is left is memory-bound: the attention's many small per-row matrices and the weights stream from
L3/DRAM each step. At 64 rows x 64 new tokens on the 5.6 M model a step reads ~22 MB of weights and ~25 MB
of K/V (the 32 MB L3 is shared); one layer's two attention bmm's take ~0.2 ms alone on a cache-resident
[256, 48, 32] K/V and ~0.55 ms inside the step, while the projections run at ~80 % of the matmul peak.

Then one instrumented run of each splits a decoding step into model forward vs the rest (sampling +
bookkeeping), and a torch.profiler run splits our "rest".

    .venv/bin/python benchmarks/speed/rollout_speed.py                      # tiny model, CPU, 1 thread
    .venv/bin/python benchmarks/speed/rollout_speed.py --hidden 256 --layers 8 --heads 8 --kv-heads 4 \
        --intermediate 640                                            # the 5.6 M model of roofline.py
    (--report FILE also keeps the output, with the command, versions and machine: bench_report.py)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import torch
from bench_report import add_report_option, report
from torch.profiler import ProfilerActivity, profile

from hadw.rollout import FusedDecoder, HFRolloutEngine, SamplingParams, build_tiny_model, load_model

QUESTIONS = ["1+1=", "What is 12*3? Put the answer in \\boxed{}.", "Simplify 6/8.", "x^2 = 49, x > 0; x ="]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], device: torch.device) -> float:
    return timed_both(fn, device)[0]


def timed_both(fn: Callable[[], object], device: torch.device) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    sync(device)
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    sync(device)
    return time.perf_counter() - start, time.process_time() - cpu


class ForwardTimer:
    """Wall time spent inside model.forward (hooks on the top module) and FusedDecoder's prefill and step
    (the fused decoder's forward, which bypasses the module), synchronised on CUDA."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.total, self.calls, self._start, self.device = 0.0, 0, 0.0, device
        self._handles = [model.register_forward_pre_hook(self._pre), model.register_forward_hook(self._post)]
        self._originals = {name: getattr(FusedDecoder, name) for name in ("prefill", "step")}
        for name, method in self._originals.items():
            setattr(FusedDecoder, name, self._timed(method))

    def _timed(self, method):
        def timed(decoder, *args, **kwargs):
            self._pre()
            out = method(decoder, *args, **kwargs)
            self._post()
            return out

        return timed

    def _pre(self, *_):
        sync(self.device)
        self._start = time.perf_counter()

    def _post(self, *_):
        sync(self.device)
        self.total += time.perf_counter() - self._start
        self.calls += 1

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        for name, method in self._originals.items():
            setattr(FusedDecoder, name, method)


# torch.profiler op names -> the part of a decode step they belong to. "other" holds the rest: norms, RoPE,
# cache writes, SiLU, the Python between ops and the profiler's own per-op cost, so it reads high.
STEP_PARTS = {
    "projections": ("mkldnn::_linear_pointwise", "aten::addmm", "aten::mm"),
    "attention": ("aten::bmm", "aten::baddbmm", "aten::_softmax"),  # rows of < 16 columns softmax in 4 ops
}


def forward_shares(prof) -> dict[str, float]:
    """Share of the self CPU time inside "rollout/forward" (the decode steps) by part of the step."""
    totals = dict.fromkeys([*STEP_PARTS, "other"], 0.0)
    for event in prof.events():
        region = event
        while region is not None and region.name != "rollout/forward":
            region = region.cpu_parent
        if region is not None:
            part = next((k for k, names in STEP_PARTS.items() if event.name in names), "other")
            totals[part] += event.self_cpu_time_total
    total = sum(totals.values()) or 1.0
    return {part: value / total for part, value in totals.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", default=None, help="local checkpoint; default: build the tiny model")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=384)
    ap.add_argument("--batch-prompts", type=int, default=8, help="prompts (cycled from 4 questions)")
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0 = torch default)")
    ap.add_argument("--decoder", default="auto", choices=["auto", "fused", "hf"], help="HFRolloutEngine decoder")
    add_report_option(ap)
    args = ap.parse_args()
    with report(args.report, ap, args):
        measure(args)


def measure(args: argparse.Namespace) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model_dir or build_tiny_model(
            tmp, hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
            num_kv_heads=args.kv_heads, intermediate_size=args.intermediate,
        )  # fmt: skip
        model, tok = load_model(path, dtype=args.dtype, device=args.device)
    device = model.device
    prompts = [tok(QUESTIONS[i % len(QUESTIONS)]).input_ids for i in range(args.batch_prompts)]
    rows = [p for p in prompts for _ in range(args.n)]
    steps, n_rows = args.new_tokens, len(rows)
    enc = tok.pad({"input_ids": rows}, return_tensors="pt").to(device)
    engine = HFRolloutEngine(model, tok, decoder=args.decoder)
    params = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=steps, ignore_eos=True, seed=0)

    def ours():
        batch = engine.generate(prompts, params)
        assert batch.response_ids.shape == (n_rows, steps)

    @torch.inference_mode()
    def hf_generate():
        out = model.generate(
            **enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
            max_new_tokens=steps, min_new_tokens=steps, pad_token_id=tok.pad_token_id,
        )  # fmt: skip
        assert out.shape == (n_rows, enc["input_ids"].shape[1] + steps)

    runs = {"HFRolloutEngine": ours, "model.generate": hf_generate}
    cfg = model.config
    print(
        f"model: {cfg.model_type}, hidden {cfg.hidden_size}, {cfg.num_hidden_layers} layers, "
        f"{cfg.num_attention_heads}/{cfg.num_key_value_heads} q/kv heads, MLP {cfg.intermediate_size}, vocab "
        f"{cfg.vocab_size}, {model.num_parameters() / 1e6:.2f} M params, {args.dtype} on {device}, "
        f"{torch.get_num_threads()} threads | batch {args.batch_prompts} prompts x n={args.n} = {n_rows} rows, "
        f"{steps} new tokens each, prompt width {enc['input_ids'].shape[1]} | decoder {args.decoder} "
        f"(fused in use: {engine.uses_fused()})"
    )
    for fn in runs.values():  # warm-up
        fn()
    seconds: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            seconds[name].append(timed_both(fn, device))

    def spread(values: list[float]) -> str:
        v = sorted(values)
        return f"{v[0]:7.0f} / {statistics.median(v):7.0f} / {v[-1]:7.0f}"

    tokens = n_rows * steps
    print(f"\nthroughput, tokens/s, min / median / max of {args.repeats} alternating runs:")
    for name, ts in seconds.items():
        walls, cpus = [t[0] for t in ts], [t[1] for t in ts]
        print(
            f"  {name:16s} by wall {spread([tokens / w for w in walls])}   by CPU {spread([tokens / c for c in cpus])}"
            f"   ({1e3 * statistics.median(cpus) / steps:6.2f} CPU ms/step)"
        )
    for i, clock in enumerate(("wall", "CPU")):
        ratios = sorted(b[i] / a[i] for a, b in zip(seconds["HFRolloutEngine"], seconds["model.generate"], strict=True))
        print(
            f"  ratio HFRolloutEngine / generate by {clock:4s} (per pair) "
            f"{ratios[0]:.2f} / {statistics.median(ratios):.2f} / {ratios[-1]:.2f}"
        )

    print("\nwhere a decoding step goes (one instrumented run each; forward synchronised):")
    for name, fn in runs.items():
        timer = ForwardTimer(model, device)
        total = timed(fn, device)
        timer.remove()
        rest = total - timer.total
        print(
            f"  {name:16s} total {1e3 * total / steps:6.2f} ms/step = forward {1e3 * timer.total / steps:6.2f} "
            f"({100 * timer.total / total:4.1f}%) + sampling & bookkeeping {1e3 * rest / steps:6.2f} "
            f"({100 * rest / total:4.1f}%)  [{timer.calls} forward calls, fused prefill and steps included]"
        )

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        total = timed(ours, device)
    labelled = {e.key: e.cpu_time_total / 1e3 for e in prof.key_averages() if e.key.startswith("rollout/")}
    outside = total * 1e3 - sum(labelled.values())
    print("  HFRolloutEngine breakdown (torch.profiler, CPU-side time, profiler overhead included):")
    for key in ("rollout/prefill", "rollout/forward", "rollout/sample", "rollout/bookkeeping"):
        ms = labelled.get(key, 0.0)
        print(f"    {key:22s} {ms / steps:7.3f} ms/step  ({100 * ms / (total * 1e3):4.1f}%)")
    print(f"    {'outside the loop':22s} {outside:7.3f} ms total  (padding, decoder setup, decode to text)")
    shares = forward_shares(prof)
    print("    rollout/forward by op: " + ", ".join(f"{part} {100 * share:.0f} %" for part, share in shares.items()))


if __name__ == "__main__":
    main()
