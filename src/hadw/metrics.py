"""The metric contract: every metric name hadw writes, the files of a run folder, and their one reader.

Names follow verl where verl has one (`actor/pg_loss`, `critic/advantages/mean`, `response_length/mean`,
`timing_s/gen`, `perf/throughput`), plus `hadw/*` for HA-DW and `batch/*`, `reward/*` for what verl has no
name for. The trainer writes these keys, and `compare`, `demo`, `plot`, the docs and the tests read them from
here, so a rename happens in one place. docs/train.md lists them with their meaning.

A run folder holds `metrics.jsonl` (one JSON object per training step, with "step"), `final_eval.json`
(the final evaluation: {bucket: {metric: value}}) and `final_eval_problems.jsonl` (that evaluation per held-out
problem: `eval_problem_rows`, read by `read_eval_problems`). JSON is strict everywhere: NaN and ±inf are written as
null (`jsonable`).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hadw.errors import UserError

# ----------------------------------------------------------------------------------------- files
METRICS_FILE = "metrics.jsonl"
FINAL_EVAL_FILE = "final_eval.json"
# The final evaluation per held-out problem (eval_problem_rows): what `hadw compare` splits the variance with.
FINAL_EVAL_PROBLEMS_FILE = "final_eval_problems.jsonl"
SAMPLES_FILE = "samples.jsonl"

# A run folder (hadw.train.run_dir locks and moves these; `hadw eval` never writes over them).
LOCK_FILE = ".lock"
# What a run writes; only these are moved aside by --overwrite (anything else in the folder is the user's).
RUN_ENTRIES = (
    METRICS_FILE,
    SAMPLES_FILE,
    "config.yaml",
    "latest",
    "final_model",
    "init_model",
    "tensorboard",
    "reward_errors.jsonl",
    "run_paths.json",  # the absolute form of the paths config.yaml records relative to the run (run_recipe)
)
RUN_PATTERNS = ("checkpoint-*", ".tmp-checkpoint-*", ".final_model.tmp*")
MAX_STEP = 10**12  # far past any run; a larger "step" is a hand-edited log (a float cannot even hold 400 digits)
# engine=trl's workers to `hadw train`: stopped by a signal at a checkpoint (its number); rank 0's one-line error
TRL_STOPPED_FILE, TRL_ERROR_FILE = ".trl-stopped", ".trl-error"
# Every name a run writes to (or through): a symbolic link at any of them is refused before anything is written.
WRITTEN_NAMES = (
    *RUN_ENTRIES, LOCK_FILE, FINAL_EVAL_FILE, FINAL_EVAL_PROBLEMS_FILE, "wandb_id", "warm_start_model",
    TRL_STOPPED_FILE, TRL_ERROR_FILE,
)  # fmt: skip


def is_run_file(path: Path) -> bool:
    """True when `path` is one of the files a `hadw train` run writes in its folder (`samples.jsonl`,
    `metrics.jsonl`, ...) and its folder holds a run (a lock, a config or metrics): another command must never
    write it, --overwrite or not."""
    folder_has_run = any((path.parent / name).exists() for name in (LOCK_FILE, "config.yaml", "metrics.jsonl"))
    return path.name in WRITTEN_NAMES and folder_has_run


# ----------------------------------------------------------------------------------------- actor (the update)
PG_LOSS = "actor/pg_loss"  # the clipped policy-gradient loss
PG_CLIPFRAC = "actor/pg_clipfrac"  # share of response tokens clipped at 1 + ε_high (advantage > 0)
PG_CLIPFRAC_LOWER = "actor/pg_clipfrac_lower"  # share clipped at 1 − ε_low (advantage < 0)
PPO_KL = "actor/ppo_kl"  # KL(π_old ‖ π_θ) estimate over response tokens
KL_LOSS = "actor/kl_loss"  # KL to the reference model (when algorithm.kl_coef > 0)
ENTROPY = "actor/entropy"  # mean token entropy of the policy
GRAD_NORM = "actor/grad_norm"  # gradient norm before clipping
LR = "actor/lr"
RATIO_MEAN, RATIO_MIN, RATIO_MAX = "actor/ratio_mean", "actor/ratio_min", "actor/ratio_max"

# ----------------------------------------------------------------------------------------- critic (rewards, advantages)
SCORE_MEAN = "critic/score/mean"  # mean correctness (the reward.correctness signal): the rollout accuracy
REWARDS_MEAN = "critic/rewards/mean"  # mean total reward (weighted functions + shaping): what Â is built from
ADV_MEAN, ADV_MAX, ADV_MIN = "critic/advantages/mean", "critic/advantages/max", "critic/advantages/min"


def score_level(level: int | str) -> str:
    """Rollout accuracy of the prompts of one difficulty level."""
    return f"critic/score/L{level}"


def degenerate_level(level: int | str) -> str:
    """Share of one level's groups whose rewards are all equal (no gradient): batch/degenerate_frac by level."""
    return f"batch/degenerate_frac/L{level}"


def phi_correct_level(level: int | str) -> str:
    """Mean Φ over one level's correct responses in informative groups: whether HA-DW re-weighted that level's
    correct answers (the paper's claim: up on hard prompts), beside hadw/anchor."""
    return f"hadw/phi_correct/L{level}"


# ----------------------------------------------------------------------------------------- rollouts
RESPONSE_LENGTH_MEAN = "response_length/mean"
RESPONSE_CLIP_RATIO = "response_length/clip_ratio"  # share of responses truncated at rollout.max_new_tokens
DEGENERATE_FRAC = "batch/degenerate_frac"  # groups whose rewards are all equal: no learning signal
KEPT_GROUPS = "batch/kept_groups"  # DAPO dynamic sampling: groups kept for the update
REFILL_ROUNDS = "batch/refill_rounds"
REWARD_ERRORS = "reward/errors"  # reward calls that raised or returned garbage (scored 0)
REWARD_TIMEOUTS = "reward/timeouts"  # reward calls that exceeded reward.timeout_s (scored 0)
SKIPPED_PROMPTS = "data/skipped_prompts"  # dataset rows left out: prompt longer than data.max_prompt_tokens

# ----------------------------------------------------------------------------------------- HA-DW
ANCHOR = "hadw/anchor"  # the anchor C the weights used this step
BATCH_ACCURACY = "hadw/batch_accuracy"  # y_t: the accuracy the anchor observed (all responses)
PHI_MEAN, PHI_MIN, PHI_MAX = "hadw/phi_mean", "hadw/phi_min", "hadw/phi_max"
FRAC_BOOSTED, FRAC_DAMPED = "hadw/frac_boosted", "hadw/frac_damped"  # responses with Φ > λ / Φ < λ

# ----------------------------------------------------------------------------------------- time and resources
TIME_GEN, TIME_REWARD, TIME_UPDATE, TIME_STEP = "timing_s/gen", "timing_s/reward", "timing_s/update", "timing_s/step"
# The update's parts (they sum to about timing_s/update): the π_old re-score and the KL reference's log-probs (verl's
# names), then the policy's forward (log-probs, entropy, loss), its backward, and the optimiser (clip + AdamW step).
TIME_OLD_LOGPROB, TIME_REF = "timing_s/old_log_prob", "timing_s/ref"
TIME_FORWARD, TIME_BACKWARD, TIME_OPTIMIZER = "timing_s/forward", "timing_s/backward", "timing_s/optimizer"
UPDATE_PHASES = (TIME_OLD_LOGPROB, TIME_REF, TIME_FORWARD, TIME_BACKWARD, TIME_OPTIMIZER)
THROUGHPUT = "perf/throughput"  # response tokens per second of the whole step
CPU_PEAK_RSS = "perf/cpu_peak_rss_gb"  # the process's peak resident memory (GiB)
GPU_MAX_ALLOCATED = "perf/max_memory_allocated_gb"  # torch's peak allocated GPU memory (GiB), verl's name
GPU_MAX_RESERVED = "perf/max_memory_reserved_gb"  # torch's peak reserved GPU memory (GiB), verl's name

# ----------------------------------------------------------------------------------------- evaluation
GREEDY = "greedy"  # accuracy of one greedy (T = 0) answer per problem
COUNT = "count"  # problems in the bucket
ALL = "all"  # the bucket of every problem
# 1 when the reward failed on every completion of the evaluation (raised, timed out, returned garbage): the bucket's
# accuracies are then NaN (null in JSON), the reward's failure and not the model's score
REWARD_FAILED = "reward_failed"


def avg_at(k: int) -> str:
    """Mean accuracy of k sampled answers per problem."""
    return f"avg@{k}"


def pass_at(k: int) -> str:
    """Unbiased pass@k (Chen et al. 2021) from the sampled answers."""
    return f"pass@{k}"


VAL_PREFIX = "val/"


def val_key(bucket: str, metric: str) -> str:
    """An evaluation value as one flat key: val/<source>/<level>/<metric> (verl's val- prefix). Periodic
    evaluations are logged in metrics.jsonl under these keys; compare flattens final_eval.json the same way."""
    return f"{VAL_PREFIX}{bucket}/{metric}"


def split_val_key(key: str) -> tuple[str, str]:
    """val/<bucket>/<metric> -> (bucket, metric)."""
    bucket, _, metric = key[len(VAL_PREFIX) :].rpartition("/")
    return bucket, metric


def flatten_eval(summary: dict[str, dict[str, float]]) -> dict[str, float]:
    """{bucket: {metric: value}} -> {val/<bucket>/<metric>: value}."""
    return {val_key(bucket, name): value for bucket, row in summary.items() for name, value in row.items()}


# ----------------------------------------------------------------------------------------- JSON and the reader
def jsonable(obj: Any) -> Any:
    """Plain JSON values: NaN/±inf → None (strict JSON), numpy/torch scalars → floats, tuples → lists."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, str):  # numpy arrays and scalars, torch tensors
        return jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """json.dumps of `jsonable(obj)`, refusing NaN: the one JSON encoding of hadw's files."""
    return json.dumps(jsonable(obj), allow_nan=False, ensure_ascii=False, **kwargs)


class MetricsFileError(UserError, ValueError):
    """A metrics / samples log with a corrupt line that is not the last one."""


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSONL log. A last line cut short (full disk, kill -9 mid-write) is dropped with a
    warning; a bad line elsewhere raises MetricsFileError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as err:  # ValueError: JSONDecodeError, or an int of > 4300 digits
            if any(rest.strip() for rest in lines[number:]):
                problem = "nested too deeply" if isinstance(err, RecursionError) else getattr(err, "msg", str(err))
                raise MetricsFileError(f"{path}:{number}: not a JSON record ({problem})") from None
            warnings.warn(f"{path}:{number}: dropped an unfinished last line (the run was cut off)", stacklevel=2)
            continue
        step = record.get("step") if isinstance(record, dict) else None
        if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_STEP:
            what = "an object" if isinstance(record, dict) else f"a JSON {type(record).__name__}"
            raise MetricsFileError(  # a 400-digit step was a traceback where a figure or table used it
                f"{path}:{number}: {what} without an integer 'step' from 0 to {MAX_STEP}; each line of a run's log is "
                "an object with its step (was the file edited by hand?)"
            )
        records.append(record)
    return records


def eval_problem_rows(
    correct: Sequence[Sequence[float]], problems: Sequence[Any], sampled: Sequence[Sequence[float]] | None = None
) -> list[dict[str, Any]]:
    """One row per evaluated problem, in evaluation order: {"index", "uid", "source", "level", "scores"}, and
    "sampled" when the evaluation also sampled k answers a problem (data.eval_samples).

    correct: [num_problems][n] scores (hadw.eval.evaluate.EvalReport.correct; the trainer's greedy pass: n = 1);
    sampled: [num_problems][k] scores at the sampling temperature, or None; problems: the num_problems
    hadw.data.Problem objects. A whole-number score is written as an int (0 / 1: the file stays small enough to
    commit, ~60 bytes a problem); the mean of `scores` over every row is the bucket "all" of the summary, that of
    `sampled` its avg@k."""
    for what, rows in (("score", correct), ("sampled", sampled or correct)):
        if len(rows) != len(problems):
            raise ValueError(f"eval_problem_rows: {len(rows)} {what} rows for {len(problems)} problems")
    compact = lambda row: [int(v) if float(v).is_integer() else float(v) for v in row]
    out = [
        {"index": i, "uid": p.uid, "source": p.source, "level": p.level, "scores": compact(row)}
        for i, (row, p) in enumerate(zip(correct, problems, strict=True))
    ]
    for row, scores in zip(out, sampled or (), strict=False):
        row["sampled"] = compact(scores)
    return out


def read_eval_problems(run_dir: str | Path) -> list[dict[str, Any]] | None:
    """A run's final_eval_problems.jsonl (eval_problem_rows), or None when the run has none (a run made before
    the file existed, or one without held-out problems). MetricsFileError naming the line when a row is not an
    object with a list of numeric "scores" (and, where present, "sampled")."""
    path = Path(run_dir) / FINAL_EVAL_PROBLEMS_FILE
    if not path.is_file():
        return None
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise MetricsFileError(f"{path}:{number}: not a JSON record") from None
        scores = row.get("scores") if isinstance(row, dict) else None
        if not isinstance(scores, list) or not scores or not all(_is_number(v) for v in scores):
            raise MetricsFileError(f"{path}:{number}: expected an object with a non-empty list of numbers 'scores'")
        sampled = row.get("sampled", [0])
        if not isinstance(sampled, list) or not sampled or not all(_is_number(v) for v in sampled):
            raise MetricsFileError(f"{path}:{number}: 'sampled', where present, must be a non-empty list of numbers")
        rows.append(row)
    return rows


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class RunRecords:
    """What a run folder says: per-step metrics and, once finished, the final evaluation."""

    path: Path
    steps: list[dict[str, Any]] = field(default_factory=list)
    final_eval: dict[str, dict[str, float]] | None = None

    @property
    def finished(self) -> bool:
        return self.final_eval is not None

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one metric over the steps that logged it (None values skipped)."""
        numeric = lambda v: isinstance(v, int | float) and not isinstance(v, bool)
        pairs = [(r["step"], r[key]) for r in self.steps if numeric(r.get(key))]  # a hand-edited "x" is skipped
        return [s for s, _ in pairs], [v for _, v in pairs]


def read_run(run_dir: str | Path) -> RunRecords:
    """Read metrics.jsonl (a truncated last line, left by a crash, is skipped) and final_eval.json."""
    run_dir = Path(run_dir)
    records = RunRecords(run_dir, read_jsonl(run_dir / METRICS_FILE))
    final = run_dir / FINAL_EVAL_FILE
    if final.is_file():
        try:
            records.final_eval = json.loads(final.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise MetricsFileError(f"{final}: not the JSON object a finished run writes") from None
        if not isinstance(records.final_eval, dict):
            raise MetricsFileError(f"{final}: not the JSON object a finished run writes")
    return records
