"""Accuracy of a model on a list of Problems: greedy, avg@k and unbiased pass@k, by source and level.

The trainer's periodic evaluation and `hadw eval` both call `evaluate`; it never touches an anchor.
`evaluate_sources` runs it over several data sources (each with its own template and verifier), greedy
and sampled, and merges the results into one table: bucket -> {count, greedy, avg@k, pass@j}.

Every completion is kept as a record (prompt, completion, extracted answer, gold, score, finish reason,
tokens) so a zero accuracy can be looked at (`hadw eval --samples FILE`), and summarised by
`completion_stats`: the share with an extracted answer, the share cut at the length limit, tokens/s.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import comb

import torch

from hadw import metrics as M
from hadw.data import DatasetError, Problem, render_prompt
from hadw.data.answers import extract_answer
from hadw.data.templates import prompt_token_limit, prompt_too_long
from hadw.eval.data import EvalSource
from hadw.eval.memory import peak_memory_metrics
from hadw.rewards import RewardRecipe, score_problems
from hadw.rewards.verifiers import to_int
from hadw.rollout import HFRolloutEngine, RolloutEngine, SamplingParams
from hadw.rollout.batch import completion_ids


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
    samples: list[dict] = field(default_factory=list)  # one record per completion (module docstring)
    seconds: float = 0.0  # generation wall time
    greedy: bool = True  # temperature 0: the mean is called "greedy", else "avg@k"
    reward_errors: int = 0  # completions the reward failed on (raised, timed out, bad score): scored 0
    # Set when the reward failed on every completion ("kind: message" of its first failure): the scores are the
    # reward's failure, not the model's, so the summary's accuracies are NaN (shown as an error, never 0.000).
    reward_failure: str | None = None

    @property
    def mean_key(self) -> str:
        """ "greedy" for one greedy answer per problem, else "avg@k" (hadw.metrics names)."""
        return M.GREEDY if self.k == 1 and self.greedy else M.avg_at(self.k)

    @property
    def accuracy(self) -> float:
        return self.summary[M.ALL][self.mean_key]

    def level_accuracy(self) -> dict[str, float]:
        return {key: row[self.mean_key] for key, row in self.summary.items() if "/L" in key}


def _summarise(correct: list[list[float]], problems: Sequence[Problem], pass_ks: Sequence[int], mean_key: str) -> dict:
    """bucket ("all", "<source>", "<source>/L<level>") -> {count, <mean_key>: mean correctness, pass@j}."""
    buckets: dict[str, list[int]] = defaultdict(list)
    for i, problem in enumerate(problems):
        buckets["all"].append(i)
        buckets[problem.source].append(i)
        if problem.level is not None:
            buckets[f"{problem.source}/L{problem.level}"].append(i)
    summary = {}
    for key, rows in sorted(buckets.items()):
        n = len(correct[rows[0]])
        entry = {M.COUNT: float(len(rows)), mean_key: sum(sum(correct[i]) / n for i in rows) / len(rows)}
        for k in pass_ks:
            if k <= n:
                entry[M.pass_at(k)] = sum(pass_at_k(n, int(sum(correct[i])), k) for i in rows) / len(rows)
        summary[key] = entry
    return summary


def extracted_answer(completion: str, reward: str) -> str | None:
    """The answer the verifier reads: the last \\boxed{} or "#### N"; for `exact` also a bare integer."""
    answer = extract_answer(completion)
    if answer is None and reward == "exact" and to_int(completion) is not None:
        return completion.strip()
    return answer


def completion_stats(samples: Sequence[dict], seconds: float) -> dict[str, float]:
    """completions, answered (share with an extracted answer), scored (share the reward scored above 0), truncated
    (share stopped by the length limit), tokens (generated), tokens_per_s (over the generation wall time)."""
    n = max(len(samples), 1)
    tokens = sum(s["tokens"] for s in samples)
    return {
        "completions": float(len(samples)),
        "answered": sum(s["extracted"] is not None for s in samples) / n,
        "scored": sum(s["score"] > 0 for s in samples) / n,
        "truncated": sum(s["finish_reason"] == "length" for s in samples) / n,
        "tokens": float(tokens),
        "tokens_per_s": tokens / seconds if seconds > 0 else float("nan"),
    }


def _refuse_long_prompts(problems: Sequence[Problem], prompts: Sequence[str], tokenizer, model_config) -> None:
    """DatasetError naming the first row whose prompt is longer than the model's whole context, found before any
    prompt is tokenized for generation: one 20 MB row took 150 s and 10 GB (issue 35). Refused, not skipped as in
    `hadw train` (a score over fewer rows than asked for would pass for the benchmark's), so the bar is the context
    itself: a prompt that fits but leaves less than max_new_tokens is the model's to handle, as before."""
    limit = prompt_token_limit(model_config, 0)
    for problem, text in zip(problems, prompts, strict=True):
        length = prompt_too_long(text, tokenizer, limit)
        if length is not None:
            raise DatasetError(
                f"{problem.where or problem.uid}: the prompt is {length}; allowed: at most {limit} tokens (the "
                "model's context, max_position_embeddings); shorten the row or leave it out"
            )


def evaluate(
    model,
    tokenizer,
    problems: Sequence[Problem],
    template: str = "plain",
    reward: str | RewardRecipe = "exact",
    k: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_new_tokens: int = 16,
    batch_size: int = 64,
    seed: int = 0,
    engine: RolloutEngine | None = None,
    use_chat_template: bool | str = "auto",
    pass_ks: Sequence[int] = (),
    progress=None,
) -> EvalReport:
    """Sample k responses per problem (greedy when temperature = 0) and score them with `reward`: a reward name, or
    a run's RewardRecipe, called exactly as training calls it (hadw.rewards.score_problems: the prompts and every
    data column by its own name).

    progress: an optional callable(advance: int) called as problems finish (all k of their responses).
    """
    recipe = reward if isinstance(reward, RewardRecipe) else RewardRecipe(reward)
    specs = [recipe.spec()]
    engine = engine or HFRolloutEngine(model, tokenizer)
    prompts = [render_prompt(p, template, tokenizer, use_chat_template) for p in problems]
    _refuse_long_prompts(problems, prompts, tokenizer, getattr(model, "config", None))
    correct: list[list[float]] = []
    samples: list[dict] = []
    seconds, reward_errors, first_failure = 0.0, 0, None
    for start in range(0, len(problems), batch_size):
        chunk = prompts[start : start + batch_size]
        ids = [tokenizer(text, add_special_tokens=False).input_ids for text in chunk]
        params = SamplingParams(
            n=k, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed + start
        )
        t0 = time.perf_counter()
        with torch.no_grad():
            batch = engine.generate(ids, params, on_rows_done=_per_problem(progress, k))
        seconds += time.perf_counter() - t0
        rows = [problems[start + i // k] for i in range(len(batch.response_texts))]
        result = score_problems(
            batch.response_texts, rows, template, specs, recipe.name, recipe.timeout_s, recipe.completion_format,
            completion_ids(batch),
        )  # fmt: skip
        reward_errors += result.num_errors + result.num_timeouts
        failed = result.first_errors.get(recipe.name)  # shown on its sample (kind: message), counted in the notes
        if failed is not None and first_failure is None:
            first_failure = f"{failed.kind}: {failed.message}"
        scores = result.correctness.tolist()
        correct += [scores[i * k : (i + 1) * k] for i in range(len(chunk))]
        lengths = batch.response_mask.sum(dim=1).tolist()
        for i, text in enumerate(batch.response_texts):
            problem = problems[start + i // k]
            samples.append({
                "source": problem.source, "level": problem.level, "index": start + i // k, "sample": i % k,
                "temperature": temperature, "prompt": chunk[i // k], "completion": text,
                "extracted": extracted_answer(text, recipe.name), "gold": problem.answer, "score": scores[i],
                "finish_reason": batch.finish_reasons[i], "tokens": int(lengths[i]),
            })  # fmt: skip
            if failed is not None and failed.row == i:
                samples[-1]["reward_error"] = f"{failed.kind}: {failed.message}"
    mean_key = M.GREEDY if k == 1 and temperature == 0 else M.avg_at(k)
    summary = _summarise(correct, problems, pass_ks, mean_key)
    failure = first_failure if samples and reward_errors >= len(samples) else None
    if failure is not None:  # every score is the reward's failure: no accuracy at all, never a 0.000
        summary = {key: {m: v if m == M.COUNT else math.nan for m, v in row.items()} for key, row in summary.items()}
        summary[M.ALL][M.REWARD_FAILED] = 1.0
    report = EvalReport(correct, list(problems), k, summary, samples, seconds, temperature == 0, reward_errors)
    report.reward_failure = failure
    return report


def _per_problem(progress, k: int):
    """Turn the engine's finished-response counts into finished-problem counts (k responses each)."""
    if progress is None:
        return None
    rows = reported = 0

    def on_rows_done(n: int) -> None:
        nonlocal rows, reported
        rows += n
        if rows // k > reported:
            progress(rows // k - reported)
            reported = rows // k

    return on_rows_done


@dataclass
class EvalResult:
    """Merged table of `evaluate_sources`: bucket ("all", "source", "source/Lx") -> metric -> value.

    temperature is None for a greedy-only run (k = 1): no sample was drawn at any temperature.
    stats: "greedy" (and "sampled" when k > 1) -> completion_stats, plus "memory" -> peak_memory_metrics.
    """

    buckets: dict[str, dict[str, float]]
    k: int
    temperature: float | None
    sources: list[str]
    greedy: list[list[float]]  # [num_problems, 1] greedy correctness, problems in source order
    sampled: list[list[float]] | None  # [num_problems, k] at `temperature`, None when k = 1
    stats: dict[str, dict[str, float]] = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)  # every completion, greedy then sampled, per source
    # source name -> how it was prompted and scored: {"template", "reward", "max_new_tokens"}
    recipes: dict[str, dict] = field(default_factory=dict)
    # "<source> (<mode>)" -> the first failure of a reward that failed on every completion there ("kind: message");
    # that source's buckets, and "all", hold NaN accuracies: an error, never a score
    reward_failures: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "k": self.k,
            "temperature": self.temperature,
            "sources": self.sources,
            "recipes": self.recipes,
            "buckets": self.buckets,
            "stats": self.stats,
            "reward_failures": self.reward_failures,
        }


def evaluate_sources(
    model,
    tokenizer,
    sources: Sequence[EvalSource],
    k: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    pass_ks: Sequence[int] = (),
    batch_size: int = 64,
    seed: int = 0,
    use_chat_template: bool | str = "auto",
    progress=None,
    engine: RolloutEngine | None = None,
) -> EvalResult:
    """Greedy accuracy, and with k > 1 avg@k and pass@j (j in pass_ks, j ≤ k) at `temperature`.

    progress: optional callable(advance: int), called as problems finish (each problem is visited once
    greedily and once more when sampling).
    """
    engine = engine or HFRolloutEngine(model, tokenizer)
    problems: list[Problem] = []
    greedy: list[list[float]] = []
    sampled: list[list[float]] = []
    runs: dict[str, tuple[list[dict], float]] = {"greedy": ([], 0.0), "sampled": ([], 0.0)}
    sample = k > 1
    if not sample:
        pass_ks = ()

    reward_errors = {"greedy": 0, "sampled": 0}
    failures: dict[str, str] = {}
    failed_buckets: set[str] = set()  # the problems' own source names: the table's bucket keys

    def run(mode: str, report: EvalReport, source: str) -> list[list[float]]:
        records, seconds = runs[mode]
        runs[mode] = (records + [{"mode": mode, **r} for r in report.samples], seconds + report.seconds)
        reward_errors[mode] += report.reward_errors
        if report.reward_failure is not None:
            failures[f"{source} ({mode})"] = report.reward_failure
            failed_buckets.update(p.source for p in report.problems)
        return report.correct

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
        report = evaluate(model, tokenizer, source.problems, k=1, temperature=0.0, **common)
        greedy += run("greedy", report, source.name)
        if sample:
            sampled += run(
                "sampled",
                evaluate(model, tokenizer, source.problems, k=k, temperature=temperature, top_p=top_p, **common),
                source.name,
            )
    table = {
        key: {M.COUNT: row[M.COUNT], M.GREEDY: row[M.GREEDY]}
        for key, row in _summarise(greedy, problems, (), M.GREEDY).items()
    }
    if sample:
        for key, row in _summarise(sampled, problems, pass_ks, M.avg_at(k)).items():
            table[key][M.avg_at(k)] = row[M.avg_at(k)]
            table[key] |= {name: value for name, value in row.items() if name.startswith("pass@")}
    stats = {mode: completion_stats(*runs[mode]) for mode in (("greedy", "sampled") if sample else ("greedy",))}
    for mode in stats:
        if reward_errors[mode]:  # a failing reward is shown (completion_notes), never a silent row of zeros
            stats[mode]["reward_errors"] = float(reward_errors[mode])
    stats["memory"] = peak_memory_metrics()
    _mark_failed(table, failed_buckets)
    return EvalResult(
        table,
        k,
        temperature if sample else None,
        [s.name for s in sources],
        greedy,
        sampled if sample else None,
        stats,
        runs["greedy"][0] + runs["sampled"][0],
        {
            s.name: {"template": s.template, "reward": _name(s.reward), "max_new_tokens": s.max_new_tokens}
            for s in sources
        },
        failures,
    )


def _name(reward: str | RewardRecipe) -> str:
    return reward.name if isinstance(reward, RewardRecipe) else reward


def _mark_failed(table: dict[str, dict[str, float]], sources: set[str]) -> None:
    """NaN for every accuracy of the failed sources' buckets and of "all" (it averages them in): the reward failed
    on every completion there, so no number is the model's. The count stays; REWARD_FAILED marks the bucket."""
    if not sources:
        return
    for key, row in table.items():
        if key == M.ALL or key in sources or key.rsplit("/L", 1)[0] in sources:
            table[key] = {m: v if m == M.COUNT else math.nan for m, v in row.items()} | {M.REWARD_FAILED: 1.0}
