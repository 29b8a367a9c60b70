"""`hadw probe`: Figure 1(b)'s numbers, agreement with the theory on a simulated Bernoulli "model",
and shapes / buckets / outputs on a tiny real model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.data import sample_problems
from hadw.eval.probe import bernoulli_sampler, model_sampler, probe_stats, run_probe, sample_probe
from hadw.eval.report import PROBE_ADVANTAGE_COLUMNS, probe_rows, rich_table
from hadw.rollout import build_tiny_model, load_model
from hadw.theory import bias, p_nondegenerate


def ones(count: int, total: int) -> np.ndarray:
    return np.array([1.0] * count + [0.0] * (total - count))


def test_figure_1b_advantages_of_group_and_reference():
    # spec §1: 1 correct of 8 gives +2.65 / −0.38; 9 of 128 gives +3.64 / −0.28; 7 of 8 and 118 of 128 mirror them.
    group = np.stack([ones(1, 8), ones(7, 8)])[:, None, :]  # [P=2, M=1, G=8]
    reference = np.stack([ones(9, 128), ones(118, 128)])  # [2, 128]
    report = probe_stats(group, reference, edges=[0, 0.5, 1])
    hard, easy = report.buckets["p∈[0,0.5)"], report.buckets["p∈[0.5,1]"]
    assert (hard["z_correct_est"], hard["z_wrong_est"]) == pytest.approx((2.6458, -0.3780), abs=1e-4)
    assert (hard["z_correct_ref"], hard["z_wrong_ref"]) == pytest.approx((3.6362, -0.2750), abs=1e-4)
    assert (easy["z_correct_est"], easy["z_wrong_est"]) == pytest.approx((0.3780, -2.6458), abs=1e-4)
    assert (easy["z_correct_ref"], easy["z_wrong_ref"]) == pytest.approx((0.2911, -3.4351), abs=1e-4)
    # raw advantages: A − Â = p̂ − p_ref = 1/8 − 9/128 > 0 (under-estimated), 7/8 − 118/128 < 0 (over)
    assert hard["bias_measured"] == pytest.approx(1 / 8 - 9 / 128) and hard["under_frac"] == 1.0
    assert easy["bias_measured"] == pytest.approx(7 / 8 - 118 / 128) and easy["over_frac"] == 1.0
    assert hard["adv_correct_est"] == pytest.approx(7 / 8) and hard["adv_correct_ref"] == pytest.approx(119 / 128)
    assert hard["bias_theory"] == pytest.approx(float(bias(9 / 128, 8)))
    assert report.buckets["all"]["prompts"] == 2 and report.buckets["all"]["nondegenerate"] == 2


def test_degenerate_groups_are_counted_not_measured():
    group = np.array([[ones(0, 4), ones(4, 4), ones(2, 4)]])  # one prompt, three groups of G = 4
    report = probe_stats(group, ones(3, 6)[None, :], edges=[0, 1])
    row = report.buckets["all"]
    assert row["groups"] == 3 and row["nondegenerate"] == 1 and row["degenerate_frac"] == pytest.approx(2 / 3)
    assert row["bias_measured"] == pytest.approx(0.0) and row["under_frac"] == row["over_frac"] == 0.0
    assert row["p_hat_mean_S"] == 0.5


def test_measured_bias_matches_theory_on_a_bernoulli_model():
    P, G = 160, 8
    p = np.linspace(0.02, 0.98, P)
    problems = sample_problems("addition", P, seed=1)
    report = run_probe(bernoulli_sampler(p), problems, G=G, N=4000, groups=60, seed=3)
    assert report.p_hat.shape == (P, 60) and report.p_ref.shape == (P,)
    assert np.abs(report.p_ref - p).max() < 0.04  # N = 4000 pins p down
    for name, row in report.buckets.items():
        if not name.startswith("p∈"):
            continue
        n = row["nondegenerate"]
        assert abs(row["bias_measured"] - row["bias_theory"]) < 4 * row["bias_se"], name
        for side in ("under", "over"):
            q = row[f"{side}_theory"]
            assert abs(row[f"{side}_frac"] - q) < 4 * np.sqrt(max(q * (1 - q), 1e-4) / n) + 1e-9, (name, side)
    # the true p (not just p_ref) predicts the measurement too: P(S)-weighted Lemma 2 over the hard half
    hard = report.buckets["p∈[0.25,0.5)"]
    in_bin = (report.p_ref >= 0.25) & (report.p_ref < 0.5)
    w = p_nondegenerate(p[in_bin], G)
    assert abs(hard["bias_measured"] - float((w * bias(p[in_bin], G)).sum() / w.sum())) < 4 * hard["bias_se"]
    # Theorem 1's sign pattern: under-estimation for hard prompts, over-estimation for easy ones
    assert (
        report.buckets["p∈[0,0.125)"]["bias_measured"] > 0.05 > -0.05 > report.buckets["p∈[0.875,1]"]["bias_measured"]
    )
    assert report.buckets["p∈[0,0.125)"]["under_frac"] == 1.0  # Corollary 3: p < 1/G ⇒ surely under-estimated


def test_sample_probe_splits_groups_then_reference_and_checks_shapes():
    problems = sample_problems("addition", 3)
    column = lambda probs, n, seed: np.tile(np.arange(n) % 2, (len(probs), 1)).astype(float)
    group, reference = sample_probe(column, problems, G=4, N=5, groups=2)
    assert group.shape == (3, 2, 4) and reference.shape == (3, 5)
    assert group[0].tolist() == [[0, 1, 0, 1], [0, 1, 0, 1]] and reference[0].tolist() == [0, 1, 0, 1, 0]
    with pytest.raises(ValueError, match="shape"):
        sample_probe(lambda probs, n, seed: np.zeros((1, n)), problems, G=4, N=5)
    with pytest.raises(ValueError, match="G >= 2"):
        sample_probe(column, problems, G=1, N=5)
    with pytest.raises(ValueError, match="edges must increase"):
        probe_stats(group, reference, edges=[0, 0.5, 0.4, 1])


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return build_tiny_model(
        tmp_path_factory.mktemp("probe") / "tiny", num_layers=1, hidden_size=32, intermediate_size=64
    )


def test_probe_on_a_tiny_model_shapes_and_level_buckets(tiny_model_dir):
    model, tokenizer = load_model(tiny_model_dir, device="cpu")
    problems = sample_problems("addition", 6, levels=[1, 2], seed=5)
    sampler = model_sampler(model, tokenizer, "plain", "exact", max_new_tokens=3, use_chat_template=False)
    report = run_probe(sampler, problems, G=4, N=6, groups=2)
    assert report.p_hat.shape == (6, 2) and report.p_ref.shape == (6,)
    assert np.all((report.p_ref * 6) % 1 == 0) and np.all((report.p_hat * 4) % 1 == 0)  # rates of 0/1 samples
    levels = {f"addition/L{p.level}": sum(q.level == p.level for q in problems) for p in problems}
    for key, count in levels.items():
        assert report.buckets[key]["prompts"] == count and report.buckets[key]["groups"] == 2 * count
    assert sum(row["prompts"] for k, row in report.buckets.items() if k.startswith("p∈")) == 6
    headers, rows = probe_rows(report.buckets)
    assert rows[0][0] == "all" and headers[4] == "bias ± se" and len(rows[0]) == len(headers)


def test_probe_cli_writes_json_and_png(tiny_model_dir, tmp_path):
    out_json, png = tmp_path / "probe.json", tmp_path / "probe.png"
    args = [
        "probe",
        str(tiny_model_dir),
        "--data",
        "task:addition",
        "--limit",
        "4",
        "-G",
        "2",
        "-N",
        "4",
        "--max-new-tokens",
        "2",
        "--chat-template",
        "never",
        "--json",
        str(out_json),
        "--png",
        str(png),
    ]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output

    def no_nan(name):
        raise AssertionError(f"{name} is not valid JSON")

    data = json.loads(out_json.read_text(), parse_constant=no_nan)
    assert (data["G"], data["N"], data["groups"]) == (2, 4, 1) and data["buckets"]["all"]["prompts"] == 4
    assert png.stat().st_size > 10_000
    # a random model answers nothing: every group is all wrong, and the probe says so instead of a table of dashes
    assert data["buckets"]["all"]["nondegenerate"] == 0
    assert "no group of G=2 is informative" in " ".join(result.output.split())


def test_probe_table_headers_fit_a_100_column_terminal():
    import io

    from rich.console import Console

    problems = sample_problems("addition", 40, seed=1)
    p = np.linspace(0.05, 0.95, 40)
    report = run_probe(bernoulli_sampler(p), problems, G=8, N=64, groups=2)
    for columns in (None, PROBE_ADVANTAGE_COLUMNS):
        headers, rows = probe_rows(report.buckets, columns)
        out = io.StringIO()
        Console(file=out, width=100).print(rich_table("t", headers, rows))
        lines = out.getvalue().splitlines()
        assert max(len(line) for line in lines) <= 100
        header_line = next(line for line in lines if "bucket" in line)
        assert all(h in header_line for h in headers), header_line  # no header wrapped onto a second line
