"""`hadw bias`: --json numbers equal the library's, PNGs are written, every option is documented."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.theory import (
    bias,
    continuous_bias,
    debias_constant,
    interval_average,
    lambda_interval,
    p_degenerate,
    prob_misestimate,
)
from hadw.theory.continuous import beta_rewards


@pytest.fixture(scope="module")
def app():
    return build_app()


def _run_json(app, args: list[str]) -> dict:
    result = CliRunner().invoke(app, ["bias", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_table_json_matches_library(app):
    data = _run_json(app, ["table", "-G", "4", "-G", "8", "-p", "0.25", "-p", "0.875", "--eps", "0.05"])
    assert [(r["G"], r["p"]) for r in data["rows"]] == [(4, 0.25), (4, 0.875), (8, 0.25), (8, 0.875)]
    for r in data["rows"]:
        assert r["bias"] == pytest.approx(float(bias(r["p"], r["G"])), rel=1e-12)
        assert r["p_degenerate"] == pytest.approx(float(p_degenerate(r["p"], r["G"])), rel=1e-12)
        assert r["prob_misestimate"] == pytest.approx(float(prob_misestimate(r["p"], r["G"], 0.05)), rel=1e-12)
        assert r["debias_constant"] == pytest.approx(float(debias_constant(r["p"], r["G"])), rel=1e-12)
        assert r["direction"] == ("under" if r["p"] < 0.5 else "over")
    assert data["rows"][0]["bias"] == pytest.approx(0.1121, abs=5e-5)  # spec table, G = 4, p = 0.25


def test_average_json_matches_library_and_reads_k_over_G(app):
    data = _run_json(app, ["average", "-G", "6", "-G", "8", "-i", "0:0.5", "-i", "0:2/G"])
    by_key = {(r["interval"], r["G"]): r for r in data["rows"]}
    assert by_key[("0:2/G", 8)]["hi"] == 0.25
    for (_spec, G), r in by_key.items():
        assert r["average"] == pytest.approx(float(interval_average(G, r["lo"], r["hi"])), rel=1e-12)
    assert by_key[("0:0.5", 8)]["average"] > 0.63


def test_lambda_json_matches_library(app):
    data = _run_json(
        app,
        [
            "lambda",
            "--p-hat",
            "0.25",
            "--anchor",
            "0.5",
            "-G",
            "64",
            "--margin",
            "0.1",
            "--delta",
            "0.1",
            "--eps",
            "0.05",
        ],
    )
    li = lambda_interval(0.25, 0.5, 64, 0.1, 0.1, 0.05)
    for name in ("correct_lo", "correct_hi", "incorrect_lo", "incorrect_hi", "c_low", "c_high"):
        assert data[name] == pytest.approx(float(getattr(li, name)), rel=1e-12)
    assert data["both_empty"] is True


def test_continuous_json_matches_library(app):
    data = _run_json(app, ["continuous", "-d", "beta:2,5", "-G", "2", "-G", "4", "--sigma", "0.2"])
    expected = continuous_bias(beta_rewards(2, 5), [2, 4], 0.2)
    assert [r["bias"] for r in data["rows"]] == pytest.approx(expected.tolist(), rel=1e-12)
    assert data["rows"][0]["mean"] == pytest.approx(2 / 7)


def test_plot_writes_pngs(app, tmp_path):
    data = _run_json(app, ["plot", "-o", str(tmp_path / "figs"), "-G", "2", "-G", "8", "--points", "3"])
    for key in ("binary_png", "continuous_png"):
        png = Path(data[key]).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    p = np.asarray(data["binary"]["p"])
    np.testing.assert_allclose(data["binary"]["abs_bias"]["8"], np.abs(bias(p, 8)), rtol=1e-12)
    assert len(data["continuous"]["mean"]) == 3


def test_bad_input_is_reported(app):
    result = CliRunner().invoke(app, ["bias", "table", "-p", "1.5"])
    assert result.exit_code != 0 and "--success-rate" in result.output
    result = CliRunner().invoke(app, ["bias", "continuous", "-d", "gamma:1,2"])
    assert result.exit_code != 0 and "beta:ALPHA,BETA" in result.output
    result = CliRunner().invoke(app, ["bias", "average", "-i", "0:x/G"])
    assert result.exit_code != 0 and "interval" in result.output


def test_every_option_is_documented(app):
    group = typer.main.get_command(app).commands["bias"]
    assert set(group.commands) == {"table", "average", "lambda", "continuous", "plot"}
    for name, command in group.commands.items():
        assert command.help, name
        help_text = CliRunner().invoke(app, ["bias", name, "--help"], env={"COLUMNS": "200"}).output
        for param in command.params:
            if isinstance(param, click.Option) and param.name != "help":
                assert param.help, f"{name} {param.opts}"
                assert param.opts[0] in help_text, f"{name} {param.opts}"


def test_table6_uses_the_underestimation_event_for_every_G(app):
    """Issue 14: the paper's Table 6 averages P(under | S) over p in (0, 2/G), even for G = 2, 3 where 2/G > 1/2
    (the 'auto' direction once switched to over-estimation past 1/2 and gave 1.0 and 0.708)."""
    data = _run_json(app, ["average", "-G", "2-3,6", "-i", "0:2/G"])
    assert {r["G"]: round(r["average"], 4) for r in data["rows"]} == {2: 0.5, 3: 0.75, 6: 0.7812}
    assert all(r["direction"] == "under" for r in data["rows"])
