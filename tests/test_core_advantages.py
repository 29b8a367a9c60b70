import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hadw.core import compute_advantages


def _binary_group(num_correct: int, size: int) -> torch.Tensor:
    return torch.tensor([1.0] * num_correct + [0.0] * (size - num_correct))


@pytest.mark.parametrize(
    ("correct", "size", "adv_correct", "adv_wrong"),
    [(1, 8, 2.65, -0.38), (9, 128, 3.64, -0.28), (7, 8, 0.38, -2.65), (118, 128, 0.29, -3.44)],
)
def test_figure_1b_population_std_advantages(correct, size, adv_correct, adv_wrong):
    rewards = _binary_group(correct, size)
    out = compute_advantages(rewards, torch.zeros(size, dtype=torch.long), "grpo")
    assert out.advantages[0].item() == pytest.approx(adv_correct, abs=0.005)
    assert out.advantages[-1].item() == pytest.approx(adv_wrong, abs=0.005)
    assert out.group_mean[0].item() == pytest.approx(correct / size)


def test_sample_std_differs_from_population_by_bessel_factor():
    rewards = _binary_group(1, 8)
    ids = torch.zeros(8, dtype=torch.long)
    pop = compute_advantages(rewards, ids, "grpo", std="population").advantages
    sample = compute_advantages(rewards, ids, "grpo", std="sample").advantages
    torch.testing.assert_close(sample, pop * math.sqrt(7 / 8))


def test_non_contiguous_unequal_groups_and_degenerate_mask():
    # group 5: rewards 1, 0, 0 (interleaved); group 2: 1, 1 (degenerate); group 9: one response.
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.5])
    ids = torch.tensor([5, 2, 5, 2, 5, 9])
    out = compute_advantages(rewards, ids, "grpo")
    std = math.sqrt(2 / 9)  # population std of (1, 0, 0)
    expected = torch.tensor([(2 / 3) / std, 0.0, -(1 / 3) / std, 0.0, -(1 / 3) / std, 0.0])
    torch.testing.assert_close(out.advantages, expected)
    assert out.degenerate.tolist() == [False, True, False, True, False, True]


def test_drgrpo_and_rloo_hand_values():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    ids = torch.tensor([0, 0, 0, 0])
    torch.testing.assert_close(compute_advantages(rewards, ids, "drgrpo").advantages, rewards - 0.5)
    # leave-one-out: baseline of a correct response is 1/3, of a wrong one 2/3
    torch.testing.assert_close(
        compute_advantages(rewards, ids, "rloo").advantages, torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    )


def test_grpo_batch_std_uses_whole_batch_std():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    ids = torch.tensor([0, 0, 1, 1, 1, 1])
    batch_std = rewards.std(correction=0)
    out = compute_advantages(rewards, ids, "grpo_batch_std").advantages
    torch.testing.assert_close(out, torch.tensor([0.5, -0.5, 0.25, 0.25, 0.25, -0.75]) / batch_std)


def test_near_zero_std_is_floored_not_inflated():
    rewards = torch.tensor([0.5, 0.5 + 1e-9], dtype=torch.float64)
    out = compute_advantages(rewards, torch.tensor([0, 0]), "grpo", std_floor=1e-3)
    assert out.advantages.abs().max() < 1e-5


def test_unknown_estimator_lists_allowed():
    with pytest.raises(ValueError, match="allowed: drgrpo, grpo, grpo_batch_std, rloo"):
        compute_advantages(torch.zeros(2), torch.zeros(2, dtype=torch.long), "ppo")


groups = st.lists(st.lists(st.sampled_from([0.0, 1.0, 0.25]), min_size=1, max_size=9), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(groups=groups, seed=st.integers(0, 10_000), estimator=st.sampled_from(["grpo", "drgrpo", "rloo"]))
def test_permutation_and_relabelling_invariance(groups, seed, estimator):
    rewards = torch.tensor([r for g in groups for r in g])
    ids = torch.tensor([i for i, g in enumerate(groups) for _ in g])
    base = compute_advantages(rewards, ids, estimator).advantages
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(rewards), generator=gen)
    relabel = torch.randperm(len(groups), generator=gen) * 7 + 3  # new ids, new order
    permuted = compute_advantages(rewards[perm], relabel[ids][perm], estimator).advantages
    torch.testing.assert_close(permuted, base[perm])
    # advantages sum to zero inside every group for these centred estimators
    sums = torch.zeros(len(groups)).index_add_(0, ids, base)
    torch.testing.assert_close(sums, torch.zeros(len(groups)), atol=1e-5, rtol=0)
