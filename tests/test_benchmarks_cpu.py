"""benchmarks/cpu_info.py and trl_cpu.py: what a report says about the CPU, and TRL's precision chosen by it.

TRL once raced in fp32 everywhere on the premise that a CPU emulates bf16 ~100x slower; on a CPU with AVX512-BF16
or AMX that is false (bf16 matmuls run several times faster than fp32), so a competitor held to fp32 there is not
at its best. The choice is measured; these tests plant the measurements.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_report
import cpu_info
import trl_cpu

BENCHMARKS = Path(cpu_info.__file__).parent

# A Sapphire Rapids block of /proc/cpuinfo (trimmed), and the second processor's, which must not be read.
SAPPHIRE = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
stepping\t: 8
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: something else
"""
SKYLAKE = SAPPHIRE.replace("143", "85").replace("avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8", "")
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes sve bf16 i8mm
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1
"""
NATIVE = cpu_info.read_cpu(SAPPHIRE).flags
EMULATED = cpu_info.read_cpu(SKYLAKE).flags


def test_cpuinfo_gives_family_model_stepping_name_and_the_kernel_flags():
    cpu = cpu_info.read_cpu(SAPPHIRE)
    assert (cpu.vendor, cpu.family, cpu.model, cpu.stepping) == ("GenuineIntel", "6", "143", "8")
    assert cpu.name == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu.line() == "Intel(R) Xeon(R) Platinum 8480+ (GenuineIntel family 6 model 143 stepping 8)"
    present, absent = cpu_info.kernel_flags(cpu.flags)
    assert present == list(cpu_info.KERNEL_FLAGS) and absent == []
    assert cpu_info.kernel_flags(EMULATED) == (["avx2", "avx512f", "avx512_vnni"], list(cpu_info.KERNEL_FLAGS[3:]))


def test_bf16_is_native_by_the_flags_on_x86_and_arm():
    assert cpu_info.native_bf16(NATIVE)
    assert not cpu_info.native_bf16(EMULATED)
    assert not cpu_info.native_bf16([])
    arm = cpu_info.read_cpu(GRAVITON3)
    assert cpu_info.native_bf16(arm.flags) and (arm.vendor, arm.model) == ("0x41", "0xd40")


def _never(*args, **kwargs):
    raise AssertionError("measured where the flags or the request already decide")


@pytest.mark.parametrize(
    ("flags", "fp32", "bf16", "expected"),
    [
        (NATIVE, 2.0, 0.8, "bf16"),  # native and faster: TRL at its best is bf16
        (NATIVE, 1.0, 1.4, "fp32"),  # native but slower (a small model: autocast's casts cost more)
        (NATIVE, 1.0, 0.95, "fp32"),  # within the margin: not worth bf16's rounding
    ],
)
def test_auto_races_in_the_measured_faster_precision(flags, fp32, bf16, expected):
    times = {"fp32": [fp32, fp32 * 1.01, fp32 * 0.99], "bf16": [bf16, bf16 * 1.01, bf16 * 0.99]}
    choice = trl_cpu.best_precision("auto", Path("model"), flags=flags, measure=lambda *a, **k: times)
    assert choice.precision == expected
    assert f"{fp32:.3f} s" in choice.reason and f"{bf16:.3f} s" in choice.reason  # the line says why


def test_auto_without_native_bf16_is_fp32_and_measures_nothing():
    choice = trl_cpu.best_precision("auto", Path("model"), flags=EMULATED, measure=_never)
    assert choice.precision == "fp32" and "emulates bf16" in choice.reason
    assert trl_cpu.best_precision("auto", Path("model"), flags=[], measure=_never).precision == "fp32"


@pytest.mark.parametrize("requested", ["fp32", "bf16"])
def test_an_asked_precision_is_taken_as_given(requested):
    choice = trl_cpu.best_precision(requested, Path("model"), flags=NATIVE, measure=_never)
    assert choice.precision == requested and choice.line().startswith(f"precision: {requested} on both sides")


def test_both_sides_get_the_same_precision():
    # TRL's bf16=True is accelerate's autocast over fp32 weights; hadw's compute_dtype=bfloat16 is the same.
    assert trl_cpu.cpu_best("bf16") == dict(use_cpu=True, bf16=True, gradient_checkpointing=False)
    assert trl_cpu.cpu_best("fp32")["bf16"] is False
    assert trl_cpu.hadw_overrides("bf16") == ["model.compute_dtype=bfloat16"] and trl_cpu.hadw_overrides("fp32") == []
    with pytest.raises(ValueError):
        trl_cpu.cpu_best("auto")  # must be resolved first


def test_every_benchmark_that_races_trl_takes_the_precision_option():
    racing = [p for p in BENCHMARKS.rglob("*.py") if "GRPOTrainer" in p.read_text() and p.name != "trl_cpu.py"]
    assert {p.name for p in racing} >= {"train_vs_trl.py", "memory_vs_trl.py", "trl_overhead.py"}
    for path in racing:
        text = path.read_text()
        assert "add_precision_option(" in text, path.name
        assert "bf16=False" not in text and "CPU_BEST" not in text, path.name  # no precision fixed by hand


def test_equal_work_in_bf16_skips_hadws_old_log_prob_pass_as_trl_does():
    sys.path.insert(0, str(BENCHMARKS / "speed"))
    import train_vs_trl

    natural = train_vs_trl.hadw_config(Path("m"), Path("o"), 2, "bf16")
    equal = train_vs_trl.hadw_config(Path("m"), Path("o"), 1, "bf16")
    assert "model.compute_dtype=bfloat16" in natural and "model.compute_dtype=bfloat16" in equal
    assert "rollout.recompute_logprobs=never" in equal and not any("recompute" in o for o in natural)
    assert not any(
        "compute_dtype" in o or "recompute" in o for o in train_vs_trl.hadw_config(Path("m"), Path("o"), 1, "fp32")
    )


PLANTED = cpu_info.Machine(
    cpu=cpu_info.read_cpu(SAPPHIRE),
    kernels={"capability": "AVX512", "mkldnn": "True", "onednn": "3.12.0", "onednn_bf16": "True"},
    linear={"fp32": [0.9e-3, 1.0e-3, 1.1e-3], "bf16": [0.25e-3, 0.25e-3, 0.3e-3]},
    peaks={"fp32": cpu_info.Peak("onednn", 1024, 246.5), "bf16": cpu_info.Peak("mkl", 1024, 1592.9)},
)


def test_a_report_header_carries_the_cpus_family_model_flags_isa_and_peaks(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_report, "_hardware", lambda: PLANTED)
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    bench_report.add_report_option(parser)
    path = tmp_path / "report.md"
    args = parser.parse_args(["--report", str(path)])
    with bench_report.report(path, parser, args):
        print("measured")
    text = path.read_text()
    header = text.split("Output, as printed:")[0]
    assert "Machine: Intel(R) Xeon(R) Platinum 8480+ (GenuineIntel family 6 model 143 stepping 8)" in header
    assert "avx512_bf16 avx512_fp16 amx_tile amx_bf16 amx_int8" in header
    assert "torch CPU capability AVX512, oneDNN (mkldnn) 3.12.0" in header
    assert "bf16 native: yes" in header and "bf16 x4.00 the speed of fp32" in header
    assert "fp32 246.5 GFLOP/s (onednn n=1024), bf16 1592.9 GFLOP/s (mkl n=1024)" in header
    assert "```text\nmeasured\n```" in text


def test_the_machine_travels_from_the_measuring_child_unchanged():
    assert cpu_info.from_json(cpu_info.to_json(PLANTED)) == PLANTED


def test_this_machines_lines_are_measured():
    # The real thing, as a report measures it (in a child process): whatever this CPU is, its header lines name
    # its ISA and give two positive peaks.
    machine = cpu_info.measure_machine_in_child()
    lines = cpu_info.machine_lines(machine)
    assert machine.kernels["capability"] and machine.cpu.family
    assert all(p.gflops > 0 for p in machine.peaks.values()) and set(machine.peaks) == {"fp32", "bf16"}
    assert re.search(r"fp32 [\d.]+ GFLOP/s .*bf16 [\d.]+ GFLOP/s", lines[-1])
    assert ("bf16 native: yes" in lines[1]) == cpu_info.native_bf16(machine.cpu.flags)
