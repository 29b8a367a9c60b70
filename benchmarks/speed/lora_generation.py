"""LoRA vs full fine-tuning generation: HFRolloutEngine.generate on the same model, side by side.

A LoRA policy (peft, `model.lora.enabled=true`) generates through FusedDecoder with its adapters merged into the
fused weights' copies once per call (hadw/rollout/fused.py, `linear_weights`); the full fine-tuning policy is the
same model without peft. This times both on the same batch, alternating within each repeat (the order flips every
repeat), so load from other jobs hits both sides of a ratio alike; reported: CPU and wall seconds per call
(min / median / max) and the per-repeat ratio LoRA / full (target <= 1.15). `--with-hf` also times the LoRA model
through transformers' forward (`rollout.decoder=hf`, the path LoRA took before).

The model: bench_models.py's shapes (default 135M: SmolLM2-135M's, random weights, nothing downloaded). LoRA: rank
16, alpha 32, all-linear, lora_B random and non-zero (peft starts it at zero: a zero delta would be free to merge
and equal the full model's tokens).

    .venv/bin/python benchmarks/speed/lora_generation.py                     # 135M, 4 prompts x 8 rows x 32 new tokens
    .venv/bin/python benchmarks/speed/lora_generation.py --report benchmarks/speed/lora_generation.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import torch
from bench_models import MODELS
from bench_report import add_report_option, report

from hadw.rollout import HFRolloutEngine, SamplingParams, build_tiny_model, load_model
from hadw.rollout.lora import LoraSettings, add_lora


def fmt(values: list[float], digits: int = 3) -> str:
    """min / median / max."""
    vals = sorted(values)
    return " / ".join(f"{v:.{digits}f}" for v in (vals[0], statistics.median(vals), vals[-1]))


def timed(fn) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def lora_model(folder: str, rank: int):
    """The model in `folder` with fresh LoRA adapters (hadw's add_lora: all-linear, alpha 2 rank), lora_B random."""
    model, tok = load_model(folder, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = add_lora(model, LoraSettings(rank=rank, alpha=2.0 * rank, dropout=0.0, target_modules="all-linear"))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # the size of a trained adapter's: a visible change of the logits
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    return model, tok


def measure(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_model(tmp, **MODELS[args.shape])
        full, tok = load_model(folder, device="cpu")
        lora, _ = lora_model(folder, args.rank)
    prompts = [[4 + (i * 7 + j) % 200 for j in range(args.prompt_len)] for i in range(args.prompts)]
    params = SamplingParams(n=args.rows, max_new_tokens=args.new_tokens, ignore_eos=True, seed=0)
    engines = {"full": HFRolloutEngine(full, tok), "lora": HFRolloutEngine(lora, tok)}
    if args.with_hf:
        engines["lora hf"] = HFRolloutEngine(lora, tok, decoder="hf")
    params_m = sum(p.numel() for p in full.parameters()) / 1e6
    adapters = sum(p.numel() for n, p in lora.named_parameters() if "lora_" in n) / 1e6
    print(
        f"{args.shape}: {params_m:.1f} M params; LoRA rank {args.rank}, all-linear, {adapters:.2f} M adapter params; "
        f"{args.prompts} prompts x {args.rows} rows, prompt {args.prompt_len}, {args.new_tokens} new tokens, "
        f"{args.threads} thread(s), {args.repeats} repeats"
    )
    print("decoders: " + ", ".join(f"{name} {e.resolved_decoder()}" for name, e in engines.items()))
    out = {name: e.generate(prompts, params) for name, e in engines.items()}  # warm-up, and a sanity check
    changed = (out["lora"].response_ids != out["full"].response_ids).float().mean().item()
    print(f"tokens that differ, LoRA vs full: {changed:.2f} (the adapter is not a no-op)")

    cpu = {name: [] for name in engines}
    wall = {name: [] for name in engines}
    names = list(engines)
    for r in range(args.repeats):
        for name in names if r % 2 == 0 else names[::-1]:  # alternate the order: neither side always goes first
            c, w = timed(lambda e=engines[name]: e.generate(prompts, params))
            cpu[name].append(c)
            wall[name].append(w)
        line = f"repeat {r}: CPU s full {cpu['full'][-1]:.2f} lora {cpu['lora'][-1]:.2f}"
        line += f" ratio {cpu['lora'][-1] / cpu['full'][-1]:.3f} | wall ratio {wall['lora'][-1] / wall['full'][-1]:.3f}"
        if args.with_hf:
            line += f" | lora hf / full (CPU) {cpu['lora hf'][-1] / cpu['full'][-1]:.2f}"
        print(line)

    print("\nmin / median / max")
    for name in names:
        print(f"{name:<8} s/call  CPU {fmt(cpu[name], 2)}   wall {fmt(wall[name], 2)}")
    ratio = [a / b for a, b in zip(cpu["lora"], cpu["full"], strict=True)]
    wall_ratio = [a / b for a, b in zip(wall["lora"], wall["full"], strict=True)]
    print(f"ratio LoRA / full (CPU, per repeat)   {fmt(ratio)}  target <= 1.15")
    print(f"ratio LoRA / full (wall, per repeat)  {fmt(wall_ratio)}")
    if args.with_hf:
        old = [a / b for a, b in zip(cpu["lora hf"], cpu["full"], strict=True)]
        print(f"ratio LoRA through hf / full (CPU, per repeat)  {fmt(old, 2)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="135M", choices=sorted(MODELS))
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--rows", type=int, default=8, help="rows per prompt (G)")
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--with-hf", action=argparse.BooleanOptionalAction, default=True)
    add_report_option(parser)
    args = parser.parse_args()
    with report(args.report, parser, args):
        measure(args)


if __name__ == "__main__":
    main()
