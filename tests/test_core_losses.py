import math

import pytest
import torch

from hadw.core import LOSS_PRESETS, LossSpec, kl_penalty, policy_loss
from hadw.core.losses import aggregate, sequence_clip_loss

# Two responses: the first has 2 tokens, the second 1 (one padding position holding garbage).
NEW = torch.tensor([[-0.8, -0.5], [-2.0, 123.0]])
OLD = torch.tensor([[-1.1, -0.5], [-1.5, -7.0]])
MASK = torch.tensor([[1, 1], [1, 0]])
ADV = torch.tensor([1.0, -1.0])
# Token ratios: e^{0.3} = 1.3499 (A > 0), 1 (A > 0), e^{-0.5} = 0.6065 (A < 0).
# Clip 0.2/0.2 -> per-token losses -1.2, -1.0, +0.8. Clip 0.2/0.28 -> -1.28, -1.0, +0.8.


@pytest.mark.parametrize(
    ("clip_high", "aggregation", "expected"),
    [
        (0.2, "seq-mean-token-mean", ((-1.2 - 1.0) / 2 + 0.8) / 2),
        (0.2, "token-mean", (-1.2 - 1.0 + 0.8) / 3),
        (0.2, "seq-mean-token-sum-norm", ((-1.2 - 1.0) / 2 + 0.8 / 2) / 2),
        (0.28, "token-mean", (-1.28 - 1.0 + 0.8) / 3),
        (0.28, "seq-mean-token-mean", ((-1.28 - 1.0) / 2 + 0.8) / 2),
    ],
)
def test_token_clip_loss_hand_computed(clip_high, aggregation, expected):
    spec = LossSpec("token_clip", 0.2, clip_high, aggregation)
    loss, metrics = policy_loss(NEW, OLD, ADV, MASK, spec)
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(1 / 3)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 3)


def test_gspo_uses_length_normalised_sequence_ratio():
    # s_1 = exp((0.3 + 0) / 2) = e^{0.15}, s_2 = e^{-0.5}; clip [1 - 3e-4, 1 + 4e-4]
    loss, _ = policy_loss(NEW, OLD, ADV, MASK, LOSS_PRESETS["gspo"])
    assert loss.item() == pytest.approx((-(1 + 4e-4) + (1 - 3e-4)) / 2, abs=1e-7)
    _, ratio = sequence_clip_loss(NEW, OLD, ADV, 0.2, 0.2, MASK)
    assert ratio[0, 0].item() == pytest.approx(math.exp(0.15)) and ratio[0, 1].item() == pytest.approx(math.exp(0.15))
    assert ratio[1, 0].item() == pytest.approx(math.exp(-0.5))


def test_gspo_gradient_equals_sequence_level_objective():
    gen = torch.Generator().manual_seed(0)
    new = (-torch.rand(3, 5, generator=gen)).requires_grad_()
    old = new.detach() - 0.05 * torch.randn(3, 5, generator=gen)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    adv = torch.tensor([0.7, -1.2, 0.3])
    spec = LossSpec("sequence_clip", 10.0, 10.0, "seq-mean-token-mean")  # wide clip: unclipped branch
    policy_loss(new, old, adv, mask, spec)[0].backward()
    ours = new.grad.clone()

    new.grad = None
    m = mask.float()
    s = torch.exp(((new - old) * m).sum(-1) / m.sum(-1))
    (-(adv * s).mean()).backward()
    torch.testing.assert_close(ours, new.grad)


def test_aggregation_ignores_non_finite_padding():
    loss_mat = torch.tensor([[1.0, float("inf")], [2.0, float("nan")]])
    mask = torch.tensor([[1, 0], [1, 0]])
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        assert math.isfinite(aggregate(loss_mat, mask, mode).item())
    with pytest.raises(ValueError, match="allowed: token-mean"):
        aggregate(loss_mat, mask, "sum")


def test_kl_estimators_hand_values():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-1.3])  # log r = 0.3
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(0.3)
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.045)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(math.exp(-0.3) - 1 + 0.3)


def test_kl_and_entropy_terms_enter_the_loss():
    ref = OLD.clone()
    entropy = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    base = LossSpec("token_clip", 0.2, 0.2, "token-mean")
    with_terms = LossSpec("token_clip", 0.2, 0.2, "token-mean", kl_coef=0.5, kl_estimator="k1", entropy_coef=0.1)
    plain, _ = policy_loss(NEW, OLD, ADV, MASK, base)
    full, metrics = policy_loss(NEW, OLD, ADV, MASK, with_terms, ref_logprobs=ref, entropy=entropy)
    kl_k1 = (0.3 + 0.0 - 0.5) / 3
    assert full.item() == pytest.approx(plain.item() + 0.5 * kl_k1 - 0.1 * 2.0, abs=1e-6)
    assert metrics["actor/entropy"] == pytest.approx(2.0)


def test_presets_carry_paper_table_8_clips():
    assert (LOSS_PRESETS["grpo"].clip_low, LOSS_PRESETS["grpo"].clip_high) == (0.2, 0.2)
    assert (LOSS_PRESETS["gspo"].clip_low, LOSS_PRESETS["gspo"].clip_high) == (3e-4, 4e-4)
    assert (LOSS_PRESETS["dapo"].clip_low, LOSS_PRESETS["dapo"].clip_high) == (0.2, 0.28)
    assert LOSS_PRESETS["dapo"].aggregation == "token-mean"


def test_overlong_penalty_dapo_shape():
    from hadw.core.shaping import overlong_penalty

    lengths = torch.tensor([10, 12, 13, 15, 16, 20])
    # L_max = 16, buffer 4: free up to 12, then linear down to −1 at 16 and beyond
    got = overlong_penalty(lengths, max_length=16, buffer=4, factor=1.0)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, -0.25, -0.75, -1.0, -1.0]))


def test_policy_loss_metrics_stay_tensors_without_host_syncs(monkeypatch):
    # A metric read as a Python number is a host sync (a GPU stall); the trainer reads them all at once.
    def no_sync(*_):
        raise AssertionError("policy_loss converted a tensor to a Python value")

    for name in ("item", "tolist", "__float__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, no_sync)
    spec = LossSpec("token_clip", 0.2, 0.2, "token-mean", kl_coef=0.1)
    _, metrics = policy_loss(NEW, OLD, ADV, MASK, spec, ref_logprobs=OLD, entropy=torch.ones(2, 2))
    monkeypatch.undo()
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in metrics.values())
    # Ratio statistics over the 3 real tokens only (the padding's ratio e^{130} is ignored).
    assert metrics["actor/ratio_max"].item() == pytest.approx(math.exp(0.3))
    assert metrics["actor/ratio_min"].item() == pytest.approx(math.exp(-0.5))
    assert metrics["actor/ratio_mean"].item() == pytest.approx((math.exp(0.3) + 1 + math.exp(-0.5)) / 3)
    assert metrics["actor/ppo_kl"].item() == pytest.approx((-0.3 + 0 + 0.5) / 3)


def test_policy_loss_metrics_of_an_all_masked_batch_are_neutral():
    _, metrics = policy_loss(NEW, OLD, ADV, torch.zeros(2, 2, dtype=torch.long), LOSS_PRESETS["grpo"])
    assert [metrics[f"actor/ratio_{s}"].item() for s in ("mean", "min", "max")] == [1.0, 1.0, 1.0]
    assert metrics["actor/pg_clipfrac"].item() == 0.0


def test_dr_grpo_normaliser_is_a_constant_not_the_batch_longest():
    """Issue 14: Dr. GRPO divides by a constant L (algorithm.norm_length, default rollout.max_new_tokens), so
    the same responses give the same loss whether or not the batch also holds a longer one (extra padding)."""
    from hadw.train.config import load_config

    spec = load_config(None, ["algorithm.aggregation=seq-mean-token-sum-norm", "rollout.max_new_tokens=12"])
    spec = spec.algorithm.loss_spec(12)
    assert spec.norm_length == 12
    loss = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    wide_loss, wide_mask = torch.nn.functional.pad(loss, (0, 5)), torch.nn.functional.pad(mask, (0, 5))
    short = aggregate(loss, mask, "seq-mean-token-sum-norm", spec.norm_length)
    assert short == aggregate(wide_loss, wide_mask, "seq-mean-token-sum-norm", spec.norm_length)
    assert short.item() == pytest.approx((3 / 12 + 3 / 12) / 2)
    assert load_config(None, ["algorithm.norm_length=7"]).algorithm.loss_spec(12).norm_length == 7
