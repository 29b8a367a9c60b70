"""The README and docs/benchmarks.md quote measured figures from the files the scripts write, so one recipe cannot
show two values.

benchmarks/studies/real_model_rl/real_model_rl.md is real_model_rl.py's report (the demo's and the studies' tables are
rebuilt from raw results: tests/test_raw_tables.py), and each speed benchmark's `--report FILE`
(benchmarks/bench_report.py) keeps what it printed: docs/benchmarks.md's copies of their figures, and the README's
summary of them, must be the files' own.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
PROSE = " ".join(README.split())  # sentences wrap anywhere
BENCHMARKS_PAGE = REPO_ROOT / "docs" / "benchmarks.md"  # the benchmarks' table and text, moved out of the README
BENCHMARKS = BENCHMARKS_PAGE.read_text(encoding="utf-8")
BENCHMARKS_PROSE = " ".join(BENCHMARKS.split())
BENCH = REPO_ROOT / "benchmarks"
PAGES = {"README.md": README, "docs/benchmarks.md": BENCHMARKS}  # the pages whose figures are checked


def _table(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("|"))


def test_the_demo_warm_start_line_is_the_shipped_starts():
    # The demo prints this line first (hadw.train.warm_starts.WarmStart.line); its table is a rebuilt block
    # (tests/test_raw_tables.py). It once quoted a warm start that only one CPU's kernels produced.
    from hadw.train import warm_starts

    line = warm_starts.get(warm_starts.DEMO_WARM_START).line()
    assert f"```text\n{line}\n```" in README


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_readme_quotes_no_other_accuracy_for_the_demo_recipe(page: str):
    # The quick start and the configuration section once quoted their own warm-start / RL accuracies
    # (0.42 -> 0.73, 0.50 -> 0.60) beside the demo's 0.473 -> 0.607 for the same recipe.
    assert not re.search(r"warm start reaches \d\.\d+|RL steps: \d\.\d+ → \d\.\d+", " ".join(PAGES[page].split()))


def test_the_real_model_figures_are_the_reports():
    report = (BENCH / "studies" / "real_model_rl" / "real_model_rl.md").read_text(encoding="utf-8")
    rows = {m[0]: m[1:] for m in re.findall(r"^\| (\w+) \| ([\d.]+) \| ([\d.]+) \|", report, re.M)}
    (before, grpo), (_, hadw) = rows["grpo"], rows["grpo_hadw"]
    assert f"held-out greedy accuracy {before} → {grpo} (GRPO) and {hadw} (GRPO+HA-DW)" in PROSE


def _memory_ratio(output: str) -> tuple[str, str, str]:
    return re.search(r"paired by repeat\): ([\d.]+) / ([\d.]+) / ([\d.]+)", output).groups()


def test_the_135m_memory_figures_are_the_benchmarks_output():
    output = (BENCH / "speed" / "memory_vs_trl_135m.md").read_text(encoding="utf-8")
    hadw, trl = re.findall(r"peak RSS [\d.]+ / ([\d.]+) / [\d.]+ GiB", output)
    lo, med, hi = _memory_ratio(output)
    assert f"hadw {hadw} GiB vs TRL {trl} GiB peak RSS" in BENCHMARKS_PROSE
    assert f"ratio ×{med} [{lo}–{hi}]" in BENCHMARKS_PROSE


# ---------------------------------------------------------------- the "Benchmarks" table: one report per figure
# Each benchmark's `--report FILE` (benchmarks/bench_report.py) keeps its printed output in a ```text block; the
# phrases below are built from that output, so a README figure that is not the report's own fails here.


def _output(report: str) -> str:
    text = (BENCH / report).read_text(encoding="utf-8")
    return re.search(r"```(?:text)?\n(.*?)\n```", text, re.S).group(1)


def _numbers(output: str, label: str) -> list[str]:
    """The numbers, as printed, after `label` (a regex) on the first output line that starts with it."""
    for line in output.splitlines():
        if match := re.match(r"\s*" + label, line):
            return re.findall(r"\d+(?:\.\d+)?(?:e[+-]\d+)?", line[match.end() :])
    raise AssertionError(f"no line starting with {label!r}")


def _mmm(lo: str, med: str, hi: str) -> str:
    return f"{med} [{lo}–{hi}]"


def _power(printed: str) -> str:
    """1.234e+04 -> 1.234·10⁴, as the README writes it."""
    mantissa, exponent = printed.split("e")
    return f"{mantissa}·10" + str(int(exponent)).translate(str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻"))


def _theory_speed(out: str) -> str:
    cpu = _numbers(out, r"exact, bias \+ prob_misestimate \(medians\): wall")[1]
    runs = _numbers(out, r"exact bias")[0]
    sample, *_ = _numbers(out, r"Monte Carlo on")
    hours = _numbers(out, r"Monte Carlo, extrapolated to the full grid:")[-1]
    ratio = re.search(r"ratio Monte Carlo / exact: wall \S+, CPU (\S+)", out).group(1)
    return (
        f"exact {cpu} s of CPU time (bias + probability, medians of {runs} runs); Monte Carlo at SE 1e-3 "
        f"≈ {_power(ratio)}× slower by CPU time ({hours} h, extrapolated from {sample} grid points)"
    )


def _core_overhead(out: str) -> str:
    plain, hadw = _numbers(out, r"GRPO advantages\s+wall")[4], _numbers(out, r"GRPO advantages \+ HA-DW\s+wall")[4]
    ratio = _numbers(out, r"ratio HA-DW / plain \(CPU, per pair\)")[:3]
    both, alone, _ = _numbers(out, r"share of a step \(CPU medians\):")
    return (
        f"{plain} → {hadw} ns per response (CPU medians), ×{_mmm(*ratio)} per pair (target ≤ 1.30); advantages + "
        f"HA-DW {both} % of a tiny-model optimiser step (128 responses), HA-DW alone {alone} %"
    )


def _roofline_decode(out: str) -> str:
    parts = []
    for model, name in (("tiny", "tiny"), (r"5\.6M", "5.6 M")):
        hf, fused = (_numbers(out, rf"{model}\s+decode {d}\s")[9:12] for d in ("hf", "fused"))
        ratio = _numbers(out, rf"{model}\s+fused / hf tokens per CPU-second, round by round:")[:3]
        parts.append(f"{name} {_mmm(*hf)} → {_mmm(*fused)} % (×{_mmm(*ratio)} per round)")
    return ", ".join(parts)


def _roofline(out: str) -> str:
    # Ratios and shares of the peak only: an absolute GFLOP/s or GB/s is this CPU's, not hadw's (issue 41).
    onednn = float(_numbers(out, r"fp32 matmul, 1 thread\s+onednn n=\d+\s+GFLOP/s")[4])  # median by CPU time
    mkl = float(_numbers(out, r"fp32 matmul, 1 thread\s+mkl\s+n=\d+\s+GFLOP/s")[4])
    ridge = _numbers(out, r"ridge point \(1 thread\)")[0]
    train = [_mmm(*_numbers(out, rf"{m}\s+train step")[9:12]) for m in ("tiny", r"5\.6M")]
    return (
        f"peak: oneDNN's packed linear, 1 thread (`torch.mm` reaches {100 * mkl / onednn:.0f} % of it), ridge point "
        f"{ridge} FLOP/byte (the peak over the copy bandwidth); decode, 64 rows × 64 new tokens, `hf` → `fused`, % "
        f"of the round's peak: {_roofline_decode(out)}; training step {train[0]} % (tiny), {train[1]} % (5.6 M)"
    )


def _roofline_demo_shape(out: str) -> str:
    return f"in the demo's rollout shape (128 rows × 6 new tokens): {_roofline_decode(out)}"


def _rollout_ratio(out: str) -> str:
    return "×" + _mmm(*_numbers(out, r"ratio HFRolloutEngine / generate by CPU\s+\(per pair\)"))


def _rollout_speed(out: str) -> str:
    return _rollout_ratio(out)  # the ratio only: tokens per CPU-second are this CPU's


def _rollout_split(outs: list[str]) -> str:
    shares = [_numbers(out, r"rollout/forward by op:") for out in outs]
    parts = ("projections", "attention", "other")
    return ", ".join(f"{part} {' % / '.join(s[i] for s in shares)} %" for i, part in enumerate(parts))


def _trl_overhead(out: str) -> str:
    ratio = _numbers(out, r"ratio \(CPU time\)")[:3]
    share = _numbers(out, r"adapter's own work")[-1]
    return f"×{_mmm(*ratio)} per step by CPU time (target ≤ 1.05); the adapter's own work is {100 * float(share):.2f} %"


def _trl_engine_overhead(out: str) -> str:
    loop = _numbers(out, r"train loop \(wall\): engine=trl / bare TRL x")[:3]
    cpu = _numbers(out, r"whole command \(CPU\): engine=trl / bare TRL x")[:3]
    loop_phrase = f"train loop (transformers' `train_runtime`) engine=trl / bare ×{_mmm(*loop)}"
    return f"{loop_phrase}, whole command by CPU time ×{_mmm(*cpu)}"


def _train_vs_trl_ratios(out: str) -> tuple[str, str]:
    """`×median [min–max]` by CPU time: natural, equal work."""
    cpu = re.findall(r"speed-up hadw/TRL .* by CPU\s+([\d.]+) /\s+([\d.]+) /\s+([\d.]+)", out)
    (n_lo, n_med, n_hi), (e_lo, e_med, e_hi) = [[f"{float(v):.2f}" for v in row] for row in cpu]
    return f"×{n_med} [{n_lo}–{n_hi}]", f"×{e_med} [{e_lo}–{e_hi}]"


def _train_vs_trl(out: str) -> str:
    natural, equal = _train_vs_trl_ratios(out)
    return f"natural {natural}, equal work {equal} by CPU time"


def _train_vs_trl_auto(out: str) -> str:
    """A race whose precision was measured (--precision auto): the choice, its timing, then the ratios."""
    precision, speedup = re.search(r"precision: (\w+) on both sides \(auto: .*?\(x([\d.]+);", out).groups()
    return (
        f"135M shapes, TRL's measured faster precision, {precision} on both sides (a forward + backward ×{speedup} "
        f"faster under bf16 autocast): {_train_vs_trl(out)}"
    )


def _decode_step(out: str) -> str:
    shape, rows, prompt, steps = re.search(
        r"; (\S+): \d+ M params, (\d+) rows, prompt (\d+), (\d+) steps", out
    ).groups()
    mkl, onednn = _numbers(out, r"MKL F\.linear"), _numbers(out, r"oneDNN packed")
    # per variant: ms/step, tokens/s, % of the round's peak, speed-up over MKL, build s, prefill s (3 each)
    setting = f"{rows} rows, prompt {prompt}, {steps} steps"
    if shape == "5.6M":
        return f"5.6 M, {setting}: ×{_mmm(*onednn[9:12])} per step, {mkl[7]} → {onednn[7]} % of the peak"
    return (
        f"Qwen2.5-0.5B shapes, {setting}, 1 thread: "
        f"×{_mmm(*onednn[9:12])} per step, {_mmm(*mkl[6:9])} → {_mmm(*onednn[6:9])} % of the matmul peak timed "
        f"in the same round (the step alone); building the decoder {mkl[13]} → {onednn[13]} s (packing), prefill "
        f"{mkl[16]} → {onednn[16]} s"
    )


def _vs_ref_ratio(out: str, model: str, shape: str) -> str:
    return "×" + _mmm(*_numbers(out, rf"{model} {shape}, prompt \d+\s+x")[:3])


def _rollout_vs_ref(out: str) -> str:
    pairs = re.search(r"; (\d+) alternating pairs", out).group(1)
    ratio = lambda model, shape: _vs_ref_ratio(out, model, shape)
    shapes = ("64x64", "128x6", "64x16")
    tiny, big = ([ratio(m, s) for s in shapes] for m in ("tiny", r"5\.6M"))
    return (
        f"vs 0.2.0, {pairs} pairs: tiny {tiny[0]} at 64 rows × 64 new tokens, {tiny[1]} at 128 × 6 (the demo's), "
        f"{tiny[2]} at 64 × 16 with 128-token prompts; 5.6 M {big[0]}, {big[1]}, {big[2]}"
    )


def _memory_lengths(out: str) -> str:
    rows = [line.strip("| ").split(" | ") for line in out.splitlines() if re.match(r"\| \d+ \|", line)]
    col = lambda i, fmt="{}": " / ".join(fmt.format(row[i]) for row in rows)
    return (
        f"{col(0)} response tokens: hadw {col(1)} GiB before chunking, {col(2)} GiB after; TRL {col(3)} GiB; "
        f"hadw / TRL {col(4, '×{}')}"
    )


def _lora_generation(out: str) -> str:
    ratio = _numbers(out, r"ratio LoRA / full \(CPU, per repeat\)")[:3]
    full, lora = (_numbers(out, rf"{side}\s+s/call\s+CPU")[1] for side in ("full", "lora"))
    old = _numbers(out, r"ratio LoRA through hf / full \(CPU, per repeat\)")[:3]
    return (
        f"LoRA / full ×{_mmm(*ratio)} per repeat by CPU time (target ≤ 1.15; {full} → {lora} s per call, CPU "
        f"medians); the LoRA model through transformers' forward (its path before) ×{_mmm(*old)}"
    )


def _step_cells(out: str) -> dict[str, str]:
    """real_model_step's fp32 row: phase -> its cell ("3.59 (54 %)")."""
    header = next(r for r in out.splitlines() if r.startswith("| configuration |"))
    row = next(r for r in out.splitlines() if r.startswith("| fp32 |"))
    return dict(zip(*([c.strip() for c in line.strip("|").split("|")] for line in (header, row)), strict=True))


def _real_model_step(out: str) -> str:
    cells = _step_cells(out)
    share = lambda phase: cells[phase].split("(")[1].rstrip(")")
    of_step = 100 * float(cells["generate"].split()[0]) / float(cells["step"])
    timed = [phase for phase in ("forward", "backward") if "(" in cells[phase]]
    phases = "".join(f", {phase} {share(phase)}" for phase in timed)
    return f"fp32: generate at {share('generate')} of the fp32 peak{phases}; generation {of_step:.0f} % of the step"


def _rollout_rows(out: str) -> str:
    per_row = [row.rsplit("×", 1)[1].strip(" |") for row in out.splitlines() if row.startswith("| 16 |")]
    return f"a row costs ×{per_row[0]} (fp32) at 16 rows what it costs at 128"


BENCHMARK_FIGURES = {  # report -> docs/benchmarks.md's phrase, built from the report's output
    "speed/theory_speed.md": _theory_speed,
    "speed/core_overhead.md": _core_overhead,
    "speed/roofline.md": _roofline,
    "speed/roofline_demo_shape.md": _roofline_demo_shape,
    "speed/rollout_speed_tiny.md": lambda out: "tiny " + _rollout_speed(out),
    "speed/rollout_speed_5.6m.md": lambda out: "5.6 M " + _rollout_speed(out),
    "speed/trl_overhead.md": _trl_overhead,
    "speed/trl_engine_overhead.md": _trl_engine_overhead,
    "speed/train_vs_trl_tiny.md": lambda out: "tiny model: " + _train_vs_trl(out),
    "speed/train_vs_trl_135m.md": lambda out: "135M shapes: " + _train_vs_trl(out),
    "speed/train_vs_trl_135m_bf16.md": _train_vs_trl_auto,
    "speed/train_vs_trl_135m_fp32.md": lambda out: (
        "the same machine and shapes in fp32 (`--precision fp32`): " + _train_vs_trl(out)
    ),
    "speed/decode_step.md": _decode_step,
    "speed/decode_step_5.6m.md": _decode_step,
    "speed/rollout_vs_ref.md": _rollout_vs_ref,
    "speed/memory_vs_trl_lengths.md": _memory_lengths,
    "speed/lora_generation.md": _lora_generation,
    "speed/real_model_step.md": _real_model_step,
    "speed/real_model_step_before.md": _real_model_step,
    "speed/rollout_rows.md": _rollout_rows,
}


@pytest.mark.parametrize("report", sorted(BENCHMARK_FIGURES))
def test_the_benchmark_figures_are_the_reports(report: str):
    phrase = BENCHMARK_FIGURES[report](_output(report))
    assert phrase in BENCHMARKS_PROSE, f"docs/benchmarks.md should quote {report}: {phrase}"
    assert f"(../benchmarks/{report})" in BENCHMARKS, f"docs/benchmarks.md should link benchmarks/{report}"


def test_the_decode_split_is_the_rollout_speed_reports():
    outs = [_output(f"speed/rollout_speed_{m}.md") for m in ("tiny", "5.6m")]
    assert f"fused steps (profiler): {_rollout_split(outs)} (tiny / 5.6 M)" in BENCHMARKS_PROSE


def _core_overhead_summary(out: str) -> str:
    ratio = _numbers(out, r"ratio HA-DW / plain \(CPU, per pair\)")[:3]
    both = _numbers(out, r"share of a step \(CPU medians\):")[0]
    return f"×{_mmm(*ratio)} the time of the advantages alone, {both} % of a tiny-model optimiser step"


README_SUMMARY = {  # report -> the ratio the README's five-line "Benchmarks" summary quotes from it
    "speed/rollout_speed_tiny.md": lambda out: f"rollouts {_rollout_ratio(out)} faster than `model.generate()`",
    "speed/rollout_vs_ref.md": lambda out: (
        f"{_vs_ref_ratio(out, 'tiny', '128x6')} faster than 0.2.0's engine in the demo's"
    ),
    "speed/train_vs_trl_tiny.md": lambda out: f"at equal work: {_train_vs_trl_ratios(out)[1]} faster (tiny model",
    "speed/train_vs_trl_135m.md": lambda out: f"{_train_vs_trl_ratios(out)[1]} (135M shapes",
    "speed/train_vs_trl_135m_bf16.md": lambda out: (
        f"{_train_vs_trl_ratios(out)[1]} with both sides in bf16, TRL's faster"
    ),
    "speed/core_overhead.md": _core_overhead_summary,
    "speed/trl_overhead.md": lambda out: (
        "the TRL adapter ×" + _mmm(*_numbers(out, r"ratio \(CPU time\)")[:3]) + " plain"
    ),
    "speed/decode_step.md": lambda out: f"×{_mmm(*_numbers(out, r'oneDNN packed')[9:12])} faster than MKL's `F.linear`",
    "speed/real_model_step.md": lambda out: (
        f"({float(_step_cells(out)['step']):.0f} s on an idle AMD EPYC, one thread:"
    ),
}


@pytest.mark.parametrize("report", sorted(README_SUMMARY))
def test_the_readme_benchmark_summary_is_the_reports(report: str):
    phrase = README_SUMMARY[report](_output(report))
    assert phrase in PROSE, f"the README's benchmark summary should quote {report}: {phrase}"
    assert f"(benchmarks/{report})" in README, f"the README's benchmark summary should link benchmarks/{report}"


def test_the_readme_benchmark_summary_memory_ratio_is_the_report():
    lo, med, hi = _memory_ratio((BENCH / "speed" / "memory_vs_trl_135m.md").read_text(encoding="utf-8"))
    assert f"peak RSS ×{med} [{lo}–{hi}] of TRL's" in PROSE
    assert "(benchmarks/speed/memory_vs_trl_135m.md)" in README


def test_the_readme_links_the_benchmarks_page():
    section = README.split("\n## Benchmarks\n", 1)[1].split("\n## ", 1)[0]
    assert "](docs/benchmarks.md)" in section and len(section.strip().splitlines()) <= 20


def test_every_benchmark_report_is_checked():
    # A new report whose figures the README quotes unchecked would bring back hand-copied numbers.
    written = {str(p.relative_to(BENCH)) for p in BENCH.rglob("*.md") if "Output, as printed:" in p.read_text()}
    assert written <= set(BENCHMARK_FIGURES), sorted(written - set(BENCHMARK_FIGURES))


def test_every_benchmarks_row_links_its_file():
    # A row without a file is a figure from a terminal, which no test can hold to anything.
    section = BENCHMARKS.split("\n## Speed and memory\n", 1)[1].split("\n## ", 1)[0]
    rows = _table(section).splitlines()[2:]  # past the header and its rule
    linked = re.compile(r"\]\((?:\.\./benchmarks/[\w./-]+|[\w-]+\.md)\)")  # a report, or another docs page
    assert rows and all(linked.search(row) for row in rows), [
        row.split(" | ")[0] for row in rows if not linked.search(row)
    ]


# A passage (a paragraph, a list item or a table row) of a checked page that links a results file (a page of
# benchmarks/ or docs/, relative to the page), and the decimal figures in it. Integers are counts and settings
# (20 seeds, 200 steps, levels 2-4), not measurements.
_LINK = re.compile(r"\]\(((?:\.\./)?[\w./-]+\.md)\)")
_FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?!\.\d)")  # not a version (0.2.0)


def _passages(text: str) -> list[str]:
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        if lines and lines[0].startswith("|"):
            out += lines
        else:  # a list item starts a new passage
            out += [p for p in re.split(r"\n(?=\s*[-*] |\s*\d+\. )", block) if p.strip()]
    return out


def _plain(text: str) -> str:
    """Figures as the files spell them, without typography: − to -, no thousands separators."""
    return text.replace("−", "-").replace(",", "").replace("\u2009", "")


def _quoted_from(figure: str, numbers: set[float]) -> bool:
    """Whether `figure` (as the README prints it) is one of `numbers` rounded to its decimals, or as a percentage."""
    decimals = len(figure.split(".")[1])
    return any(f"{x:.{decimals}f}" == figure or f"{100 * x:.{decimals}f}" == figure for x in numbers)


def _results_links(page: str, passage: str) -> list:
    """The files of benchmarks/ and docs/ that `passage` of `page` (a path from the repository root) links."""
    base = (REPO_ROOT / page).parent
    files = [(base / f).resolve() for f in _LINK.findall(passage)]
    roots = [(REPO_ROOT / d).resolve() for d in ("benchmarks", "docs")]
    return [f for f in files if any(f.is_relative_to(r) for r in roots)]


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_figure_beside_a_results_link_is_in_a_linked_file(page: str):
    # The README once quoted the demo's accuracies in a passage that linked another study, and a kalman anchor
    # figure (0.30 → 0.86) that docs/method.md gave as 0.30 → 0.83: a figure next to a link is read as that file's.
    missing = []
    for passage in _passages(PAGES[page]):
        files = _results_links(page, passage)
        if not files:
            continue
        linked = _plain(" ".join(f.read_text(encoding="utf-8") for f in files if f.is_file()))
        numbers = {float(x) for x in re.findall(r"\d+\.\d+", linked)}
        figures = _FIGURE.findall(_plain(passage))
        missing += [(figure, passage[:60]) for figure in figures if not _quoted_from(figure, numbers)]
    assert not missing, missing
