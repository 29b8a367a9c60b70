"""Accuracy of a model on a list of Problems: greedy, avg@k and unbiased pass@k, by source and level.

The trainer's periodic evaluation and `hadw eval` both call `evaluate`; it never touches an anchor.
`evaluate_sources` runs it over several data sources (each with its own template and verifier), greedy
and sampled, and merges the results into one table: bucket -> {count, greedy, avg@k, pass@j}.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import comb

import torch

from hadw.data import Problem, render_prompt
from hadw.eval.data import EvalSource
from hadw.rewards import RewardSpec, score
from hadw.rollout import HFRolloutEngine, RolloutEngine, SamplingParams


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021): 1 − C(n−c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


@dataclass
class EvalReport:
    """Per-problem correctness [num_problems, k] and summaries by group ("all", "source", "source/Lx")."""

    correct: list[list[float]]
    problems: list[Problem]
    k: int
    summary: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        return self.summary["all"]["avg@k"]

    def level_accuracy(self) -> dict[str, float]:
        return {key: row["avg@k"] for key, row in self.summary.items() if "/L" in key}


def _summarise(correct: list[list[float]], problems: Sequence[Problem], pass_ks: Sequence[int]) -> dict:
    buckets: dict[str, list[int]] = defaultdict(list)
    for i, problem in enumerate(problems):
        buckets["all"].append(i)
        buckets[problem.source].append(i)
        if problem.level is not None:
            buckets[f"{problem.source}/L{problem.level}"].append(i)
    summary = {}
    for key, rows in sorted(buckets.items()):
        n = len(correct[rows[0]])
        entry = {"count": float(len(rows)), "avg@k": sum(sum(correct[i]) / n for i in rows) / len(rows)}
        for k in pass_ks:
            if k <= n:
                entry[f"pass@{k}"] = sum(pass_at_k(n, int(sum(correct[i])), k) for i in rows) / len(rows)
        summary[key] = entry
    return summary


def evaluate(
    model,
    tokenizer,
    problems: Sequence[Problem],
    template: str = "plain",
    reward: str = "exact",
    k: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_new_tokens: int = 16,
    batch_size: int = 64,
    seed: int = 0,
    engine: RolloutEngine | None = None,
    use_chat_template: bool | str = "auto",
    pass_ks: Sequence[int] = (1,),
    progress=None,
) -> EvalReport:
    """Sample k responses per problem (greedy when temperature = 0) and score them with `reward`.

    progress: an optional callable(advance: int) called after each batch of problems.
    """
    engine = engine or HFRolloutEngine(model, tokenizer)
    prompts = [render_prompt(p, template, tokenizer, use_chat_template) for p in problems]
    correct: list[list[float]] = []
    for start in range(0, len(problems), batch_size):
        chunk = prompts[start : start + batch_size]
        ids = [tokenizer(text, add_special_tokens=False).input_ids for text in chunk]
        params = SamplingParams(
            n=k, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed + start
        )
        with torch.no_grad():
            batch = engine.generate(ids, params)
        answers = [problems[start + i // k].answer for i in range(len(batch.response_texts))]
        result = score(batch.response_texts, answers, [RewardSpec(reward)], correctness=reward)
        correct += result.correctness.view(len(chunk), k).tolist()
        if progress is not None:
            progress(len(chunk))
    return EvalReport(correct, list(problems), k, _summarise(correct, problems, pass_ks))


@dataclass
class EvalResult:
    """Merged table of `evaluate_sources`: bucket ("all", "source", "source/Lx") -> metric -> value."""

    buckets: dict[str, dict[str, float]]
    k: int
    temperature: float
    sources: list[str]
    greedy: list[list[float]]  # [num_problems, 1] greedy correctness, problems in source order
    sampled: list[list[float]] | None  # [num_problems, k] at `temperature`, None when k = 1

    def to_dict(self) -> dict:
        return {"k": self.k, "temperature": self.temperature, "sources": self.sources, "buckets": self.buckets}


def evaluate_sources(
    model,
    tokenizer,
    sources: Sequence[EvalSource],
    k: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    pass_ks: Sequence[int] = (1,),
    batch_size: int = 64,
    seed: int = 0,
    use_chat_template: bool | str = "auto",
    progress=None,
    engine: RolloutEngine | None = None,
) -> EvalResult:
    """Greedy accuracy, and with k > 1 avg@k and pass@j (j in pass_ks, j ≤ k) at `temperature`.

    progress: optional callable(advance: int), called with the number of problems done in each batch
    (each problem is visited once greedily and once more when sampling).
    """
    engine = engine or HFRolloutEngine(model, tokenizer)
    problems: list[Problem] = []
    greedy: list[list[float]] = []
    sampled: list[list[float]] = []
    sample = k > 1
    if not sample:
        pass_ks = ()
    for source in sources:
        common = dict(
            template=source.template,
            reward=source.reward,
            max_new_tokens=source.max_new_tokens,
            batch_size=batch_size,
            seed=seed,
            engine=engine,
            use_chat_template=use_chat_template,
            progress=progress,
        )
        problems += source.problems
        greedy += evaluate(model, tokenizer, source.problems, k=1, temperature=0.0, **common).correct
        if sample:
            sampled += evaluate(
                model, tokenizer, source.problems, k=k, temperature=temperature, top_p=top_p, **common
            ).correct
    table = {
        key: {"count": row["count"], "greedy": row["avg@k"]} for key, row in _summarise(greedy, problems, ()).items()
    }
    if sample:
        for key, row in _summarise(sampled, problems, pass_ks).items():
            table[key][f"avg@{k}"] = row["avg@k"]
            table[key] |= {name: value for name, value in row.items() if name.startswith("pass@")}
    return EvalResult(table, k, temperature, [s.name for s in sources], greedy, sampled if sample else None)
