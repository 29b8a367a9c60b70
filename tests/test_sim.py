"""hadw sim: the simulated group baseline matches theory; the simulator's invariants; the command."""

import json

import pytest
import torch
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.sim import SimConfig, group_baseline_bias, simulate
from hadw.theory.binary import bias


@pytest.mark.parametrize(("p", "G"), [(0.05, 8), (0.25, 4), (0.75, 8), (0.125, 2), (0.5, 16)])
def test_simulated_group_baseline_bias_equals_theory(p, G):
    got = group_baseline_bias(p, G, n=400_000)
    # Monte-Carlo error of a mean of p̂ over ≥ ~60k kept groups is < 2e-3 at these p.
    assert got == pytest.approx(float(bias(p, G)), abs=3e-3)


def test_no_step_keeps_the_population_and_lambda_one_scaling_is_grpo():
    frozen = simulate(SimConfig(prompts=300, steps=5, seeds=3, batch=32, lr=0.0, shared_lr=0.0, arms=["grpo"]))
    curve = frozen["grpo"]
    assert torch.equal(curve[0], curve[-1])
    # Beta(0.6, 1.2) has mean 1/3: the initial population's expected accuracy, averaged over 3 × 300 prompts.
    assert float(curve[0, :, -1].mean()) == pytest.approx(1 / 3, abs=0.03)
    cfg = SimConfig(prompts=300, steps=20, seeds=3, batch=32, lam=1.0, arms=["grpo", "grpo-lam"])
    out = simulate(cfg)
    assert torch.allclose(out["grpo"], out["grpo-lam"])
    assert float(out["grpo"][-1, :, -1].mean()) > float(out["grpo"][0, :, -1].mean())  # GRPO learns


def test_hadw_arms_are_paired_with_grpo_and_differ_from_it():
    out = simulate(SimConfig(prompts=400, steps=30, seeds=4, batch=32, arms=["grpo", "window"]))
    assert torch.equal(out["grpo"][0], out["window"][0])  # same initial population per seed
    assert not torch.allclose(out["grpo"][-1], out["window"][-1])


def test_sim_command_writes_plot_and_json_and_rejects_bad_arm(tmp_path):
    app = build_app()
    args = ["sim", "--prompts", "200", "--steps", "10", "--seeds", "3", "--batch", "16", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sim.png").stat().st_size > 1000
    data = json.loads((tmp_path / "sim.json").read_text())
    assert set(data["summary"]) == {"grpo", "grpo-lam", "window", "kalman"}
    assert data["summary"]["grpo"]["diff_vs_grpo"] is None
    result = CliRunner().invoke(app, [*args, "--arm", "median"])
    assert result.exit_code == 2 and "median" in result.output
