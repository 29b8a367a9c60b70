"""TRL's GRPOConfig set up at its best for a CPU: the one place the benchmarks that race TRL take it from.

TRL's defaults are GPU defaults. `bf16=True` makes accelerate autocast to bf16, which a CPU emulates
(~100x slower matmuls than fp32); `gradient_checkpointing=True` recomputes activations to save GPU memory,
time a CPU run only loses. So TRL runs here in fp32 without recomputation, and `describe` prints what it
actually ran with (accelerate's mixed precision and the model's dtype included).
"""

from __future__ import annotations

CPU_BEST = dict(use_cpu=True, bf16=False, gradient_checkpointing=False)
QUIET = dict(report_to=[], save_strategy="no", disable_tqdm=True, seed=0)  # no logging side effects in timings


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
