"""This machine's CPU as torch's kernels see it: one home for what a report says about the hardware.

A figure measured here means little without the CPU: which instruction sets pick the kernels (a CPU with
AVX512-BF16 or AMX computes bf16 matmuls natively, several times faster than fp32; one without emulates them),
what torch dispatches to, and this machine's matmul peak, so that a rate can be read as a share of what the
hardware gives. bench_report.py writes `machine_lines()` into every `--report` file; trl_cpu.py reads
`native_bf16()` to pick TRL's precision; roofline.py and decode_step.py measure their peak with `matmul_peaks`.

    .venv/bin/python benchmarks/cpu_info.py [--json]    # prints the lines a report's header gets (or its data)
"""

from __future__ import annotations

import contextlib
import json
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

# The /proc/cpuinfo flags that select torch's / oneDNN's CPU kernels, in the order they arrived.
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
# Native bf16 arithmetic: x86's AVX512-BF16 (dot products) or AMX-BF16 (tiles); Arm lists "bf16" in Features.
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
# rows x in x out: a 135M MLP up-projection (576 -> 1536) on a 64-row batch, the shape the benchmarks race at.
LINEAR_SHAPE = (64, 576, 1536)
PEAK_SIZES = (256, 512, 1024)


@dataclass(frozen=True)
class Cpu:
    """The first processor's block of /proc/cpuinfo (all cores of one machine report the same)."""

    vendor: str = "?"
    family: str = "?"
    model: str = "?"
    stepping: str = "?"
    name: str = ""
    flags: frozenset[str] = field(default_factory=frozenset)

    def line(self) -> str:
        ident = f"{self.vendor} family {self.family} model {self.model} stepping {self.stepping}"
        return f"{self.name or platform.machine()} ({ident})"


def read_cpu(text: str | None = None) -> Cpu:
    """Parse /proc/cpuinfo (or `text`, in its format). Off Linux, only the name platform gives."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return Cpu(name=platform.processor() or platform.machine())
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:  # the first processor's block is enough
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return Cpu(
        vendor=fields.get("vendor_id", fields.get("CPU implementer", "?")),
        family=fields.get("cpu family", fields.get("CPU architecture", "?")),
        model=fields.get("model", fields.get("CPU part", "?")),
        stepping=fields.get("stepping", fields.get("CPU revision", "?")),
        name=fields.get("model name", platform.processor() or platform.machine()),
        flags=frozenset((fields.get("flags") or fields.get("Features") or "").split()),
    )


def native_bf16(flags: Iterable[str]) -> bool:
    """Whether the CPU computes bf16 in hardware (by its flags); without, torch converts to fp32 and back."""
    return any(flag in set(flags) for flag in BF16_FLAGS)


def kernel_flags(flags: Iterable[str]) -> tuple[list[str], list[str]]:
    """(present, absent) among KERNEL_FLAGS."""
    have = set(flags)
    return [f for f in KERNEL_FLAGS if f in have], [f for f in KERNEL_FLAGS if f not in have]


def torch_kernels() -> dict[str, str]:
    """What torch dispatches to here: its CPU capability (the ISA of its own vectorised kernels), whether oneDNN
    (mkldnn) is built in, its version from torch's build configuration, and whether oneDNN runs bf16 here."""
    import torch

    out = {"capability": torch.backends.cpu.get_cpu_capability(), "mkldnn": str(torch.backends.mkldnn.is_available())}
    config = torch.__config__.show()
    version = re.search(r"(?:MKL-DNN|oneDNN) v(\S+)", config)
    out["onednn"] = version.group(1) if version else "?"
    with contextlib.suppress(AttributeError, RuntimeError):
        out["onednn_bf16"] = str(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return out


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """torch at `n` threads inside the block, as it was after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def spread_alternating(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, tuple[list, list]]:
    """{name: (wall seconds, process-CPU seconds) of `repeats` calls}, after one warm-up call each; the
    functions run in turn each round, so that load drifts hit all alike."""
    for fn in fns.values():
        fn()
    out: dict[str, tuple[list, list]] = {name: ([], []) for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            w, c = time.perf_counter(), time.process_time()
            fn()
            out[name][0].append(time.perf_counter() - w)
            out[name][1].append(time.process_time() - c)
    return out


def spread(fn: Callable[[], object], repeats: int) -> tuple[list[float], list[float]]:
    """Wall and process-CPU seconds of `repeats` calls (after one warm-up call)."""
    return spread_alternating({"": fn}, repeats)[""]


def linear_times(repeats: int = 5, shape: tuple[int, int, int] = LINEAR_SHAPE) -> dict[str, list[float]]:
    """CPU seconds per call of F.linear at `shape` (rows, in, out), in fp32 and in bf16 (inputs and weight already
    bf16: the kernel's own speed), 1 thread, alternating; each timed call is a batch of ~20 ms of fp32 work."""
    import torch
    import torch.nn.functional as F

    rows, d_in, d_out = shape
    gen = torch.Generator().manual_seed(0)  # torch's global RNG stays untouched
    x, w = torch.randn(rows, d_in, generator=gen), torch.randn(d_out, d_in, generator=gen)
    calls = max(1, int(20e-3 * 100e9 / (2 * rows * d_in * d_out)))  # ~20 ms at 100 GFLOP/s
    args = {"fp32": (x, w), "bf16": (x.bfloat16(), w.bfloat16())}
    fns = {k: (lambda a=a: [F.linear(*a) for _ in range(calls)]) for k, a in args.items()}
    with threads(1), torch.inference_mode():
        timed = spread_alternating(fns, repeats)
    return {k: [c / calls for c in cpus] for k, (_, cpus) in timed.items()}


def bf16_speedup(times: dict[str, list[float]]) -> float:
    """fp32 time / bf16 time, medians: above 1 when bf16 is the faster."""
    return statistics.median(times["fp32"]) / statistics.median(times["bf16"])


def onednn_linear(dtype) -> bool:
    """Whether oneDNN's packed linear runs here in `dtype` and gets F.linear's result (checked on fixed values).
    hadw.rollout.fused.packing_available's check, repeated: this module imports nothing from hadw, so a report's
    machine is measured the same beside any hadw revision (benchmarks that time an older checkout)."""
    import torch
    import torch.nn.functional as F

    if not torch.backends.mkldnn.is_available():
        return False
    try:
        with torch.inference_mode():
            weight = torch.linspace(-1, 1, 128).view(8, 16).to(dtype)
            x = torch.linspace(-2, 3, 64).view(4, 16).to(dtype)
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, 4)
            y = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        return torch.allclose(y.float(), F.linear(x, weight).float(), atol=1e-5 if dtype == torch.float32 else 5e-2)
    except (RuntimeError, AttributeError, NotImplementedError):  # op missing or not built for this CPU
        return False


def peak_probe(library: str, n: int, dtype=None) -> tuple[Callable[[], object], int]:
    """(a call doing ~2 GFLOP of n x n matmuls through `library`, its FLOPs). library: "mkl" is `torch.mm` (MKL in
    fp32; oneDNN's matmul in bf16); "onednn" is oneDNN's packed linear, the weight packed once as FusedDecoder
    packs it. dtype: fp32 unless given."""
    import torch

    dtype = dtype or torch.float32
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    reps = max(1, int(2e9 / (2 * n**3)))
    if library == "mkl":
        return (lambda: [torch.mm(a, b) for _ in range(reps)]), 2 * n**3 * reps
    packed = torch.ops.mkldnn._reorder_linear_weight(b, n)
    matmul = torch.ops.mkldnn._linear_pointwise
    return (lambda: [matmul(a, packed, None, "none", [], "") for _ in range(reps)]), 2 * n**3 * reps


def matmul_peaks(
    threads: int, repeats: int, dtype=None, sizes: tuple[int, ...] = PEAK_SIZES
) -> dict[str, tuple[int, list[float], list[float]]]:
    """Per library, its best size by median: {library: (n, per-run GFLOP/s by wall, by CPU time / threads)}.

    Sets torch's threads to `threads` (and leaves them so: roofline.py measures the models at that count next)."""
    import torch

    dtype = dtype or torch.float32
    torch.set_num_threads(threads)
    best: dict[str, tuple[int, list[float], list[float]]] = {}
    for library in ["mkl", "onednn"] if onednn_linear(dtype) else ["mkl"]:
        for n in sizes:
            fn, flop = peak_probe(library, n, dtype)
            walls, cpus = spread(fn, repeats)
            rates = [flop / w / 1e9 for w in walls]
            if library not in best or statistics.median(rates) > statistics.median(best[library][1]):
                best[library] = (n, rates, [flop / c / 1e9 * threads for c in cpus])
    return best


@dataclass(frozen=True)
class Peak:
    """The faster library's 1-thread matmul rate in one dtype, median GFLOP/s by CPU time."""

    library: str
    n: int
    gflops: float


def peak(peaks: dict[str, tuple[int, list[float], list[float]]]) -> Peak:
    """The fastest library by median CPU-time rate, of matmul_peaks' result."""
    library = max(peaks, key=lambda lib: statistics.median(peaks[lib][2]))
    return Peak(library, peaks[library][0], statistics.median(peaks[library][2]))


@dataclass(frozen=True)
class Machine:
    """What a report records about the hardware (measure_machine; tests plant one)."""

    cpu: Cpu
    kernels: dict[str, str]
    linear: dict[str, list[float]]  # linear_times
    peaks: dict[str, Peak]  # "fp32" / "bf16" -> 1-thread peak


def measure_machine(repeats: int = 3) -> Machine:
    """This machine's CPU, torch's kernels, the fp32 / bf16 linear and both 1-thread matmul peaks (~1-2 s where bf16
    is native; several more where it is emulated)."""
    import torch

    before = torch.get_num_threads()
    try:
        dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
        peaks = {name: peak(matmul_peaks(1, repeats, dtype)) for name, dtype in dtypes.items()}
    finally:
        torch.set_num_threads(before)
    return Machine(read_cpu(), torch_kernels(), linear_times(max(repeats, 3)), peaks)


def to_json(machine: Machine) -> str:
    data = asdict(machine)
    data["cpu"]["flags"] = sorted(machine.cpu.flags)
    return json.dumps(data)


def from_json(text: str) -> Machine:
    data = json.loads(text)
    cpu = Cpu(**{**data["cpu"], "flags": frozenset(data["cpu"]["flags"])})
    peaks = {name: Peak(**p) for name, p in data["peaks"].items()}
    return Machine(cpu, data["kernels"], data["linear"], peaks)


def measure_machine_in_child() -> Machine:
    """measure_machine in a fresh process: the caller's RSS high-water mark (which its children inherit:
    memory_vs_trl.py), torch threads and global RNG stay as they were, and it needs no torch imported."""
    proc = subprocess.run([sys.executable, __file__, "--json"], capture_output=True, text=True, check=True)
    return from_json(proc.stdout.strip().splitlines()[-1])


def machine_lines(machine: Machine) -> list[str]:
    """The report header's lines about the hardware, after its "Machine:" line (which names the CPU)."""
    present, absent = kernel_flags(machine.cpu.flags)
    k = machine.kernels
    native = "yes" if native_bf16(machine.cpu.flags) else "no"
    rows, d_in, d_out = LINEAR_SHAPE
    linear = machine.linear
    ratio = bf16_speedup(linear)
    median_ms = lambda key: 1e3 * statistics.median(linear[key])
    peaks = ", ".join(f"{name} {p.gflops:.1f} GFLOP/s ({p.library} n={p.n})" for name, p in machine.peaks.items())
    return [
        f"CPU flags that pick kernels: {' '.join(present) or 'none'}"
        + (f" (absent: {' '.join(absent)})" if absent else "")
        + f"; torch CPU capability {k.get('capability', '?')}, oneDNN (mkldnn) {k.get('onednn', '?')}, available "
        f"{k.get('mkldnn', '?')}, bf16 supported {k.get('onednn_bf16', '?')}",
        f"bf16 native: {native} (by the flags); linear [{rows}x{d_in}] @ [{d_in}x{d_out}], 1 thread, CPU time: fp32 "
        f"{median_ms('fp32'):.3f} ms, bf16 {median_ms('bf16'):.3f} ms, bf16 x{ratio:.2f} the speed of fp32 "
        f"(median of {len(linear['fp32'])})",
        f"Matmul peak, 1 thread, median GFLOP/s by CPU time: {peaks}",
    ]


def main() -> None:
    machine = measure_machine()
    if "--json" in sys.argv[1:]:
        print(to_json(machine))
        return
    print(machine.cpu.line())
    for line in machine_lines(machine):
        print(line)


if __name__ == "__main__":
    main()
