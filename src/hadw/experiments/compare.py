"""Multi-seed comparison: N seeds × several configs ("arms"), run or collected, with intervals.

    arms = [parse_arm("grpo:"), parse_arm("hadw:hadw.enabled=true")]
    specs = plan_runs("cfg.yaml", arms, seeds=[0, 1, 2], out_dir="runs/cmp")
    run_all(specs, jobs=2)                     # finished runs are reused, interrupted ones resume
    result = aggregate(collect_runs(specs), baseline="grpo")

Layout: <out_dir>/<arm>/seed<k>/ is one Trainer run dir (metrics.jsonl, config.yaml, checkpoint-*/,
final_model/). A run is *finished* when final_model/ and final_eval.json exist; it is then never run again.
A run with a checkpoint resumes from it (Trainer(..., resume=True)); anything else starts from scratch.

Aggregation is per final metric key ("val/all/greedy", "val/addition/L3/greedy", ...: final_eval.json
flattened with hadw.metrics.val_key): per arm the mean
over seeds with a t (or bootstrap) interval, and per arm the paired difference to the baseline arm
(paired by seed: both arms share the seed's prompts and sampling streams, so the pairing removes the
seed-to-seed variation both arms have in common).
"""

from __future__ import annotations

import contextlib
import json
import re
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hadw import metrics as M
from hadw.errors import SignalStop
from hadw.experiments.config_hash import config_hash, path_free  # noqa: F401  (compare's, as before)
from hadw.experiments.local_runs import run_specs, worker_stopped
from hadw.experiments.stats import (
    Interval,
    PairedDifference,
    SequentialVerdict,
    VarianceSplit,
    interval,
    paired_difference,
    sequential_verdict,
)
from hadw.experiments.variance import RunLog, split_variance
from hadw.metrics import METRICS_FILE, SAMPLES_FILE, read_run

ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
MANIFEST = "compare_manifest.json"
# The sweep folder's lock: held by the `hadw compare` that writes in --out (the driver, where a scheduler runs the
# runs); each run locks only its own run folder (<arm>/seed<k>/.lock), wherever it runs.
SWEEP_LOCK = ".compare.lock"


@dataclass(frozen=True)
class Arm:
    name: str
    overrides: tuple[str, ...] = ()


def split_overrides(text: str) -> list[str]:
    """ "a=1,b.c=[1,2] d=x" -> ["a=1", "b.c=[1,2]", "d=x"]: commas/spaces split, except inside [] {} or quotes."""
    items, current, depth, quote = [], "", 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch in ", \t" and depth == 0:
            if current:
                items.append(current)
            current = ""
            continue
        current += ch
    if current:
        items.append(current)
    return items


def parse_arm(text: str) -> Arm:
    """ "name:key=value,key=value" (or "name:" for the config as is) -> Arm."""
    name, sep, rest = text.partition(":")
    if not sep or not ARM_NAME.match(name):
        raise ValueError(
            f"--arm {text!r}: expected NAME:OVERRIDES, e.g. 'grpo:' or 'hadw:hadw.enabled=true,hadw.lam=1.3' "
            "(NAME: letters, digits, _ . + -)"
        )
    overrides = split_overrides(rest)
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ValueError(f"--arm {text!r}: overrides must look like key=value; got {bad}")
    return Arm(name, tuple(overrides))


# ---------------------------------------------------------------------------------------------------
# Planning and running


@dataclass(frozen=True)
class RunSpec:
    arm: str
    seed: int
    run_dir: Path
    config_path: str | None
    overrides: tuple[str, ...]  # base + arm + seed/output overrides, in the order applied


def run_dir_for(out_dir: str | Path, arm: str, seed: int) -> Path:
    return Path(out_dir) / arm / f"seed{seed}"


def plan_runs(
    config_path: str | Path | None,
    arms: Sequence[Arm],
    seeds: Sequence[int],
    out_dir: str | Path,
    base_overrides: Sequence[str] = (),
    threads_per_run: int = 1,
) -> list[RunSpec]:
    """One RunSpec per (seed, arm), seed-major; seed and output dir are set last so an arm cannot change them."""
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"arm names must be unique; got {names}")
    if not arms or not seeds:
        raise ValueError("need at least one --arm and one seed")
    specs = []
    # Seed-major: a sweep stopped part-way has whole pairs (every arm of the first seeds), not one arm's seeds
    # with nothing to pair them with.
    for seed in seeds:
        for arm in arms:
            run_dir = run_dir_for(out_dir, arm.name, seed)
            tail = (
                f"train.seed={seed}",
                f"train.output_dir={run_dir}",
                f"train.num_threads={threads_per_run}",
                "logging.progress=false",
            )
            specs.append(
                RunSpec(
                    arm.name,
                    seed,
                    run_dir,
                    str(config_path) if config_path else None,
                    (*base_overrides, *arm.overrides, *tail),
                )
            )
    return specs


def check_final_metrics(cfg, metrics: Sequence[str], arm: str) -> None:
    """ValueError in one line when a --metric is one the arm's final evaluation never computes: avg@K / pass@K need
    data.eval_samples=K (the trainer samples K answers a problem; pass@K only for K > 1). Checked before any run
    trains: `--metric avg@4` without data.eval_samples trained every run, then found no avg@4 to compare."""
    k = cfg.data.eval_samples
    made = [M.GREEDY] + ([M.avg_at(k)] if k >= 1 else []) + ([M.pass_at(k)] if k > 1 else [])
    for name in metrics:
        sampled = re.fullmatch(r"(avg|pass)@(\d+)", name)
        if sampled and name not in made:
            raise ValueError(
                f"arm {arm!r}: --metric {name} is not computed by its final evaluation (data.eval_samples={k}); "
                f"allowed: --metric {' / '.join(made)}, or --set data.eval_samples={sampled.group(2)} to sample "
                f"{sampled.group(2)} answers a problem"
            )


def is_finished(run_dir: Path) -> bool:
    return (run_dir / "final_model").is_dir() and (run_dir / M.FINAL_EVAL_FILE).is_file()


def run_status(run_dir: Path) -> str:
    """ "finished" | "resume" (has a checkpoint folder: the resume itself checks it, and refuses an unusable
    one in one line rather than training over it) | "new"."""
    from hadw.train.checkpoint import checkpoint_dirs
    from hadw.train.engines.trl_launch import trl_checkpoints

    if is_finished(run_dir):
        return "finished"
    return "resume" if checkpoint_dirs(run_dir) or trl_checkpoints(run_dir) else "new"


def engine_slots(options, slots: int) -> None:
    """engine=trl runs of `slots` processes: a Ray task / Slurm job (RayOptions / SlurmOptions, changed in place) gets
    that many GPUs where GPUs are asked for (fewer: ValueError), else that many CPUs (gloo ranks)."""
    if not options.gpus_per_run:
        options.cpus_per_run = max(options.cpus_per_run, slots)
    elif options.gpus_per_run < slots:
        raise ValueError(
            f"{options.gpus_per_run:g} GPU(s) a run, but trl.num_processes={slots}: each process needs one; allowed: "
            f"--gpus-per-run >= {slots}"
        )


def folder_bytes(path: Path) -> int:
    """Bytes of the files under `path`, links not followed (a link's own size, not its target's)."""
    import os

    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file a running run just replaced
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def disk_warning(run_dir: Path, runs_left: int, free: int | None = None) -> str | None:
    """After a run finishes: the one line that says the runs still to train, each leaving on disk what `run_dir` left
    (its checkpoints and final model), need more than the free space there, and what to do; None when they fit.
    A 135M-parameter sweep keeps 1.6 GB a checkpoint, `checkpoint.keep_last` of them a run: 16 runs filled a disk."""
    import shutil

    left = folder_bytes(run_dir)
    free = shutil.disk_usage(run_dir).free if free is None else free
    if runs_left < 1 or left * runs_left <= free:
        return None
    size = lambda n: f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"
    return (
        f"disk: {run_dir} left {size(left)}; the {runs_left} runs still to train need about {size(left * runs_left)}, "
        f"{size(free)} free there: --set checkpoint.keep_last=1 keeps one checkpoint a run, and a finished run's "
        "checkpoint-* folders can be deleted (it is reused from final_model/ and its results)"
    )


# train.num_threads (--cpus-per-run) changes how fast a run goes, not what it learns: a sweep re-run with
# another --cpus-per-run reuses and resumes its runs (the trainer's resume check also lets it change).
_THREADS_LINE = re.compile(r"^(\s+num_threads:) .*$", re.MULTILINE)


def _without_threads(config_yaml: str) -> str:
    return _THREADS_LINE.sub(r"\1 <any>", config_yaml)


def _check_same_config(spec: RunSpec, cfg) -> None:
    """A reused or resumed run must have been made with the same config; else the comparison is silently wrong."""
    from hadw.train.config import config_to_yaml
    from hadw.train.result import portable

    stored = spec.run_dir / "config.yaml"
    # as the run wrote it (paths relative to itself), or as a run of an earlier version did (paths as given)
    expected = {config_to_yaml(portable(cfg, Path(cfg.train.output_dir).absolute())), config_to_yaml(cfg)}
    if stored.is_file() and _without_threads(stored.read_text(encoding="utf-8")) not in set(
        map(_without_threads, expected)
    ):
        raise ValueError(
            f"{stored} was written with a different configuration than arm {spec.arm!r} seed {spec.seed} asks for; "
            "use another --out folder or delete that run dir"
        )


def execute_run(spec: RunSpec) -> dict:
    """Train one run (or reuse / resume it). Returns {"arm", "seed", "status", "error"}; never raises."""
    status = "?"
    try:
        from hadw.train.config import load_config

        cfg = load_config(spec.config_path, list(spec.overrides))
        status = run_status(spec.run_dir)
        _check_same_config(spec, cfg)
        if status == "finished":
            return {"arm": spec.arm, "seed": spec.seed, "status": "reused", "error": None}
        if status == "new":  # a run killed before its first checkpoint: its partial logs are stale
            _remove_stale_logs(spec.run_dir)
        from hadw.safe_files import open_append
        from hadw.train.engines import train_run

        spec.run_dir.mkdir(parents=True, exist_ok=True)
        with (
            open_append(spec.run_dir / "train.log") as log,  # never through a planted link
            contextlib.redirect_stdout(log),
            contextlib.redirect_stderr(log),
        ):
            train_run(cfg, resume=status == "resume", progress=False)
        return {
            "arm": spec.arm,
            "seed": spec.seed,
            "status": "resumed" if status == "resume" else "trained",
            "error": None,
        }
    except SignalStop as err:  # the run saved and stopped on a signal: the sweep stops too (run_all)
        worker_stopped(err.signum)  # in a pool worker: the runs queued behind this one are not started
        return {
            "arm": spec.arm,
            "seed": spec.seed,
            "status": "failed",
            "error": f"Interrupted: {err}",
            "signal": err.signum,
        }
    except Exception as err:  # one failed run must not take the others down; reported at the end
        return {
            "arm": spec.arm,
            "seed": spec.seed,
            "status": "failed",
            "error": f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=5)}",
        }


def run_all(
    specs: Sequence[RunSpec],
    jobs: int = 1,
    on_done: Callable[[dict], None] | None = None,
    worker: Callable[[RunSpec], dict] = execute_run,
) -> list[dict]:
    """Execute every spec with `worker`, `jobs` at a time in separate (spawned) processes; jobs = 1 runs here; a stop
    signal stops the sweep at a safe point (hadw.experiments.local_runs)."""
    return run_specs(specs, jobs, on_done, worker)


def _remove_stale_logs(run_dir: Path) -> None:
    """Remove the logs of a run killed before its first checkpoint, holding the run's lock: a run another process
    is training now (a second `hadw compare` on the same --out) is refused in one line ("in use by pid N"), never
    unlinked under it. The trainer takes the lock again; between the two nothing of this run exists to lose."""
    from hadw.train.run_dir import RunLock

    if not run_dir.is_dir():
        return
    lock = RunLock(run_dir)
    try:
        for name in (METRICS_FILE, SAMPLES_FILE):
            (run_dir / name).unlink(missing_ok=True)
    finally:
        lock.release()


def lock_sweep(out_dir: str | Path, create: bool = True):
    """Lock the sweep folder out_dir for this process (hadw.train.run_dir.FolderLock, released on any exit): a
    second `hadw compare` on the same --out is refused in one line naming the holder, before it removes,
    truncates or writes anything there. create: make the folder first; else None when it does not exist.
    A folder that cannot be made is one line (a UserError) naming --out."""
    from hadw.errors import UserError
    from hadw.train.run_dir import FolderLock

    out = Path(out_dir)
    if not create and not out.is_dir():
        return None
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--out {out}: cannot create it: {err.strerror}") from None
    return FolderLock(out, SWEEP_LOCK, f"--out {out}", "hadw compare", "--out")


# The report files `hadw compare` writes in --out; each is recognised as its own by its first bytes (the
# "written_by" marker, or how a version before the marker began the file), else refused without --overwrite.
COMPARE_MD, COMPARE_JSON, COMPARE_PNG = "compare.md", "compare.json", "compare.png"
_LEGACY_STARTS = {
    MANIFEST: b'{\n "config": ',
    COMPARE_MD: b"# Comparison over seeds ",
    COMPARE_JSON: b'{\n "baseline": ',
}


def owned_report(name: str) -> Callable[[bytes], bool]:
    """Recognises report `name` (MANIFEST, COMPARE_MD, COMPARE_JSON) as one `hadw compare` wrote."""
    from hadw.safe_files import owned_json, owned_markdown

    marked = owned_markdown("compare") if name.endswith(".md") else owned_json("compare")
    return lambda data: marked(data) or data.startswith(_LEGACY_STARTS[name])


def check_reports(out_dir: str | Path, overwrite: bool = False) -> None:
    """UserError (one line) when a report file in out_dir is a link, or exists and hadw compare did not write
    it (and not overwrite): checked before any run starts."""
    from hadw.safe_files import check_figure, check_output

    for name in (MANIFEST, COMPARE_MD, COMPARE_JSON):
        check_output(Path(out_dir) / name, f"--out {name}", owned_report(name), overwrite)
    check_figure(Path(out_dir) / COMPARE_PNG, f"--out {COMPARE_PNG}", overwrite, owned_sweep_figure)


def owned_sweep_figure(data: bytes) -> bool:
    """A figure hadw drew, or (in a sweep folder, under the name hadw gives it) one that a version before the
    marker drew with matplotlib."""
    from hadw.safe_files import owned_figure

    return owned_figure(data) or b"Matplotlib" in data


def write_report(out_dir: str | Path, name: str, text: str, overwrite: bool = False) -> Path:
    """Write report `name` in out_dir: never through a link, never over a file hadw compare did not write."""
    from hadw.safe_files import write_output

    path = Path(out_dir) / name
    write_output(path, text, f"--out {name}", owned_report(name), overwrite)
    return path


def write_manifest(
    out_dir: str | Path, arms: Sequence[Arm], seeds: Sequence[int], config_path, base_overrides, overwrite: bool = False
) -> None:
    manifest = {
        "written_by": "hadw compare",
        "config": str(config_path) if config_path else None,
        "overrides": list(base_overrides),
        "arms": [{"name": a.name, "overrides": list(a.overrides)} for a in arms],
        "seeds": list(seeds),
    }
    write_report(out_dir, MANIFEST, json.dumps(manifest, indent=1) + "\n", overwrite)


def discover(out_dir: str | Path) -> tuple[list[str], list[int]]:
    """Arms and seeds of an existing comparison folder: from its manifest, else from <arm>/seed<k>/ dirs."""
    out = Path(out_dir)
    if (out / MANIFEST).is_file():
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        return [a["name"] for a in manifest["arms"]], list(manifest["seeds"])
    arms, seeds = [], set()
    for arm_dir in sorted(p for p in out.iterdir() if p.is_dir()) if out.is_dir() else []:
        found = [int(m.group(1)) for d in arm_dir.iterdir() if (m := re.fullmatch(r"seed(\d+)", d.name))]
        if found:
            arms.append(arm_dir.name)
            seeds.update(found)
    if not arms:
        raise FileNotFoundError(f"{out}: no {MANIFEST} and no <arm>/seed<k>/ run dirs")
    return arms, sorted(seeds)


# ---------------------------------------------------------------------------------------------------
# Collecting and aggregating


def collect_runs(out_dir: str | Path, arms: Sequence[str], seeds: Sequence[int]) -> dict[str, dict[int, RunLog]]:
    """arm -> seed -> RunLog for every run dir that exists."""
    runs: dict[str, dict[int, RunLog]] = {}
    for arm in arms:
        runs[arm] = {}
        for seed in seeds:
            run_dir = run_dir_for(out_dir, arm, seed)
            records = read_run(run_dir)
            if not records.steps and not records.finished:
                continue
            final, problems = None, None
            if records.final_eval is not None:
                flat = M.flatten_eval(records.final_eval)
                final = {k: float(v) for k, v in flat.items() if isinstance(v, int | float)}
                problems = M.read_eval_problems(run_dir)
            runs[arm][seed] = RunLog(arm, seed, run_dir, final, records.steps, problems, _stored_hash(run_dir, out_dir))
    return runs


def _stored_hash(run_dir: Path, out_dir: str | Path) -> str | None:
    """config_hash of a run's config.yaml; None when it has none or it is not the YAML mapping a run writes (the
    report is still made: the hash only labels the run)."""
    stored = run_dir / "config.yaml"
    if not stored.is_file():
        return None
    try:
        return config_hash(stored, out_dir)
    except (ValueError, OSError, UnicodeDecodeError):  # ConfigError is a ValueError
        return None


@dataclass
class MetricComparison:
    key: str  # e.g. "val/addition/L3/greedy"
    arms: dict[str, Interval]
    values: dict[str, dict[int, float]]  # arm -> seed -> value
    diffs: dict[str, PairedDifference]  # non-baseline arm -> (arm − baseline)
    # non-baseline arm -> its paired variance split into evaluation sampling and training (variance_split), or the
    # one-line reason there is none (a run without per-problem results, fewer than 2 seeds, ...)
    splits: dict[str, VarianceSplit | str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "arms": {a: iv.to_dict() for a, iv in self.arms.items()},
            "values": {a: {str(s): v for s, v in vals.items()} for a, vals in self.values.items()},
            "diffs": {a: d.to_dict() for a, d in self.diffs.items()},
            "variance_split": {a: v if isinstance(v, str) else v.to_dict() for a, v in self.splits.items()},
        }


@dataclass
class CompareResult:
    baseline: str
    arms: list[str]
    confidence: float
    method: str
    metrics: dict[str, MetricComparison] = field(default_factory=dict)
    robust: str = "none"  # the secondary test beside each paired t interval (stats.ROBUST_TESTS)
    missing: dict[str, list[int]] = field(default_factory=dict)  # arm -> seeds without a final record
    config_hashes: dict[str, dict[int, str | None]] = field(default_factory=dict)  # arm -> seed -> config_hash

    def to_dict(self) -> dict:
        return {
            "baseline": self.baseline,
            "arms": self.arms,
            "confidence": self.confidence,
            "method": self.method,
            "robust": self.robust,
            "missing": self.missing,
            "config_hashes": {a: {str(s): h for s, h in by.items()} for a, by in self.config_hashes.items()},
            "metrics": {k: m.to_dict() for k, m in self.metrics.items()},
        }


def final_keys(runs: dict[str, dict[int, RunLog]], metric_names: Sequence[str]) -> list[str]:
    """Final keys "val/<bucket>/<name>" for the given metric names, present in any run."""
    keys: set[str] = set()
    for by_seed in runs.values():
        for log in by_seed.values():
            if log.final:
                keys.update(k for k in log.final if M.split_val_key(k)[1] in metric_names)
    return sorted(keys)


def aggregate(
    runs: dict[str, dict[int, RunLog]],
    baseline: str | None = None,
    metric_names: Sequence[str] = (M.GREEDY,),
    confidence: float = 0.95,
    method: str = "t",
    robust: str = "none",
) -> CompareResult:
    """Per final metric key: each arm's mean and interval over seeds, and its paired difference to the baseline
    (with robust="wilcoxon" also its Wilcoxon signed-rank p-value, beside the t interval)."""
    arms = list(runs)
    baseline = baseline or arms[0]
    if baseline not in runs:
        raise ValueError(f"baseline arm {baseline!r} is not one of {arms}")
    result = CompareResult(baseline, arms, confidence, method, robust=robust)
    result.missing = {a: sorted(s for s, log in by_seed.items() if log.final is None) for a, by_seed in runs.items()}
    result.config_hashes = {a: {s: log.config_hash for s, log in sorted(by.items())} for a, by in runs.items()}
    for key in final_keys(runs, metric_names):
        values = {
            a: {s: log.final[key] for s, log in by_seed.items() if log.final and key in log.final}
            for a, by_seed in runs.items()
        }
        arms_iv = {a: interval(list(v.values()), confidence, method) for a, v in values.items() if v}
        diffs = {}
        for arm in arms:
            if arm != baseline and set(values.get(arm, {})) & set(values.get(baseline, {})):
                diffs[arm] = paired_difference(values[arm], values[baseline], confidence, method, robust)
        splits = {arm: split_variance(runs, arm, baseline, key, d.seeds, confidence) for arm, d in diffs.items()}
        result.metrics[key] = MetricComparison(key, arms_iv, values, diffs, splits)
    return result


def sequential_verdicts(
    metric: MetricComparison, baseline: str, max_seeds: int | None, margin: float | None, confidence: float
) -> dict[str, SequentialVerdict]:
    """Each arm − baseline's sequential_verdict on one final key, its paired differences in seed order (the order
    --sequential adds seeds in)."""
    return {
        arm: sequential_verdict(
            [metric.values[arm][s] - metric.values[baseline][s] for s in diff.seeds], margin, max_seeds, confidence
        )
        for arm, diff in metric.diffs.items()
    }


def variance_rows(result: CompareResult, key: str) -> tuple[list[str], list[list[str]]]:
    """The variance split of final key `key`, one row per arm compared with the baseline: SDs of one seed's
    difference (total, evaluation sampling, training), the share evaluation explains, and the interval's half-width
    now, with twice the held-out problems, and with twice the seeds."""
    headers = ["arm − baseline", "seeds", "problems / seed", "SD (paired)", "SD eval", "SD training", "eval share",
               "± now", "± 2× problems", "± 2× seeds"]  # fmt: skip
    rows = []
    for arm, split in result.metrics[key].splits.items():
        name = f"{arm} − {result.baseline}"
        if isinstance(split, str):
            rows.append([name, f"no split: {split}", *["—"] * 8])
            continue
        paired = "" if split.paired_by_problem else " (unpaired)"
        share = f"{split.eval_share:.0%}" if np.isfinite(split.eval_share) else "—"  # no paired variance at all
        rows.append([
            name, str(split.n), f"{split.problems:.0f}{paired}", f"{np.sqrt(split.total):.4f}",
            f"{np.sqrt(split.eval):.4f}", f"{np.sqrt(split.train):.4f}", share,
            f"{split.half_width:.4f}", f"{split.half_width_2x_problems:.4f}", f"{split.half_width_2x_seeds:.4f}",
        ])  # fmt: skip
    return headers, rows


def curve(
    logs: Sequence[RunLog], metric: str, smooth: int = 1, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, low, high) of `metric` over the seeds, on the steps every seed logged it.

    smooth: trailing moving average over this many logged points (per seed, before averaging). The band
    is the t interval of the mean across seeds at each step (a point with one seed).
    """
    series = []
    for log in logs:
        points = {int(r["step"]): float(r[metric]) for r in log.steps if isinstance(r.get(metric), int | float)}
        series.append(points)
    common = sorted(set.intersection(*(set(s) for s in series))) if series else []
    if not common:
        empty = np.zeros(0)
        return empty, empty, empty, empty
    matrix = np.array([[s[step] for step in common] for s in series])  # [seeds, steps]
    if smooth > 1:
        kernel_sums = np.cumsum(np.pad(matrix, ((0, 0), (1, 0))), axis=1)
        idx = np.arange(1, matrix.shape[1] + 1)
        lo = np.maximum(idx - smooth, 0)
        matrix = (kernel_sums[:, idx] - kernel_sums[:, lo]) / (idx - lo)
    mean = matrix.mean(axis=0)
    if matrix.shape[0] < 2:
        return np.array(common), mean, mean, mean
    from scipy import stats

    sem = matrix.std(axis=0, ddof=1) / np.sqrt(matrix.shape[0])
    t = stats.t.ppf((1 + confidence) / 2, matrix.shape[0] - 1)
    return np.array(common), mean, mean - t * sem, mean + t * sem
