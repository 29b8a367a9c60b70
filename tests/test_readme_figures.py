"""The README quotes measured figures from the files the scripts write, so one recipe cannot show two values.

benchmarks/demo_results.md is `hadw demo`'s output, benchmarks/real_model_rl.md is real_model_rl.py's report:
the README's copies of their figures must be the files' own.
"""

from __future__ import annotations

import re

from tests.conftest import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
PROSE = " ".join(README.split())  # sentences wrap anywhere


def _table(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("|"))


def test_the_demo_table_is_the_demos_output():
    demo = (REPO_ROOT / "benchmarks" / "demo_results.md").read_text(encoding="utf-8")
    assert _table(demo) in README
    steps, accuracy = re.search(r"warm start: (\d+) SFT steps, greedy accuracy ([\d.]+)", demo).groups()
    assert f"({steps} steps; accuracy jumps past the 0.3 target to {accuracy} greedy" in PROSE


def test_the_readme_quotes_no_other_accuracy_for_the_demo_recipe():
    # The quick start and the configuration section once quoted their own warm-start / RL accuracies
    # (0.42 -> 0.73, 0.50 -> 0.60) beside the demo's 0.473 -> 0.607 for the same recipe.
    assert not re.search(r"warm start reaches \d\.\d+|RL steps: \d\.\d+ → \d\.\d+", PROSE)


def test_the_real_model_figures_are_the_reports():
    report = (REPO_ROOT / "benchmarks" / "real_model_rl.md").read_text(encoding="utf-8")
    rows = {m[0]: m[1:] for m in re.findall(r"^\| (\w+) \| ([\d.]+) \| ([\d.]+) \|", report, re.M)}
    (before, grpo), (_, hadw) = rows["grpo"], rows["grpo_hadw"]
    assert f"held-out greedy accuracy {before} → {grpo} (GRPO) and {hadw} (GRPO+HA-DW)" in PROSE


def test_the_135m_trl_ratios_are_the_benchmarks_output():
    output = (REPO_ROOT / "benchmarks" / "train_vs_trl_135m.md").read_text(encoding="utf-8")
    cpu = re.findall(r"by CPU\s+([\d.]+) /\s+([\d.]+) /\s+([\d.]+)", output)
    (n_lo, n_med, n_hi), (e_lo, e_med, e_hi) = [[f"{float(v):.2f}" for v in row] for row in cpu]
    assert f"natural ×{n_med} [{n_lo}–{n_hi}], equal work ×{e_med} [{e_lo}–{e_hi}] by CPU time" in PROSE


def test_the_135m_memory_figures_are_the_benchmarks_output():
    output = (REPO_ROOT / "benchmarks" / "memory_vs_trl_135m.md").read_text(encoding="utf-8")
    hadw, trl = re.findall(r"peak RSS [\d.]+ / ([\d.]+) / [\d.]+ GiB", output)
    lo, med, hi = re.search(r"paired by repeat\): ([\d.]+) / ([\d.]+) / ([\d.]+)", output).groups()
    assert f"hadw {hadw} GiB vs TRL {trl} GiB peak RSS" in PROSE and f"ratio ×{med} [{lo}–{hi}]" in PROSE


def test_the_g4_check_figure_is_the_measured_table():
    # "Does HA-DW help?" quotes the pre-registered G = 4 check of benchmarks/sim_vs_trainer.md
    text = (REPO_ROOT / "benchmarks" / "sim_vs_trainer.md").read_text(encoding="utf-8")
    section = text.split("## Check of the fix on an uncalibrated setting", 1)[1]
    measured = re.search(r"\*\*all \(primary\)\*\* \|[^\n]*\| \*\*(−[\d.]+ \[−[\d.]+, −[\d.]+\])\*\* \|", section)
    assert measured, "the measured table of the G = 4 check"
    assert f"HA-DW − GRPO at **{measured.group(1)}**" in PROSE
