import json

import pytest

from hadw.core import anchor_from_state, make_anchor

ACCURACIES = [0.2, 0.4, 0.6, 0.8]


@pytest.mark.parametrize(
    ("kind", "options", "used", "prior_after"),
    [
        ("window", {"k": 2}, [0.2, 0.3, 0.5, 0.7], 0.7),
        ("window", {"k": 10}, [0.2, 0.3, 0.4, 0.5], 0.5),
        ("ema", {"alpha": 0.5}, [0.2, 0.2, 0.3, 0.45], 0.625),
        ("fixed", {"value": 0.4}, [0.4, 0.4, 0.4, 0.4], 0.4),
        # warm-up (m=2): running mean 0.2, 0.3; then η_t = σ of the last 2 beliefs:
        # σ(0.2, 0.3) = 0.05 -> 0.3 + 0.05·0.3 = 0.315; σ(0.3, 0.315) = 0.0075 -> 0.315 + 0.0075·0.485
        ("kalman", {"eta": 1.0, "m": 2, "eta_min": 0.0}, [0.2, 0.2, 0.3, 0.315], 0.3186375),
    ],
)
def test_anchor_trajectories_on_hand_made_sequence(kind, options, used, prior_after):
    anchor = make_anchor(kind, **options)
    got = [anchor.observe(y) for y in ACCURACIES]
    assert got == pytest.approx(used)
    assert anchor.prior == pytest.approx(prior_after)


def test_kalman_eta_is_clipped_to_one():
    anchor = make_anchor("kalman", eta=1000.0, m=2)
    for y in (0.0, 1.0, 0.0):
        anchor.observe(y)
    anchor.observe(1.0)  # σ of beliefs is large -> η·σ ≫ 1 -> clipped gain of exactly 1
    assert anchor.last_gain == 1.0
    assert anchor.prior == pytest.approx(1.0)


def test_learned_anchors_have_no_prior_before_first_batch():
    for kind in ("window", "ema", "kalman"):
        assert make_anchor(kind).prior is None


@pytest.mark.parametrize("kind", ["window", "ema", "kalman", "fixed"])
def test_state_round_trips_through_json_and_continues_identically(kind):
    anchor = make_anchor(kind)
    for y in ACCURACIES:
        anchor.observe(y)
    restored = anchor_from_state(json.loads(json.dumps(anchor.state_dict())))
    assert [restored.observe(y) for y in (0.1, 0.9)] == [anchor.observe(y) for y in (0.1, 0.9)]
    assert restored.state_dict() == anchor.state_dict()


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="allowed: window, kalman, ema, fixed"):
        make_anchor("median")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        make_anchor("window").observe(1.5)
    with pytest.raises(ValueError, match="kind 'ema'"):
        make_anchor("window").load_state_dict(make_anchor("ema").state_dict())
