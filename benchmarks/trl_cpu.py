"""TRL's GRPOConfig set up at its best for this CPU: the one place the benchmarks that race TRL take it from.

TRL's defaults are GPU defaults. `gradient_checkpointing=True` recomputes activations to save GPU memory, time a
CPU run only loses: off here. `bf16=True` makes accelerate autocast the forward to bf16 over fp32 master weights
(`describe` prints accelerate's mixed_precision and the model's dtype). Whether that is faster depends on the CPU:
one with AVX512-BF16 or AMX (cpu_info.native_bf16) computes bf16 matmuls natively, several times faster than fp32;
one without converts to fp32 and back, slower than fp32. And autocast's casts cost per op, so on a small model
even native bf16 can lose. So the precision is measured, not assumed: `best_precision` times a forward + backward
of the very model being raced in fp32 and under bf16 autocast, and races TRL in the faster (bf16 only where the
flags say it is native, and only when it wins by BF16_MARGIN). hadw runs in the same precision
(`hadw_overrides`: model.compute_dtype=bfloat16 is the same autocast over fp32 master weights).

Every benchmark that races TRL takes `--precision auto|fp32|bf16` (`add_precision_option`); auto is the measured
choice, printed with its reason.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cpu_info import native_bf16, read_cpu, spread_alternating, threads

QUIET = dict(report_to=[], save_strategy="no", disable_tqdm=True, seed=0)  # no logging side effects in timings
PRECISIONS = ("auto", "fp32", "bf16")
# bf16 must beat fp32 by this factor to be chosen: a shared machine's timings swing by a few %, and a near tie is
# not worth bf16's rounding in a benchmark whose other figures are fp32.
BF16_MARGIN = 1.10
# The probe's batch: rows x tokens of one forward + backward; small, so that at 135M shapes it takes seconds.
PROBE_ROWS, PROBE_TOKENS, PROBE_REPEATS = 16, 16, 3


def cpu_best(precision: str = "fp32") -> dict:
    """GRPOConfig's precision and recomputation settings for a CPU run in `precision` ("fp32" or "bf16")."""
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision {precision!r}: fp32 or bf16 (resolve auto with best_precision)")
    return dict(use_cpu=True, bf16=precision == "bf16", gradient_checkpointing=False)


CPU_BEST = cpu_best("fp32")  # fp32, for benchmarks that state their precision


def hadw_overrides(precision: str) -> list[str]:
    """hadw's config for the same precision: autocast over fp32 master weights, as TRL's bf16=True."""
    return ["model.compute_dtype=bfloat16"] if precision == "bf16" else []


def add_precision_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="precision of both sides: auto = the faster on this CPU, measured on the raced model (trl_cpu.py)",
    )


@dataclass(frozen=True)
class Choice:
    precision: str  # "fp32" or "bf16"
    reason: str

    def line(self) -> str:
        return f"precision: {self.precision} on both sides ({self.reason})"


def choose(flags: Iterable[str], times: dict[str, list[float]] | None) -> Choice:
    """The precision to race in from the CPU's flags and the probe's CPU seconds ({"fp32": [...], "bf16": [...]};
    None when not measured). bf16 only where it is native and measured faster by BF16_MARGIN."""
    if not native_bf16(flags):
        return Choice("fp32", "auto: no avx512_bf16 / amx_bf16 flag, so this CPU emulates bf16; not measured")
    if times is None:
        return Choice("fp32", "auto: bf16 is native here but was not measured")
    fp32, bf16 = statistics.median(times["fp32"]), statistics.median(times["bf16"])
    measured = (
        f"a forward + backward of the raced model took {fp32:.3f} s of CPU in fp32, {bf16:.3f} s under bf16 "
        f"autocast (x{fp32 / bf16:.2f}; medians of {len(times['fp32'])} alternating runs)"
    )
    if fp32 > BF16_MARGIN * bf16:
        return Choice("bf16", f"auto: bf16 is native here (flags) and {measured}")
    return Choice("fp32", f"auto: bf16 is native here (flags) but not faster by x{BF16_MARGIN}: {measured}")


def probe_times(
    model_dir: Path,
    n_threads: int = 1,
    rows: int = PROBE_ROWS,
    tokens: int = PROBE_TOKENS,
    repeats: int = PROBE_REPEATS,
) -> dict[str, list[float]]:
    """CPU seconds of one forward + backward of the model at `model_dir` on [rows, tokens] ids, in fp32 and under
    bf16 autocast (as accelerate's mixed_precision="bf16" runs TRL's forward), alternating, after a warm-up each.
    The loss is a log-softmax over the vocabulary, as TRL's per-token log-probs are."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (rows, tokens), generator=torch.Generator().manual_seed(0))

    def step(precision: str) -> Callable[[], None]:
        def run() -> None:
            model.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                logits = model(input_ids=ids).logits
            logits.float().log_softmax(-1).mean().backward()

        return run

    with threads(n_threads):
        # A small model's step takes milliseconds, where a shared machine's noise is as large as the difference:
        # each timed call repeats the step to at least ~0.2 s of CPU (one call at 135M shapes).
        start = time.process_time()
        step("fp32")()
        calls = max(1, math.ceil(0.2 / max(time.process_time() - start, 1e-6)))
        fns = {p: (lambda run=step(p): [run() for _ in range(calls)]) for p in ("fp32", "bf16")}
        timed = spread_alternating(fns, repeats)
    return {p: [c / calls for c in cpus] for p, (_, cpus) in timed.items()}


def best_precision(
    requested: str,
    model_dir: Path,
    n_threads: int = 1,
    flags: Iterable[str] | None = None,
    measure: Callable[..., dict[str, list[float]]] = probe_times,
) -> Choice:
    """The precision to race in: `requested` as given, or for "auto" the measured faster (see `choose`).
    flags: this CPU's by default; measure: how to time the model (tests plant timings)."""
    if requested != "auto":
        return Choice(requested, f"--precision {requested}")
    flags = read_cpu().flags if flags is None else flags
    times = measure(model_dir, n_threads) if native_bf16(flags) else None
    return choose(flags, times)


def describe(trainer) -> str:
    """The precision settings a built GRPOTrainer runs with, one line."""
    a = trainer.args
    return (
        f"bf16={a.bf16}, fp16={a.fp16}, gradient_checkpointing={a.gradient_checkpointing}, "
        f"accelerator.mixed_precision={trainer.accelerator.mixed_precision}, use_cpu={a.use_cpu}, "
        f"model dtype={trainer.model.dtype}"
    )


def silence(trainer):
    """Drop the callback that prints every log dict to stdout (TRL's `disable_tqdm=True` swaps the progress bar
    for it): a benchmark's report holds the benchmark's own lines. Both sides of a race lose the same prints."""
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return trainer
