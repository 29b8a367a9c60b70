"""Where a paired difference's variance comes from: evaluation sampling (from each run's per-problem results) and
training; and one run's logs as compare reads them (RunLog)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hadw import metrics as M
from hadw.experiments.stats import (
    VarianceSplit,
    eval_sampling_variance,
    variance_split,
)


@dataclass
class RunLog:
    arm: str
    seed: int
    run_dir: Path
    final: dict[str, float] | None  # final_eval.json flattened to val/<bucket>/<metric> (None: not finished)
    steps: list[dict]  # per-step records of metrics.jsonl
    problems: list[dict] | None = None  # final_eval_problems.jsonl (hadw.metrics.eval_problem_rows); None: none
    config_hash: str | None = None  # config_hash of its config.yaml (path-free; None: no config.yaml)


def bucket_rows(rows: Sequence[dict], bucket: str) -> list[dict]:
    """The per-problem rows (final_eval_problems.jsonl) of one summary bucket: "all", "<source>" or
    "<source>/L<level>"."""
    if bucket == M.ALL:
        return list(rows)
    return [r for r in rows if bucket in (r.get("source"), f"{r.get('source')}/L{r.get('level')}")]


def problem_means(log: RunLog, key: str) -> tuple[list, np.ndarray] | str:
    """(problem ids, [m] per-problem mean scores) of the bucket of final key `key`, or why there are none: the greedy
    scores for greedy, the k sampled ones (data.eval_samples) for avg@k. Used only when they reproduce the run's
    final value (their mean = final_eval.json's, to 1e-9): so never for pass@k."""
    if log.problems is None:
        return f"{log.arm} seed {log.seed} has no {M.FINAL_EVAL_PROBLEMS_FILE} (a run made before hadw kept one)"
    bucket, metric = M.split_val_key(key)
    field = "scores" if metric == M.GREEDY else "sampled"
    rows = bucket_rows(log.problems, bucket)
    if field == "sampled" and not all(field in r for r in rows):
        return f"{log.arm} seed {log.seed}: its per-problem results have no sampled scores (data.eval_samples=0)"
    means = np.array([float(np.mean(r[field])) for r in rows])
    if not rows or abs(means.mean() - log.final[key]) > 1e-9:
        return f"{log.arm} seed {log.seed}: its per-problem results do not reproduce {key}"
    ids = [r.get("uid", r.get("index")) for r in rows]
    return ids, means


def split_variance(
    runs: dict[str, dict[int, RunLog]], arm: str, baseline: str, key: str, seeds: Sequence[int], confidence: float
) -> VarianceSplit | str:
    """arm − baseline's paired variance of `key` over `seeds`, split into evaluation sampling (each seed's per-problem
    results; paired by problem where both arms of the seed scored the same problems) and training (variance_split);
    or the one-line reason it cannot be."""
    if len(seeds) < 2:
        return "fewer than 2 paired seeds"
    diffs, evs, sizes, paired_all = [], [], [], True
    for seed in seeds:
        a, b = problem_means(runs[arm][seed], key), problem_means(runs[baseline][seed], key)
        for side in (a, b):
            if isinstance(side, str):
                return side
        (ids_a, means_a), (ids_b, means_b) = a, b
        paired = len(set(ids_a)) == len(ids_a) and sorted(ids_a) == sorted(ids_b)
        if paired:  # align the baseline's problems to the arm's
            where = {uid: i for i, uid in enumerate(ids_b)}
            means_b = means_b[[where[uid] for uid in ids_a]]
        paired_all &= paired
        evs.append(eval_sampling_variance(means_a, means_b, paired))
        diffs.append(runs[arm][seed].final[key] - runs[baseline][seed].final[key])
        sizes.append((len(ids_a) + len(ids_b)) / 2)
    if not np.all(np.isfinite(evs)):
        return "a seed with fewer than 2 held-out problems in this bucket"
    return variance_split(diffs, evs, float(np.mean(sizes)), paired_all, confidence)
