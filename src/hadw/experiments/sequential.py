"""`hadw compare --sequential`: seeds in rounds until the primary comparison's confidence sequence answers it, and
the primary comparison's name (`--primary`)."""

from __future__ import annotations

import typer

from hadw import metrics as M
from hadw.cli_lists import check_range

# = hadw.experiments.launchers.DEFAULT_SIGNAL_LEAD_S (submitit's default), not imported from there: a bad option
# must fail in one line without numpy and the launchers loaded (tests/test_cli_startup.py).


def primary_metric_key(primary: str | None, metrics: list[str]) -> str:
    """The final key ("val/<bucket>/<metric>") of the primary comparison: `primary` as BUCKET/METRIC, or by
    default the "all" bucket of the first avg@K metric (the expected accuracy a sampled answer has), else of the
    first metric."""
    if primary:
        bucket, _, name = primary.rpartition("/")
        return M.val_key(bucket or M.ALL, name)
    avg = [m for m in metrics if m.startswith("avg@")]
    return M.val_key(M.ALL, (avg or metrics)[0])


# --sequential's cap: a study stops at 40 seeds per arm whatever the answer (the compute one question may take);
# there the sequence's half-width is about 0.53 SD of the paired differences (a t interval's: 0.32).
DEFAULT_MAX_SEEDS = 40


SEQUENTIAL_LEGEND = (
    "Confidence sequence: an interval for arm − baseline valid at every round at once, however often it is looked "
    "at (Lai 1976; Howard et al. 2021; docs/compare.md), so the study may stop as soon as it excludes 0 (effect) "
    "or lies within ± the equivalence margin (equivalent). The t interval beside it is the fixed-n one, for "
    "contrast: read after every round it covers less than its level."
)


def check_sequential(sequential: bool, round_size: int | None, max_seeds: int | None, margin: float | None) -> None:
    """The --sequential flags: in range, and never given without --sequential (they would do nothing)."""
    import math

    given = {"--round-size": round_size is not None, "--equivalence-margin": margin is not None,
             "--max-seeds": max_seeds is not None}  # fmt: skip
    for flag, used in given.items():
        if used and not sequential:
            raise typer.BadParameter(f"{flag} is for --sequential; without it it would do nothing",
                                     param_hint=f"'{flag}'")  # fmt: skip
    check_range("--round-size", round_size, 1, 10_000)
    check_range("--max-seeds", max_seeds, 2, 100_000)
    if margin is not None and not (math.isfinite(margin) and margin > 0):
        raise typer.BadParameter(f"{margin}; allowed: a number > 0 (in the metric's units, e.g. 0.01)",
                                 param_hint="'--equivalence-margin'")  # fmt: skip


class SequentialRounds:
    """--sequential: run a round of seeds, look at the primary comparison's confidence sequence, add a round, until
    every arm − baseline is decided (stats.sequential_verdict) or --max-seeds. The rounds depend only on the
    results, so the same command run again replays them: finished runs are reused, an interrupted one resumes, and
    the study goes on where it stopped. A round with a failed run ends the rounds (more seeds would not mend it)."""

    def __init__(self, plan, write, run, out, names, baseline, metric, primary, confidence, round_size, max_seeds,
                 margin):  # fmt: skip
        self.plan, self.write, self.execute, self.out, self.names = plan, write, run, out, names
        self.baseline, self.metric, self.primary, self.confidence = baseline, metric, primary, confidence
        self.round_size, self.max_seeds, self.margin = round_size, max_seeds, margin

    def run(self, first: list[int]) -> tuple[list[int], list[dict]]:
        from hadw.experiments import compare as cmp

        seeds, todo, statuses = list(first), list(first), []
        for number in range(1, 10**6):
            self.write(seeds)  # the manifest names every seed so far: --collect-only finds them
            done = self.execute(self.plan(seeds=todo))
            statuses += done
            if any(r["status"] == "failed" for r in done):
                typer.echo(f"round {number}: a run failed; the rounds stop here (re-run to retry it)", err=True)
                break
            verdicts = self.verdicts(cmp.collect_runs(self.out, self.names, seeds))
            for arm, v in verdicts.items():
                typer.echo(f"round {number}: {v.n} seeds, {arm}: {v.mean:+.4f}, {self.confidence:.0%} confidence "
                           f"sequence [{v.low:+.4f}, {v.high:+.4f}]: {v.decision}", err=True)  # fmt: skip
            if all(v.decision != "continue" for v in verdicts.values()) or len(seeds) >= self.max_seeds:
                break
            todo = list(range(max(seeds) + 1, max(seeds) + 1 + min(self.round_size, self.max_seeds - len(seeds))))
            seeds += todo
        return seeds, statuses

    def verdicts(self, runs) -> dict:
        from hadw.experiments import compare as cmp

        result = cmp.aggregate(runs, self.baseline, self.metric, self.confidence)
        key = primary_metric_key(self.primary, self.metric)
        if key not in result.metrics:
            raise typer.BadParameter(f"{key!r}: the sequential rounds need this final metric; the runs have "
                                     f"{sorted(result.metrics)}", param_hint="'--primary'")  # fmt: skip
        return cmp.sequential_verdicts(result.metrics[key], result.baseline, self.max_seeds, self.margin,
                                       self.confidence)  # fmt: skip


def sequential_rows(result, key: str, max_seeds: int, margin: float | None):
    """The report's sequential table on final key `key`, and its compare.json entry."""
    from hadw.experiments import compare as cmp

    verdicts = cmp.sequential_verdicts(result.metrics[key], result.baseline, max_seeds, margin, result.confidence)
    headers = ["arm − baseline", "seeds", "mean", f"{result.confidence:.0%} confidence sequence",
               "t interval (fixed n)", "decision"]  # fmt: skip
    rows = [[f"{arm} − {result.baseline}", str(v.n), f"{v.mean:+.4f}", f"[{v.low:+.4f}, {v.high:+.4f}]",
             f"[{v.t_low:+.4f}, {v.t_high:+.4f}]", v.decision] for arm, v in verdicts.items()]  # fmt: skip
    data = {"key": key, "max_seeds": max_seeds, "equivalence_margin": margin,
            "verdicts": {arm: v.to_dict() for arm, v in verdicts.items()}}  # fmt: skip
    return headers, rows, data
