"""Combine several rewards into one total, and single out the correctness signal HA-DW reads.

total[i]       = sum_k weight_k * reward_k(completion_i, answer_i)     (the base algorithm's advantage input)
correctness[i] = the designated correctness reward (0/1)                (HA-DW's p-hat and batch accuracy)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hadw.rewards.base import (
    DEFAULT_TIMEOUT_S,
    MAX_MESSAGES,
    OUT_OF_RANGE,
    ItemError,
    ItemScores,
    RewardFn,
    run_reward,
)

if TYPE_CHECKING:  # torch is imported inside score(): pool workers import this package and start faster
    import torch

    from hadw.data import Problem


@dataclass(frozen=True)
class RewardSpec:
    """One term of the total reward: a registered reward name (or an explicit fn) and its weight."""

    name: str
    weight: float = 1.0
    fn: RewardFn | None = None  # None: look `name` up in the registry


@dataclass(frozen=True)
class RewardRecipe:
    """How the 0/1 correctness reward is called: one recipe for training and for every evaluation of the run
    (the trainer's own, `hadw eval`, `hadw probe`), so a reward scores the same completion the same way everywhere.

    name: a registered reward or an import path; isolated: an import path that is a per-item f(completion, answer)
    for the verifier pool (reward.isolated); completion_format: text | messages (reward.completion_format);
    timeout_s: per item (reward.timeout_s)."""

    name: str
    isolated: bool = False
    completion_format: str = "text"
    timeout_s: float | None = DEFAULT_TIMEOUT_S

    @staticmethod
    def from_config(reward: Mapping[str, Any]) -> RewardRecipe:
        """The recipe of a run's `reward` section (a Config's, or a config.yaml's as a dict): its correctness
        reward (default: the first of `functions`), called as the run calls it."""
        name = reward.get("correctness") or reward["functions"][0]
        timeout = reward.get("timeout_s", DEFAULT_TIMEOUT_S)
        return RewardRecipe(
            str(name),
            name in (reward.get("isolated") or ()),
            str(reward.get("completion_format") or "text"),
            None if timeout is None else float(timeout),
        )

    def spec(self) -> RewardSpec:
        """The recipe as the one weighted term of a total (weight 1)."""
        from hadw.rewards.loader import resolve_reward

        return RewardSpec(self.name, 1.0, resolve_reward(self.name, self.isolated))


@dataclass(frozen=True)
class RewardResult:
    """total, correctness and each per_reward value: float32 tensors of shape [N]."""

    total: torch.Tensor
    correctness: torch.Tensor
    per_reward: dict[str, torch.Tensor]
    num_timeouts: int
    num_errors: int
    messages: list[str] = field(default_factory=list)  # first few error / timeout messages
    errors: dict[str, dict[str, int]] = field(default_factory=dict)  # reward -> failed items by kind
    first_errors: dict[str, ItemError] = field(default_factory=dict)  # reward -> its first failed item
    failed_all: list[str] = field(default_factory=list)  # rewards whose every item failed


def score(
    completions: list[str],
    answers: list[str],
    specs: list[RewardSpec] | None = None,
    correctness: str = "math",
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    prompts: list[str] | None = None,
    columns: dict[str, list] | None = None,
    completion_format: str = "text",
    extra: Mapping[str, Any] | None = None,
) -> RewardResult:
    """Score N completions against their gold answers.

    specs: the weighted terms of `total` (default: [RewardSpec(correctness, 1.0)]). correctness: the name
    of the 0/1 reward HA-DW uses; it is evaluated even when it is not one of the specs, and a spec of the
    same name is evaluated once. A failing item scores 0 in that reward and is counted by kind, never raised;
    a correctness score other than 0 / 1 is such an item (out of range).
    prompts, columns: what rewards with TRL's signature receive besides the completions (loader.py);
    completion_format: how they receive the completions, text or (chat) messages.
    """
    import torch

    from hadw.rewards.loader import TRLReward, resolve_reward

    specs = specs if specs is not None else [RewardSpec(correctness)]
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate reward names in specs: {names}")
    fns = {spec.name: spec.fn or resolve_reward(spec.name) for spec in specs}
    if correctness not in fns:
        fns[correctness] = resolve_reward(correctness)

    results: dict[str, ItemScores] = {}
    for name, fn in fns.items():
        if isinstance(fn, TRLReward):
            results[name] = fn.run(completions, answers, prompts, columns, timeout_s, completion_format, extra)
        else:
            results[name] = run_reward(fn, completions, answers, timeout_s)
    results[correctness] = _binary(results[correctness], correctness)
    per_reward = {
        name: torch.tensor(r.scores, dtype=torch.float32).reshape(len(completions)) for name, r in results.items()
    }
    total = torch.zeros(len(completions), dtype=torch.float32)
    for spec in specs:
        total += spec.weight * per_reward[spec.name]
    return RewardResult(
        total,
        per_reward[correctness],
        per_reward,
        sum(r.num_timeouts for r in results.values()),
        sum(r.num_errors for r in results.values()),
        [f"{name}: {m}" for name, r in results.items() for m in r.messages][:MAX_MESSAGES],
        errors={name: dict(r.kinds) for name, r in results.items() if r.kinds},
        first_errors={name: r.first_error for name, r in results.items() if r.first_error is not None},
        failed_all=[name for name, r in results.items() if r.all_failed],
    )


def score_problems(
    completions: list[str],
    problems: Sequence[Problem],
    template: str,
    specs: list[RewardSpec],
    correctness: str,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    completion_format: str = "text",
    completion_ids: list[list[int]] | None = None,
    trainer_state: Any = None,
) -> RewardResult:
    """score() of completion i against problems[i]: the one way hadw calls rewards, in training and in every
    evaluation. Rewards with TRL's signature get the prompts (the template filled in), every column of the
    rows by its own name (loader.reward_inputs), and as TRL 1.x passes them `completion_ids` (each completion's
    token ids) and `trainer_state` (loader.RewardState in training, None elsewhere); so a reward that names its
    gold column (`gold`, `solution`) scores a completion identically wherever it is scored."""
    from hadw.rewards.loader import reward_inputs

    answers = [p.answer for p in problems]
    prompts, columns = reward_inputs(problems, template)
    if completion_ids is not None:
        columns.setdefault("completion_ids", completion_ids)  # a data column of that name stays the data's
    extra = {"trainer_state": trainer_state}
    return score(completions, answers, specs, correctness, timeout_s, prompts, columns, completion_format, extra)


def _binary(result: ItemScores, name: str) -> ItemScores:
    """The correctness reward with every score that is not 0 or 1 made an item error (out of range, scored
    0): HA-DW reads it as success / failure."""
    failures = [e for e in [result.first_error] if e is not None]  # keep the reward's own first failure
    bad = [j for j, v in enumerate(result.scores) if v not in (0.0, 1.0)]
    if not bad:
        return result
    scores = [0.0 if j in set(bad) else v for j, v in enumerate(result.scores)]
    kinds = dict(result.kinds)
    kinds[OUT_OF_RANGE] = kinds.get(OUT_OF_RANGE, 0) + len(bad)
    message = f"correctness score {result.scores[bad[0]]:g} is not 0 or 1 (reward.correctness={name!r})"
    first = min([*failures, ItemError(bad[0], OUT_OF_RANGE, message)], key=lambda e: e.row)
    return ItemScores(
        scores,
        result.num_timeouts,
        result.num_errors + len(bad),
        [*result.messages, message],
        kinds,
        first,
    )
