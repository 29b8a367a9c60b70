import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hadw.core import apply_hadw, compute_advantages, hadw_weights, make_anchor

LAM = 1.3


@pytest.mark.parametrize(
    ("p_hat", "advantage", "phi"),
    [
        (0.25, +1.0, LAM * math.exp(0.25)),  # hard prompt, correct response: boosted
        (0.25, -1.0, LAM * math.exp(-0.25)),  # hard prompt, wrong response: damped
        (0.75, +1.0, LAM * math.exp(-0.25)),  # easy prompt, correct: damped
        (0.75, -1.0, LAM * math.exp(0.25)),  # easy prompt, wrong: boosted
        (0.5, +1.0, LAM),  # p̂ = C: λ only
        (0.5, -1.0, LAM),
        (0.25, 0.0, LAM),  # Â = 0: D = 0
    ],
)
def test_hand_worked_phi_table(p_hat, advantage, phi):
    got = hadw_weights(torch.tensor([advantage]), torch.tensor([p_hat]), anchor=0.5, lam=LAM)
    assert got.item() == pytest.approx(phi, rel=1e-6)


def test_apply_hadw_uses_correctness_not_total_reward_and_updates_anchor_once():
    correctness = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    total = correctness - 0.1 * torch.arange(8.0)  # shaped reward: a length penalty
    ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv = compute_advantages(total, ids).advantages
    anchor = make_anchor("fixed", value=0.5)
    out = apply_hadw(adv, correctness, ids, anchor, lam=LAM)
    p_hat = torch.tensor([0.25] * 4 + [0.75] * 4)  # from correctness, not from `total`
    torch.testing.assert_close(out.weights, hadw_weights(adv, p_hat, 0.5, LAM))
    torch.testing.assert_close(out.advantages, adv * out.weights)
    assert out.metrics["hadw/batch_accuracy"] == pytest.approx(0.5)
    # hard group: 1 correct boosted, 3 wrong damped; easy group: 3 correct damped, 1 wrong boosted
    assert out.metrics["hadw/frac_boosted"] == pytest.approx(2 / 8)
    assert out.metrics["hadw/frac_damped"] == pytest.approx(6 / 8)
    assert out.metrics["hadw/phi_max"] == pytest.approx(LAM * math.exp(0.25))

    window = make_anchor("window", k=10)
    apply_hadw(adv, correctness, ids, window)
    assert window.state_dict()["history"] == [0.5]


def test_disabled_gives_unit_weights_and_degenerate_groups_untouched():
    correctness = torch.tensor([1.0, 1.0, 0.0, 1.0])
    ids = torch.tensor([0, 0, 1, 1])
    adv = compute_advantages(correctness, ids).advantages
    off = apply_hadw(adv, correctness, ids, make_anchor("fixed", value=0.2), enabled=False)
    assert torch.equal(off.weights, torch.ones(4)) and torch.equal(off.advantages, adv)
    on = apply_hadw(adv, correctness, ids, make_anchor("fixed", value=0.2))
    assert on.advantages[:2].tolist() == [0.0, 0.0]  # group 0 is degenerate: still no gradient


def test_phi_bounded_by_lambda_over_e_and_lambda_e_for_binary_rewards():
    gen = torch.Generator().manual_seed(0)
    correctness = (torch.rand(4096, generator=gen) < 0.4).float()
    ids = torch.arange(4096) // 8
    adv = compute_advantages(correctness, ids).advantages
    for c in (0.0, 0.3, 1.0):
        w = apply_hadw(adv, correctness, ids, make_anchor("fixed", value=c), lam=LAM).weights
        assert w.min() >= LAM / math.e - 1e-6 and w.max() <= LAM * math.e + 1e-6


@settings(max_examples=80, deadline=None)
@given(
    rewards=st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=40),
    group_size=st.integers(1, 8),
    anchor=st.floats(0, 1),
    lam=st.floats(0.1, 3.0),
    seed=st.integers(0, 1000),
)
def test_phi_positive_and_permutation_equivariant(rewards, group_size, anchor, lam, seed):
    r = torch.tensor(rewards)
    ids = torch.arange(len(rewards)) // group_size
    adv = compute_advantages(r, ids).advantages
    out = apply_hadw(adv, r, ids, make_anchor("fixed", value=anchor), lam=lam)
    assert bool((out.weights > 0).all())
    perm = torch.randperm(len(rewards), generator=torch.Generator().manual_seed(seed))
    adv_p = compute_advantages(r[perm], ids[perm]).advantages
    out_p = apply_hadw(adv_p, r[perm], ids[perm], make_anchor("fixed", value=anchor), lam=lam)
    torch.testing.assert_close(out_p.advantages, out.advantages[perm])


@settings(max_examples=60, deadline=None)
@given(
    totals=st.lists(st.floats(0, 1), min_size=2, max_size=40),
    group_size=st.integers(1, 8),
    anchor=st.floats(0, 1),
    estimator=st.sampled_from(["grpo", "drgrpo", "rloo"]),
)
def test_cheap_metrics_equal_their_masked_definition(totals, group_size, anchor, estimator):
    total = torch.tensor(totals)
    correctness = (total > 0.5).float()  # correctness differs from the (shaped) total reward
    ids = torch.arange(len(totals)) // group_size
    adv = compute_advantages(total, ids, estimator).advantages
    out = apply_hadw(adv, correctness, ids, make_anchor("fixed", value=anchor), lam=LAM)
    active = adv != 0
    if bool(active.any()):
        w = out.weights[active]
        assert out.metrics["hadw/phi_mean"] == pytest.approx(float(w.mean()), rel=1e-5)
        assert out.metrics["hadw/phi_min"] == pytest.approx(float(w.min()), rel=1e-6)
        assert out.metrics["hadw/phi_max"] == pytest.approx(float(w.max()), rel=1e-6)
    boosted = float(((out.weights > LAM) & active).float().mean())
    assert out.metrics["hadw/frac_boosted"] == pytest.approx(boosted)


def test_normalize_batch_is_reweighting_only():
    """normalize="batch": Φ / (mean Φ over the informative responses), hand-worked on two groups; λ cancels;
    Â = 0 responses get exactly 1; "none" returns Φ untouched; an unknown mode is refused with the allowed ones."""
    from hadw.core import normalize_weights, scale_advantages

    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])  # group 0: p̂ = 1/4; group 1 degenerate
    ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv = compute_advantages(rewards, ids).advantages
    out = {lam: apply_hadw(adv, rewards, ids, make_anchor("fixed", value=0.5), lam, normalize="batch")
           for lam in (1.0, 1.5)}  # fmt: skip
    # group 0 vs C = 0.5: the correct response gets e^{0.25}, the three wrong ones e^{-0.25}
    raw = torch.tensor([math.exp(0.25)] + [math.exp(-0.25)] * 3)
    torch.testing.assert_close(out[1.5].weights[:4], raw / raw.mean())
    assert out[1.5].weights[4:].tolist() == [1.0] * 4
    torch.testing.assert_close(out[1.0].advantages, out[1.5].advantages)
    assert out[1.5].metrics["hadw/phi_mean"] == pytest.approx(1.0)
    assert out[1.5].metrics["hadw/phi_max"] == pytest.approx(float(raw.max() / raw.mean()))
    phi = hadw_weights(adv, rewards, 0.5, 1.3)
    assert normalize_weights(phi, adv, "none") is phi
    x = torch.randn(5)
    assert scale_advantages(x, 1.0) is x and torch.equal(scale_advantages(x, 1.3), x * 1.3)
    with pytest.raises(ValueError, match="normalize='mean' is not allowed; allowed: none, batch"):
        normalize_weights(phi, adv, "mean")
