"""A step's rollout (batch + rewards + group ids), DAPO's dynamic sampling, and joining refill rounds.

DAPO refills the batch with groups whose rewards differ (degenerate groups give no gradient); the
anchor still sees every response of every round, before the filter (docs/method.md §3.1).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hadw import metrics as M
from hadw.core import GroupIndex
from hadw.data import Problem
from hadw.rewards import ItemError, RewardResult
from hadw.rollout import RolloutBatch


@dataclass
class Rollout:
    batch: RolloutBatch
    rewards: RewardResult
    group_ids: torch.Tensor  # [N] long, unique across the rounds of one step
    problems: list[Problem]  # [N] the problem each row answers
    generate_s: float
    reward_s: float

    def degenerate_groups(self) -> torch.Tensor:
        """[num_groups] bool: groups whose total rewards are all equal."""
        return GroupIndex.from_ids(self.group_ids).is_constant(self.rewards.total)

    def samples(self, count: int) -> list[dict]:
        """The first `count` responses with their prompt, gold answer and rewards, for samples.jsonl."""
        return [
            {
                "question": self.problems[i].question,
                "answer": self.problems[i].answer,
                "response": self.batch.response_texts[i],
                "reward": float(self.rewards.total[i]),
                "correct": float(self.rewards.correctness[i]),
            }
            for i in range(min(count, len(self.batch)))
        ]

    def metrics(self) -> dict[str, float]:
        r, b = self.rewards, self.batch
        out = {
            M.REWARDS_MEAN: float(r.total.mean()),
            M.SCORE_MEAN: float(r.correctness.mean()),
            M.REWARD_TIMEOUTS: float(r.num_timeouts),
            M.REWARD_ERRORS: float(r.num_errors),
            M.RESPONSE_LENGTH_MEAN: float(b.response_lengths.float().mean()),
            M.RESPONSE_CLIP_RATIO: sum(f == "length" for f in b.finish_reasons) / max(len(b), 1),
            M.TIME_GEN: self.generate_s,
            M.TIME_REWARD: self.reward_s,
        }
        levels = [p.level for p in self.problems]
        for level in sorted({lv for lv in levels if lv is not None}, key=str):
            rows = torch.tensor([lv == level for lv in levels])
            out[M.score_level(level)] = float(r.correctness[rows].mean())
        return out


def level_metrics(
    levels: list, degenerate: torch.Tensor, weights: torch.Tensor, correct: torch.Tensor
) -> dict[str, float]:
    """Per difficulty level: the share of responses in groups with no gradient (a group's responses share its flag,
    so this is the share of its groups at equal G) and the mean Φ of its correct responses in informative groups.

    levels: N levels (None: no level); degenerate, correct: [N] bool / 0-1; weights: [N] Φ."""
    out = {}
    for level in sorted({lv for lv in levels if lv is not None}, key=str):
        rows = torch.tensor([lv == level for lv in levels])
        out[M.degenerate_level(level)] = float(degenerate[rows].float().mean())
        picked = rows & ~degenerate & (correct > 0.5)
        if picked.any():  # no informative correct answer at this level this step: no Φ to report
            out[M.phi_correct_level(level)] = float(weights[picked].mean())
    return out


def select_rows(batch: RolloutBatch, rows: torch.Tensor) -> RolloutBatch:
    """The batch restricted to `rows` ([K] long indices), in that order."""
    picked = {}
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        picked[f.name] = value[rows] if isinstance(value, torch.Tensor) else [value[i] for i in rows.tolist()]
    return RolloutBatch(**picked)


def select_groups(rollout: Rollout, max_groups: int, group_size: int) -> torch.Tensor:
    """Row indices of the first `max_groups` non-degenerate groups (rows of a group stay together)."""
    index = GroupIndex.from_ids(rollout.group_ids)
    informative = (~index.is_constant(rollout.rewards.total)).nonzero().flatten()[:max_groups]
    keep = torch.isin(index.inverse, informative)
    rows = keep.nonzero().flatten()
    # Rows of one group are contiguous in engine output (row k = sample k % G of prompt k // G).
    assert len(rows) % group_size == 0
    return rows


def _pad_to(x: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    extra = width - x.shape[1]
    return F.pad(x, (extra, 0) if left else (0, extra), value=value)


def concat_rollouts(rollouts: list[Rollout], pad_id: int) -> Rollout:
    """Join refill rounds into one Rollout (prompts re-padded on the left, responses on the right)."""
    if len(rollouts) == 1:
        return rollouts[0]
    batches = [r.batch for r in rollouts]
    p = max(b.prompt_ids.shape[1] for b in batches)
    t = max(b.response_ids.shape[1] for b in batches)
    batch = RolloutBatch(
        prompt_ids=torch.cat([_pad_to(b.prompt_ids, p, pad_id, True) for b in batches]),
        prompt_mask=torch.cat([_pad_to(b.prompt_mask, p, 0, True) for b in batches]),
        response_ids=torch.cat([_pad_to(b.response_ids, t, pad_id, False) for b in batches]),
        response_mask=torch.cat([_pad_to(b.response_mask, t, 0, False) for b in batches]),
        logprobs=torch.cat([_pad_to(b.logprobs, t, 0.0, False) for b in batches]),
        finish_reasons=[f for b in batches for f in b.finish_reasons],
        prompt_index=torch.cat([b.prompt_index for b in batches]),
        response_texts=[s for b in batches for s in b.response_texts],
    )
    rewards = RewardResult(
        total=torch.cat([r.rewards.total for r in rollouts]),
        correctness=torch.cat([r.rewards.correctness for r in rollouts]),
        per_reward={k: torch.cat([r.rewards.per_reward[k] for r in rollouts]) for k in rollouts[0].rewards.per_reward},
        num_timeouts=sum(r.rewards.num_timeouts for r in rollouts),
        num_errors=sum(r.rewards.num_errors for r in rollouts),
        messages=[m for r in rollouts for m in r.rewards.messages],
        errors=_sum_counts([r.rewards.errors for r in rollouts]),
        first_errors=_first_errors(rollouts),
        failed_all=[n for n in rollouts[0].rewards.failed_all if all(n in r.rewards.failed_all for r in rollouts)],
    )
    return Rollout(
        batch,
        rewards,
        torch.cat([r.group_ids for r in rollouts]),
        [p for r in rollouts for p in r.problems],
        sum(r.generate_s for r in rollouts),
        sum(r.reward_s for r in rollouts),
    )


def _sum_counts(counts: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """{reward: {kind: n}} summed over refill rounds."""
    out: dict[str, dict[str, int]] = {}
    for per_reward in counts:
        for name, kinds in per_reward.items():
            for kind, n in kinds.items():
                out.setdefault(name, {})[kind] = out.setdefault(name, {}).get(kind, 0) + n
    return out


def _first_errors(rollouts: list[Rollout]) -> dict[str, ItemError]:
    """Each reward's first failed item over the rounds, its row counted in the joined batch."""
    out: dict[str, ItemError] = {}
    offset = 0
    for r in rollouts:
        for name, e in r.rewards.first_errors.items():
            out.setdefault(name, dataclasses.replace(e, row=e.row + offset))
        offset += len(r.batch)
    return out
