"""per_level / per_source / per_prompt anchors (method.md §3.4) on hand-computed batches."""

import json
import math

import pytest
import torch

from hadw.core import anchor_from_state, apply_hadw, make_anchor

LAM = 1.0


def _phi(adv_sign: float, p: float, c: float) -> float:
    return LAM * math.exp(adv_sign * (c - p))


def test_per_level_uses_own_history_after_first_batch_and_batch_anchor_before():
    anchor = make_anchor("per_level", base="window", k=10)
    # batch 1: level 1 group [1,1,1,0] (acc 0.75), level 2 group [0,0,0,1] (acc 0.25); batch acc 0.5
    corr = torch.tensor([1, 1, 1, 0, 0, 0, 0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    levels = [1] * 4 + [2] * 4
    adv = torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -1.0, 1.0])
    out = apply_hadw(adv, corr, groups, anchor, LAM, keys=levels)
    # first batch: no level has history -> every prompt is weighed against the batch anchor 0.5
    assert out.weights[0].item() == pytest.approx(_phi(1, 0.75, 0.5))
    assert out.weights[7].item() == pytest.approx(_phi(1, 0.25, 0.5))
    # batch 2: level 1 group [1,0,0,0] (acc 0.25), level 2 group [1,1,0,0] (acc 0.5)
    corr2 = torch.tensor([1, 0, 0, 0, 1, 1, 0, 0.0])
    adv2 = torch.tensor([1.0, -1, -1, -1, 1, 1, -1, -1])
    out2 = apply_hadw(adv2, corr2, groups, anchor, LAM, keys=levels)
    c1, c2 = (0.75 + 0.25) / 2, (0.25 + 0.5) / 2  # window means of each level's own accuracies
    assert out2.weights[0].item() == pytest.approx(_phi(1, 0.25, c1))
    assert out2.weights[1].item() == pytest.approx(_phi(-1, 0.25, c1))
    assert out2.weights[4].item() == pytest.approx(_phi(1, 0.5, c2))
    # a level seen for the first time in batch 2 falls back to the batch anchor mean(0.5, 0.375)
    out3 = apply_hadw(adv2, corr2, groups, anchor, LAM, keys=[1] * 4 + [3] * 4)
    c_batch = (0.5 + 0.375 + 0.375) / 3
    assert out3.weights[4].item() == pytest.approx(_phi(1, 0.5, c_batch))
    c1_now = (0.75 + 0.25 + 0.25) / 3
    assert out3.metrics["hadw/anchor"] == pytest.approx((c1_now + c_batch) / 2)  # mean C over the responses


def test_per_source_with_kalman_base_uses_each_source_prior():
    anchor = make_anchor("per_source", base="ema", alpha=0.5)
    groups = torch.tensor([0, 0, 1, 1])
    src = ["a", "a", "b", "b"]
    apply_hadw(torch.zeros(4), torch.tensor([1, 1, 0, 0.0]), groups, anchor, LAM, keys=src)  # a: 1.0, b: 0.0
    out = apply_hadw(torch.tensor([1.0, -1, 1, -1]), torch.tensor([1, 0, 1, 0.0]), groups, anchor, LAM, keys=src)
    # ema weights use the prior: source a's 1.0, source b's 0.0; p̂ = 0.5 in both groups
    assert out.weights.tolist() == pytest.approx(
        [_phi(1, 0.5, 1.0), _phi(-1, 0.5, 1.0), _phi(1, 0.5, 0.0), _phi(-1, 0.5, 0.0)]
    )


def test_per_prompt_pools_last_visits_including_degenerate_ones():
    anchor = make_anchor("per_prompt", base="window", k=10, visits=2)
    groups = torch.tensor([0, 0, 0, 0])
    ids = ["q"] * 4
    # visit 1: all wrong (degenerate); visit 2: [1,0,0,0]; visit 3: [1,1,0,0]
    out1 = apply_hadw(torch.zeros(4), torch.zeros(4), groups, anchor, LAM, keys=ids)
    assert out1.weights.tolist() == pytest.approx([LAM] * 4)
    adv = torch.tensor([1.0, -1, -1, -1])
    out2 = apply_hadw(adv, torch.tensor([1, 0, 0, 0.0]), groups, anchor, LAM, keys=ids)
    p2, c2 = 1 / 8, (0.0 + 0.25) / 2  # pooled over 2 visits; C = batch window mean
    assert out2.weights[0].item() == pytest.approx(_phi(1, p2, c2))
    out3 = apply_hadw(adv, torch.tensor([1, 1, 0, 0.0]), groups, anchor, LAM, keys=ids)
    p3, c3 = 3 / 8, (0.0 + 0.25 + 0.5) / 3  # visits=2 drops visit 1
    assert out3.weights[0].item() == pytest.approx(_phi(1, p3, c3))
    assert out3.weights[1].item() == pytest.approx(_phi(-1, p3, c3))


def test_per_prompt_first_visit_is_p_hat_and_state_is_bounded():
    anchor = make_anchor("per_prompt", visits=3, max_prompts=2)
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    out = apply_hadw(
        torch.tensor([1.0, -1, 1, -1, 0, 0]),
        torch.tensor([1, 0, 1, 0, 1, 1.0]),
        groups,
        anchor,
        LAM,
        keys=["a", "a", "b", "b", "c", "c"],
    )
    c = 4 / 6
    assert out.weights[0].item() == pytest.approx(_phi(1, 0.5, c))
    assert list(anchor.counts) == ["b", "c"]  # "a" (least recently seen) forgotten


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("per_level", {"base": "kalman", "m": 2}),
        ("per_source", {"base": "window", "k": 2}),
        ("per_prompt", {"base": "ema", "alpha": 0.3, "visits": 2}),
    ],
)
def test_keyed_state_round_trips_through_json_and_continues_identically(kind, options):
    gen = torch.Generator().manual_seed(0)
    a = make_anchor(kind, **options)
    groups = torch.arange(6).repeat_interleave(4)
    keys = [str(int(g) % 3) for g in groups]
    for _ in range(3):
        apply_hadw(
            torch.randn(24, generator=gen), torch.randint(0, 2, (24,), generator=gen).float(), groups, a, keys=keys
        )
    b = anchor_from_state(json.loads(json.dumps(a.state_dict())))
    assert b.state_dict() == a.state_dict()
    adv, corr = torch.randn(24, generator=gen), torch.randint(0, 2, (24,), generator=gen).float()
    wa = apply_hadw(adv, corr, groups, a, keys=keys).weights
    wb = apply_hadw(adv, corr, groups, b, keys=keys).weights
    assert torch.equal(wa, wb)


def test_keyed_anchor_without_keys_is_refused():
    with pytest.raises(ValueError, match="per_prompt anchor needs one key per response"):
        apply_hadw(torch.zeros(2), torch.zeros(2), torch.tensor([0, 0]), make_anchor("per_prompt"))
    with pytest.raises(ValueError, match="unknown base kind"):
        make_anchor("per_level", base="nope")
