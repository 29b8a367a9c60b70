"""GPU rollout throughput at the 135 M shape: each decoder of HFRolloutEngine vs transformers' `generate`.

Why: on a GPU a 135 M model's decode step is launch-bound (transformers' forward: ~1,200 kernels a token),
so the rollout runs far below what the card can do. `decoder="graph"` (hadw.rollout.graphed) replays the
fused step as one CUDA graph. This script measures, side by side in one process, alternating the
contenders round by round, the tokens/s of

    hf           HFRolloutEngine over transformers' forward + DynamicCache (the GPU default, decoder=auto)
    fused        FusedDecoder's step, eager (~16 ops a layer instead of ~40)
    graph        the same step with static shapes, replayed as a CUDA graph (opt-in: rollout.decoder=graph)
    generate     model.generate (dynamic cache)
    generate-static   model.generate(cache_implementation="static"), which transformers compiles
                 (torch.compile of the forward, CUDA graphs included); its first call's time is printed

on SmolLM2-135M's shapes (Llama, 30 layers, GQA 9/3, 49 152 vocabulary; random weights, nothing
downloaded): 8 prompts x G = 8 rows, 128 new tokens each (EOS ignored / held off), temperature 1, in the
trainer's mixed precision (fp32 weights, autocast bf16) or in bf16 weights (--dtype bfloat16).
Tokens/s = rows x new tokens / wall time of the whole call (prefill included), synchronised.

    python benchmarks/speed/rollout_gpu.py --report benchmarks/speed/rollout_gpu.md
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import torch
import transformers
from bench_models import MODELS
from bench_report import add_report_option, report

from hadw.rollout import HFRolloutEngine, SamplingParams, build_tiny_model, load_model


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn) -> float:
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="135M", choices=sorted(MODELS), help="a shape of benchmarks/bench_models.py")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8, help="samples per prompt (G)")
    ap.add_argument("--prompt-tokens", type=int, default=64, help="longest prompt; others shorter (left padding)")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--dtype", default="mixed", choices=["mixed", "bfloat16"], help="mixed: fp32 weights, autocast bf16"
    )
    ap.add_argument("--contenders", default="hf,fused,graph,generate,generate-static")
    add_report_option(ap)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script only (graph runs eagerly)")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("rollout_gpu.py: needs a CUDA GPU (or --device cpu for a smoke test)")
    with report(args.report, ap, args):
        measure(args)


def measure(args: argparse.Namespace) -> None:

    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(tmp, **MODELS[args.model])
        model, tok = load_model(path, dtype="bfloat16" if args.dtype == "bfloat16" else "float32", device=args.device)
    gen = torch.Generator().manual_seed(0)
    lengths = torch.linspace(args.prompt_tokens // 2, args.prompt_tokens, args.prompts).long().tolist()
    prompts = [torch.randint(4, 260, (n,), generator=gen).tolist() for n in lengths]  # the byte tokenizer's ids
    rows = [p for p in prompts for _ in range(args.n)]
    n_rows, steps = len(rows), args.new_tokens
    enc = tok.pad({"input_ids": rows}, return_tensors="pt").to(args.device)
    params = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=steps, ignore_eos=True, seed=0)
    autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.dtype == "mixed")

    def engine_run(decoder: str):
        engine = HFRolloutEngine(model, tok, decoder=decoder)

        def run():
            with autocast:
                batch = engine.generate(prompts, params)
            assert batch.response_ids.shape == (n_rows, steps)

        return run

    def generate_run(**extra):
        @torch.inference_mode()
        def run():
            with autocast:
                out = model.generate(
                    **enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=steps,
                    min_new_tokens=steps, pad_token_id=tok.pad_token_id, **extra,
                )  # fmt: skip
            assert out.shape == (n_rows, enc["input_ids"].shape[1] + steps)

        return run

    makers = {
        "hf": lambda: engine_run("hf"),
        "fused": lambda: engine_run("fused"),
        "graph": lambda: engine_run("graph"),
        "generate": lambda: generate_run(),
        "generate-static": lambda: generate_run(cache_implementation="static"),
    }
    names = [c for c in args.contenders.split(",") if c]
    runs = {name: makers[name]() for name in names}
    cfg = model.config
    device_name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    header = (
        f"{device_name} | torch {torch.__version__} (CUDA {torch.version.cuda}), transformers "
        f"{transformers.__version__}, Python {platform.python_version()} | model {args.model}: {cfg.model_type}, "
        f"hidden {cfg.hidden_size}, {cfg.num_hidden_layers} layers, {cfg.num_attention_heads}/"
        f"{cfg.num_key_value_heads} q/kv heads, vocab {cfg.vocab_size}, {model.num_parameters() / 1e6:.0f} M "
        f"params, {args.dtype} | {args.prompts} prompts x G={args.n} = {n_rows} rows, prompts "
        f"{min(lengths)}-{max(lengths)} tokens, {steps} new tokens each"
    )
    print(header, flush=True)
    first = {}
    for name, run in list(runs.items()):  # first call: CUDA context, cuBLAS handles, graph capture, compilation
        try:
            first[name] = timed(run)
        except Exception as err:  # a contender that cannot run here is reported, not fatal to the others
            print(f"  {name}: failed: {type(err).__name__}: {str(err).splitlines()[0][:300]}", flush=True)
            del runs[name]
            continue
        print(f"  first call {name}: {first[name]:.2f} s", flush=True)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(args.rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))  # alternate so drifts hit all alike
        for name in order:
            times[name].append(timed(runs[name]))
    base = statistics.median(times["hf"]) if "hf" in times else None
    lines = [
        "| contender | tokens/s median [min–max] | ms per token step (median) | × hf (median) | first call s |",
        "|---|---|---|---|---|",
    ]
    for name, ts in times.items():
        rate = [n_rows * steps / t for t in ts]
        ratio = f"×{base / statistics.median(ts):.2f}" if base else "–"
        lines.append(
            f"| {name} | {statistics.median(rate):,.0f} [{min(rate):,.0f}–{max(rate):,.0f}] | "
            f"{1000 * statistics.median(ts) / steps:.2f} | {ratio} | {first[name]:.1f} |"
        )
    table = "\n".join(lines)
    print(table)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
