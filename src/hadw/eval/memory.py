"""Peak memory of this process, for the step metrics and the eval report (verl's `perf/max_memory_*` names).

CPU: the peak resident set size from getrusage (the kernel's high-water mark; it never goes down, so it is the
peak since the process started). GPU: torch's peak allocated bytes on the current device.
"""

from __future__ import annotations

import resource
import sys

import torch

from hadw import metrics as M

_GB = 1024**3


def cpu_peak_rss_gb() -> float:
    """Peak RSS of this process in GiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / _GB if sys.platform == "darwin" else peak * 1024 / _GB


def peak_memory_metrics() -> dict[str, float]:
    """{"perf/cpu_peak_rss_gb": ..., and on CUDA "perf/max_memory_allocated_gb" / "perf/max_memory_reserved_gb"}."""
    metrics = {M.CPU_PEAK_RSS: cpu_peak_rss_gb()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        metrics[M.GPU_MAX_ALLOCATED] = torch.cuda.max_memory_allocated() / _GB
        metrics[M.GPU_MAX_RESERVED] = torch.cuda.max_memory_reserved() / _GB
    return metrics
