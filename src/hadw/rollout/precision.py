"""Whether a device computes bf16 natively, and the compute dtype `auto` resolves to there.

Why: bf16 autocast pays only where the hardware multiplies bf16 itself. On a CPU with AVX512-BF16 or AMX (Intel
Sapphire Rapids and later, AMD Zen 4 and later) a 135M-shaped bf16 matmul ran at ×4-7 the float32 rate
(benchmarks/speed/real_model_step.md); on a CPU without them oneDNN converts bf16 to float32 around each multiply, and
the conversions cost more than the halved memory traffic saves. A GPU with bf16 (Ampere and later) always gains.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import torch

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of a CPU that multiplies bf16 natively


@functools.cache
def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX on this CPU: torch's own check where it has one, else the kernel's CPU flags."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if all(callable(check) for check in checks):
        with contextlib.suppress(RuntimeError):
            return any(check() for check in checks)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return any(flag in line.split() for flag in BF16_CPU_FLAGS)
    return False


def native_bf16(device: torch.device) -> bool:
    """Whether `device` computes bf16 matmuls natively (a CUDA GPU with bf16, or a CPU with AVX512-BF16 / AMX)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_has_native_bf16()


def resolve_compute_dtype(name: str, device: torch.device) -> str:
    """model.compute_dtype for `device`: "auto" is "bfloat16" where the device computes bf16 natively, else
    "float32"; "float32" and "bfloat16" are kept as given."""
    if name != "auto":
        return name
    return "bfloat16" if native_bf16(device) else "float32"
