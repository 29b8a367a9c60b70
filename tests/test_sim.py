"""hadw sim: exact group sampling agrees with hadw.theory, the arms' weights with hadw.core, and the command runs."""

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.core import compute_advantages
from hadw.sim.engine import SimSettings, sample_groups, simulate, step_weights
from hadw.theory.binary import bias
from hadw.theory.rectified import debias_constant


@pytest.mark.parametrize("G", [2, 4, 8])
def test_simulated_group_baseline_bias_given_S_matches_theory(G):
    # Lemma 2: E[p̂ | S] − p = bias(p, G); the sim's p̂ is the group mean the GRPO arm centres on.
    p_values = torch.tensor([0.05, 0.125, 0.25, 0.5, 0.75, 0.875], dtype=torch.float64)
    n = 40_000
    p = p_values.repeat(n, 1)  # [n, 6]: n groups per p
    rewards = sample_groups(p, G, torch.Generator().manual_seed(G))
    _, p_hat = step_weights("grpo", rewards, p, torch.full((n,), 0.5, dtype=torch.float64), 1.0)
    p_hat = p_hat[..., 0]
    nondegenerate = (p_hat > 0) & (p_hat < 1)
    for j, pv in enumerate(p_values.tolist()):
        kept = p_hat[:, j][nondegenerate[:, j]]
        se = float(kept.std()) / np.sqrt(kept.numel())
        mc_bias = float(kept.mean()) - pv
        assert abs(mc_bias - float(bias(pv, G))) < 4 * se + 1e-9, (pv, G, mc_bias, float(bias(pv, G)), se)


def test_debiased_baseline_is_unbiased_given_S():
    # Lemma 1: E[c*·p̂ | S] = p at the true p — the "debiased" arm's baseline.
    G, n = 4, 100_000
    p = torch.tensor([0.1, 0.3, 0.8], dtype=torch.float64).repeat(n, 1)
    rewards = sample_groups(p, G, torch.Generator().manual_seed(1))
    p_hat = rewards.mean(-1)
    c_star = torch.from_numpy(debias_constant(p[0].numpy(), G))
    for j in range(3):
        kept = p_hat[:, j][(p_hat[:, j] > 0) & (p_hat[:, j] < 1)]
        est = float(c_star[j] * kept.mean())
        assert abs(est - float(p[0, j])) < 4 * float(c_star[j] * kept.std()) / np.sqrt(kept.numel())


def test_arm_weights_on_random_groups():
    gen = torch.Generator().manual_seed(0)
    S, B, G, lam = 3, 50, 8, 1.3
    p = torch.rand(S, B, generator=gen, dtype=torch.float64)
    rewards = sample_groups(p, G, gen)
    c = torch.tensor([0.2, 0.5, 0.9], dtype=torch.float64)
    grpo, p_hat = step_weights("grpo", rewards, p, c, lam)
    # GRPO's arm is hadw.core's estimator, group by group (seeds never share a group)
    ref = compute_advantages(rewards[1, 7], torch.zeros(G, dtype=torch.long)).advantages
    assert torch.allclose(grpo[1, 7], ref)
    assert torch.allclose(step_weights("grpo_lam", rewards, p, c, lam)[0], lam * grpo)
    hadw, _ = step_weights("hadw", rewards, p, c, lam)
    oracle, _ = step_weights("hadw_oracle", rewards, p, c, lam)
    for w in (hadw, oracle):
        assert torch.equal(torch.sign(w), torch.sign(grpo))  # Φ > 0 never flips a sign
    # hand formula: Φ = λ·exp(sgn(Â)·(C − p̂)), with each seed's own anchor
    expected = grpo * lam * torch.exp(torch.sign(grpo) * (c.view(S, 1, 1) - p_hat))
    assert torch.allclose(hadw, expected)
    expected_oracle = grpo * lam * torch.exp(torch.sign(grpo) * (c.view(S, 1, 1) - p.unsqueeze(-1)))
    assert torch.allclose(oracle, expected_oracle)
    # a correct answer to a prompt harder than its seed's anchor is boosted beyond λ·Â
    boosted = (grpo > 0) & (p_hat < c.view(S, 1, 1))
    assert boosted.any() and torch.all(hadw[boosted] > lam * grpo[boosted])


def _small(**kw):
    """The old one-logit SGD model (--model logit), small."""
    base = dict(
        prompts_per_level=[60, 60],
        level_offsets=[0.5, -2.0],
        steps=40,
        prompts=16,
        seeds=[0, 1, 2],
        eval_every=10,
        lr=0.5,
        skill_lr=0.002,
        model="logit",
        optimizer="sgd",
    )
    return SimSettings(**{**base, **kw})


def _softmax(**kw):
    """The default softmax model, small (a few hundred optimiser steps)."""
    base = dict(prompts_per_level=[80, 80], level_offsets=[0.0, -1.5], steps=40, seeds=[0, 1, 2], eval_every=10)
    return SimSettings(**{**base, **kw})


def test_sim_learns_is_reproducible_and_arms_start_equal():
    a = simulate(_small(arms=["grpo", "hadw"]))
    b = simulate(_small(arms=["grpo", "hadw"]))
    assert np.array_equal(a.curves["hadw"], b.curves["hadw"])  # same seeds, same numbers
    assert np.array_equal(a.curves["grpo"][0], a.curves["hadw"][0])  # paired: same initial policy per seed
    assert a.steps.tolist() == [0, 10, 20, 30, 40]
    assert np.all(a.curves["grpo"][-1] > a.curves["grpo"][0])  # every bucket, every seed improves
    # the window anchor tracks the rollout accuracy, which lies between the start and the end accuracy
    assert 0.1 < a.anchors["hadw"][-1].mean() < 1.0


def test_sim_passes_anchor_options_to_make_anchor():
    # a fixed anchor at 0.3: every step of every seed is weighted against exactly 0.3
    res = simulate(_small(arms=["hadw"], anchor="fixed", anchor_options={"value": 0.3}, steps=5, eval_every=5))
    assert res.anchors["hadw"][-1].tolist() == [0.3, 0.3, 0.3]


def test_cli_writes_plot_and_json_and_rejects_bad_input(tmp_path):
    runner = CliRunner()
    png, js = tmp_path / "sim.png", tmp_path / "sim.json"
    args = [
        "sim",
        "--steps",
        "10",
        "--seeds",
        "0-1",
        "--level-prompts",
        "30,30",
        "--offsets",
        "0,-2",
        "--prompts",
        "8",
        "--eval-every",
        "5",
        "--plot",
        str(png),
        "--json",
        str(js),
    ]
    result = runner.invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    assert png.stat().st_size > 0
    data = json.loads(js.read_text())
    assert data["buckets"] == ["L1", "L2", "all"] and data["steps"] == [0, 5, 10]
    assert set(data["summary"]) == {"grpo", "grpo_lam", "hadw", "hadw_norm", "hadw_oracle", "debiased"}
    assert isinstance(data["summary"]["hadw"]["all"]["final"]["mean"], float)  # the layout users read
    assert data["summary"]["hadw"]["all"]["seeds_needed"] is None or data["summary"]["hadw"]["all"]["seeds_needed"] >= 2
    assert data["settings"]["model"] == "softmax" and data["settings"]["optimizer"] == "adamw"
    assert data["caveat"] is None and "Caveat" not in result.output  # AdamW: checked, no SGD caveat
    sgd = runner.invoke(build_app(), [*args, "--optimizer", "sgd", "--grad-clip", "0"])
    assert sgd.exit_code == 0, sgd.output
    # SGD: the failed pre-registered check and the missing stability edge, in the output and in the JSON
    assert "Caveat" in sgd.output and "stability edge" in " ".join(sgd.output.split())
    assert "-0.089" in json.loads(js.read_text())["caveat"]
    bad = runner.invoke(build_app(), ["sim", "--arms", "grpo,nope", "--steps", "1"])
    assert bad.exit_code == 2 and "allowed arms" in bad.output
    bad = runner.invoke(build_app(), ["sim", "--anchor", "nope", "--steps", "1", "--seeds", "0"])
    assert bad.exit_code == 2 and "unknown anchor" in bad.output
    bad = runner.invoke(build_app(), ["sim", "--level-prompts", "10,10", "--offsets", "0", "--steps", "1"])
    assert bad.exit_code == 2 and "one entry per level" in bad.output


def test_keyed_anchors_per_level_and_per_prompt():
    from hadw.core import make_anchor
    from hadw.sim.engine import observe_anchors

    res = simulate(_small(arms=["hadw"], anchor="per_level", steps=12, eval_every=6))
    assert res.anchors["hadw"].shape == (3, 3) and np.all((res.anchors["hadw"] > 0) & (res.anchors["hadw"] < 1))
    rewards = torch.tensor([[[1.0, 1, 1, 0], [0, 0, 0, 1]]], dtype=torch.float64)  # S=1, B=2, G=4
    levels, ids = torch.tensor([[0, 1]]), torch.tensor([[5, 9]])
    # per_level: a level without history uses the batch anchor; afterwards its own (window) history
    anchor = make_anchor("per_level")
    c, p_phi = observe_anchors([anchor], rewards, levels, ids)
    assert p_phi is None and torch.allclose(c, torch.full((1, 2, 4), 0.5, dtype=torch.float64))
    c, _ = observe_anchors([anchor], rewards, levels, ids)
    assert torch.allclose(c[0, 0], torch.full((4,), 0.75, dtype=torch.float64))
    assert torch.allclose(c[0, 1], torch.full((4,), 0.25, dtype=torch.float64))
    # per_prompt: Φ compares the prompt's pooled success rate over its visits (not p̂) with the batch anchor
    anchor = make_anchor("per_prompt", visits=4)
    observe_anchors([anchor], rewards, levels, ids)
    c, p_phi = observe_anchors([anchor], torch.zeros(1, 2, 4, dtype=torch.float64), levels, ids)
    assert torch.allclose(p_phi[0, 0], torch.full((4,), 3 / 8, dtype=torch.float64))
    assert torch.allclose(p_phi[0, 1], torch.full((4,), 1 / 8, dtype=torch.float64))
    assert c.shape == (1,) and abs(float(c[0]) - 0.25) < 1e-9  # window of the two batch accuracies 0.5, 0


def test_softmax_model_learns_and_starts_where_the_offsets_say():
    res = simulate(_softmax(arms=["grpo", "hadw", "hadw_norm"]))
    start = res.curves["grpo"][0].mean(axis=0)
    # the initial success rate of a level is E[sigmoid(offset + spread·ε)]: 0.5 at offset 0 by symmetry
    assert abs(start[0] - 0.5) < 0.05 and 0.15 < start[1] < 0.3
    for arm in ("grpo", "hadw", "hadw_norm"):
        assert np.all(res.curves[arm][-1] > res.curves[arm][0] + 0.02)  # every bucket of every seed improves
        assert np.array_equal(res.curves[arm][0], res.curves["grpo"][0])  # paired: same initial policy
    again = simulate(_softmax(arms=["hadw"]))
    assert np.array_equal(again.curves["hadw"], res.curves["hadw"])


def test_lambda_cancels_under_adamw_and_is_a_step_size_under_sgd():
    """Adam's step m̂/(√v̂+ε) is unchanged when every gradient is scaled by λ: grpo_lam ≡ grpo up to rounding
    with ε → 0 and no clip, and within 1e-3 of accuracy with the trainer's ε and clip; under SGD it is a larger step."""
    exact = simulate(_softmax(arms=["grpo", "grpo_lam"], eps=1e-30, grad_clip=0.0))  # ε → 0 (0 itself: 0/0)
    # not 1e-12: where a gradient element is pure rounding noise, Adam turns it into a full ±lr step, and the noise of
    # λ·g is not λ × the noise of g (measured gap 3e-6)
    np.testing.assert_allclose(exact.curves["grpo_lam"], exact.curves["grpo"], atol=3e-5)
    trainer_like = simulate(_softmax(arms=["grpo", "grpo_lam"]))
    assert np.abs(trainer_like.curves["grpo_lam"] - trainer_like.curves["grpo"]).max() < 1e-3
    sgd = simulate(_softmax(arms=["grpo", "grpo_lam"], optimizer="sgd", lr=0.002, grad_clip=0.0))
    gain = sgd.curves["grpo_lam"][-1] - sgd.curves["grpo"][-1]
    assert np.all(gain > 0.002)  # λ = 1.3 is a 1.3× learning rate: every bucket of every seed learns more


def test_lambda_does_not_cancel_under_adamw_when_the_clip_is_active_on_some_steps():
    """The README's λ condition: on mostly easy prompts the gradient norm hovers near the clip, λ = 2 changes which
    steps are clipped, and GRPO × 2 learns more than GRPO (docs/method.md: +0.0035 over 20 seeds); with the clip
    off the two are the same run."""
    easy = dict(level_offsets=[1.7346, 0.6190, -0.2007], prompts_per_level=[300, 300, 300], steps=200, seeds=[0, 1])
    clipped = simulate(SimSettings(arms=["grpo", "grpo_lam"], lam=2.0, grad_clip=1.0, eval_every=200, **easy))
    gain = clipped.curves["grpo_lam"][-1] - clipped.curves["grpo"][-1]
    assert np.all(gain[:, -1] > 0.002), gain  # the "all" bucket of every seed
    free = simulate(SimSettings(arms=["grpo", "grpo_lam"], lam=2.0, grad_clip=0.0, eval_every=200, **easy))
    assert np.abs(free.curves["grpo_lam"][-1] - free.curves["grpo"][-1]).max() < 5e-4


def test_hadw_norm_weights_average_one_per_seed_and_ignore_lambda():
    gen = torch.Generator().manual_seed(0)
    S, B, G = 3, 20, 8
    p = torch.rand(S, B, generator=gen, dtype=torch.float64)
    rewards = sample_groups(p, G, gen)
    c = torch.tensor([0.2, 0.5, 0.9], dtype=torch.float64)
    grpo, _ = step_weights("grpo", rewards, p, c, 1.3)
    w13, _ = step_weights("hadw_norm", rewards, p, c, 1.3)
    w20, _ = step_weights("hadw", rewards, p, c, 2.0, normalize="batch")
    assert torch.allclose(w13, w20)
    active = grpo != 0
    for s in range(S):  # Φ = w / Â has mean 1 over each seed's informative responses
        assert float((w13[s][active[s]] / grpo[s][active[s]]).mean()) == pytest.approx(1.0)
    scaled, _ = step_weights("grpo", rewards, p, c, 1.3, scale=1.5)
    assert torch.allclose(scaled, 1.5 * grpo)


def test_softmax_options_run_and_are_checked():
    for extra in (
        dict(kl_coef=0.5, entropy_coef=0.01),
        dict(ppo_epochs=2, mini_batch_prompts=2, answers=2),
        dict(optimizer="sgd", lr=0.002, weight_decay=0.01, warmup_steps=0),
    ):
        res = simulate(_softmax(arms=["grpo"], steps=10, **extra))
        assert np.isfinite(res.curves["grpo"]).all()
    with pytest.raises(ValueError, match="logit model trains with plain SGD only"):
        simulate(_small(optimizer="adamw"))
    with pytest.raises(ValueError, match="wrong_concentration"):
        simulate(_softmax(wrong_concentration=0.2))


def test_token_answers_start_where_one_token_does_and_learn():
    """tokens=T: each of T tokens right with the T-th root of the prompt's rate, so the whole answer starts as the
    one-token model does; tokens=1 is the one-token model itself."""
    one = simulate(_softmax(arms=["grpo"], steps=10))
    again = simulate(_softmax(arms=["grpo"], steps=10, tokens=1))
    assert np.array_equal(one.curves["grpo"], again.curves["grpo"])
    three = simulate(_softmax(arms=["grpo", "hadw_norm"], steps=30, tokens=3))
    np.testing.assert_allclose(three.curves["grpo"][0], one.curves["grpo"][0], atol=0.03)
    assert np.all(three.curves["grpo"][-1] > three.curves["grpo"][0])
