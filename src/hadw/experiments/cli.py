"""Commands built from the floors below: `hadw compare` (seeds × configs with intervals), `hadw demo`, `hadw plot`."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from hadw import metrics as M
from hadw.cli_lists import check_range, parse_ints
from hadw.eval.cli import JsonOption, OverwriteOption, _bar, _write_json
from hadw.eval.report import compare_rows, jsonable, markdown_table, rich_table
from hadw.experiments.sequential import (
    DEFAULT_MAX_SEEDS,
    SEQUENTIAL_LEGEND,
    SequentialRounds,
    check_sequential,
    primary_metric_key,
    sequential_rows,
)
from hadw.progress import stdout_console
from hadw.train.cli import _quiet_transformers

# = hadw.experiments.launchers.DEFAULT_SIGNAL_LEAD_S (submitit's default), not imported from there: a bad option
# must fail in one line without numpy and the launchers loaded (tests/test_cli_startup.py).
DEFAULT_SIGNAL_LEAD_S = 90


VARIANCE_LEGEND = (
    "One seed's paired difference is a mean over its held-out problems, so its variance across seeds (SD (paired)) "
    "is evaluation sampling (SD eval: the variance of a mean over the problems, from each run's "
    "final_eval_problems.jsonl, paired by problem where both arms scored the same ones) plus training (the rest, "
    "floored at 0). ± now: the half-width of the interval above; ± 2× problems / ± 2× seeds: what it would be with "
    "twice the held-out problems per seed / twice the seeds."
)


# The sweep lock compare_cmd takes once its options are checked, released by _releasing_locks when the command ends
# however it ends (returns, a one-line error, a signal's SignalStop; the kernel drops it on a kill).
_held_locks: list = []


def _releasing_locks(command: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(command)
    def wrapper(*args, **kwargs) -> None:
        try:
            command(*args, **kwargs)
        finally:
            while _held_locks:
                _held_locks.pop().release()

    return wrapper


def compare_cmd(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Base YAML config of every run.")] = None,
    arm: Annotated[
        list[str],
        typer.Option(
            "--arm",
            "-a",
            help="NAME:OVERRIDES, e.g. 'grpo:' or 'hadw:hadw.enabled=true' or 'g16:rollout.group_size=16'. "
            "The first is the baseline unless --baseline. Repeat for each arm; omit all to collect the arms "
            "already in --out.",
        ),
    ] = [],
    seeds: Annotated[
        str | None,
        typer.Option(
            "--seeds", help="Seeds, e.g. 0,1,2 or 0-4; each arm runs every one (default 0-4; collect: all found)."
        ),
    ] = None,
    override: Annotated[list[str], typer.Option("--set", "-s", help="key=value applied to every arm (repeat).")] = [],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder of the runs and the reports.")] = Path(
        "runs/compare"
    ),
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            help="local: runs in parallel (separate processes, --cpus-per-run torch threads each; default 1); "
            "ray --ray-address local: the size of the Ray instance started here (× --cpus-per-run). Refused "
            "with slurm or a running Ray cluster: the scheduler places the runs (throttle with --max-parallel).",
        ),
    ] = None,
    max_parallel: Annotated[
        int | None,
        typer.Option(
            "--max-parallel",
            help="At most N runs at once. slurm: the array's throttle (--array=0-M%N; default submitit's 256); "
            "ray: at most N tasks in flight; local: caps --jobs. Default: no cap.",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print what would be submitted (slurm: the batch script; ray: the task spec) and the table "
            "task id -> arm, seed; submit, train and write nothing.",
        ),
    ] = False,
    collect_only: Annotated[
        bool, typer.Option("--collect-only", help="Do not train; aggregate what is in --out.")
    ] = False,
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Arm the others are compared with (default: the first).")
    ] = None,
    metric: Annotated[
        list[str], typer.Option("--metric", help="Final eval metric(s) to compare: greedy, avg@K, pass@K (repeat).")
    ] = [M.GREEDY],
    curve_metric: Annotated[list[str], typer.Option("--curve", help="Per-step metric(s) to plot (repeat).")] = [
        M.SCORE_MEAN
    ],
    smooth: Annotated[int, typer.Option("--smooth", help="Moving average window of the learning curves.")] = 5,
    confidence: Annotated[
        float, typer.Option("--confidence", help="Confidence level of the intervals, in (0, 1).")
    ] = 0.95,
    method: Annotated[str, typer.Option("--interval", help="t (Student t over seeds) | bootstrap (percentile).")] = "t",
    robust: Annotated[
        str,
        typer.Option(
            "--robust",
            help="none | wilcoxon: also the Wilcoxon signed-rank p of the paired differences, a secondary test beside "
            "the t interval and p (robust to one far-out seed), never in their place. Default none: one pre-stated "
            "test, no second look unless asked.",
        ),
    ] = "none",
    primary: Annotated[
        str | None,
        typer.Option(
            "--primary",
            help="The one primary comparison, BUCKET/METRIC (e.g. all/avg@4); every other row "
            "is labelled exploratory. Default: all/<the first avg@K of --metric>, else all/<first metric>.",
        ),
    ] = None,
    sequential: Annotated[
        bool,
        typer.Option(
            "--sequential",
            help="Add seeds in rounds until the primary comparison is answered: its confidence sequence (valid "
            "however often it is looked at; docs/compare.md) excludes 0, or lies within ±--equivalence-margin, or "
            "--max-seeds is reached. The first round is --seeds; a re-run replays the rounds (finished runs reused).",
        ),
    ] = False,
    round_size: Annotated[
        int | None,
        typer.Option(
            "--round-size",
            help="--sequential: seeds added per round, after the largest so far (default: as many as --seeds; "
            "larger rounds use the machines better, smaller ones stop sooner).",
        ),
    ] = None,
    max_seeds: Annotated[
        int | None,
        typer.Option(
            "--max-seeds",
            help="--sequential: stop at this many seeds per arm whatever the answer (the compute a question may "
            "take; default 40: the sequence then resolves about 0.8 SD of the paired differences).",
        ),
    ] = None,
    equivalence_margin: Annotated[
        float | None,
        typer.Option(
            "--equivalence-margin",
            help="--sequential: also stop once the sequence lies within ±M: the difference is shown smaller than M "
            "(in the metric's units, e.g. 0.01 = one accuracy point). Default: stop only on an effect or the cap.",
        ),
    ] = None,
    json_path: Annotated[str | None, JsonOption] = None,
    # Where the runs execute (hadw.experiments.launchers); --out must be on storage every node sees.
    launcher: Annotated[
        str, typer.Option("--launcher", help="local (processes here) | ray (a Ray task per run) | slurm (a job array).")
    ] = "local",
    cpus_per_run: Annotated[
        float,
        typer.Option(
            "--cpus-per-run",
            help="CPUs per run: ray/slurm request them, and each run uses that many torch threads "
            "(train.num_threads; a Ray fraction gives 1).",
        ),
    ] = 1,
    gpus_per_run: Annotated[float, typer.Option("--gpus-per-run", help="ray/slurm: GPUs requested per run.")] = 0,
    ray_address: Annotated[
        str,
        typer.Option(
            "--ray-address",
            help="ray: local (start one here with --jobs × --cpus-per-run CPUs) | auto (join this machine's "
            "cluster) | ray://HOST:10001 | HOST:6379.",
        ),
    ] = "local",
    partition: Annotated[str | None, typer.Option("--partition", help="slurm: partition (default: the site's).")] = (
        None
    ),
    time_min: Annotated[
        int, typer.Option("--time-min", help="slurm: time limit per run, in minutes (longer than --signal-lead-s).")
    ] = 60,
    signal_lead_s: Annotated[
        int,
        typer.Option(
            "--signal-lead-s",
            help="slurm: seconds before the time limit that a run is told to stop (USR2): it finishes its step, "
            "saves a checkpoint and is requeued. Longer than one step plus a checkpoint save.",
        ),
    ] = DEFAULT_SIGNAL_LEAD_S,
    account: Annotated[str | None, typer.Option("--account", help="slurm: account to charge.")] = None,
    sbatch: Annotated[
        list[str], typer.Option("--sbatch", help="slurm: another sbatch option KEY=VALUE, e.g. qos=high (repeat).")
    ] = [],
    setup: Annotated[
        list[str],
        typer.Option(
            "--setup",
            help="slurm: a shell line each job runs before its run, e.g. 'module load cuda/12.4' or "
            "'source /shared/venv/bin/activate' (repeat; in order).",
        ),
    ] = [],
    max_requeues: Annotated[
        int | None,
        typer.Option(
            "--max-requeues",
            help="slurm: how many times a run stopped by its time limit is requeued (submitit's max_num_timeout; "
            "default 3); after that it is reported failed and a re-run resumes it. submitit counts every stop "
            "signal of a job shorter than 50 minutes as a time-out.",
        ),
    ] = None,
    ray_runtime_env: Annotated[
        str | None,
        typer.Option(
            "--ray-runtime-env",
            help="ray: the runtime environment of every run's task (Ray's runtime_env), as JSON, e.g. "
            '\'{"env_vars": {"HF_HOME": "/shared/hf"}}\', or the path of a .json file.',
        ),
    ] = None,
    poll: Annotated[
        float, typer.Option("--poll", help="ray/slurm: seconds between checks of the runs (progress line).")
    ] = 5.0,
    overwrite: Annotated[bool, OverwriteOption] = False,
) -> None:
    """Run (or collect) N seeds × several configs; report means, intervals and seed-paired differences."""
    if method not in ("t", "bootstrap"):
        raise typer.BadParameter(f"{method!r}; allowed: t, bootstrap", param_hint="'--interval'")
    if not 0 < confidence < 1:
        raise typer.BadParameter("must be in (0, 1)", param_hint="'--confidence'")
    check_sequential(sequential, round_size, max_seeds, equivalence_margin)
    max_seeds = max_seeds or DEFAULT_MAX_SEEDS
    if robust not in ("none", "wilcoxon"):  # = stats.ROBUST_TESTS, not imported: a bad option fails without scipy
        raise typer.BadParameter(f"{robust!r}; allowed: none, wilcoxon", param_hint="'--robust'")
    if launcher not in ("local", "ray", "slurm"):
        raise typer.BadParameter(f"{launcher!r}; allowed: local, ray, slurm", param_hint="'--launcher'")
    check_range("--max-parallel", max_parallel, 1, 100_000)
    _check_jobs(jobs, launcher, ray_address)
    if not 0 < cpus_per_run <= MAX_CPUS_PER_RUN:  # nan fails too (a traceback); 1e9 was blamed on train.num_threads
        raise typer.BadParameter(
            f"{cpus_per_run}; allowed: a number > 0 and at most {MAX_CPUS_PER_RUN} (each run uses that many torch "
            "threads; a fraction gives 1)",
            param_hint="'--cpus-per-run'",
        )
    threads = max(1, int(cpus_per_run))  # --cpus-per-run CPUs -> that many torch threads per run
    launch_options = None
    if launcher != "local" and not collect_only:
        launch_options = _launch_options(
            launcher,
            jobs or max_parallel or 1,
            cpus_per_run,
            gpus_per_run,
            ray_address,
            partition,
            time_min,
            account,
            sbatch,
            poll,
            signal_lead_s,
        )
        _set_launch_extras(launch_options, max_parallel, signal_lead_s, threads)
    _scheduler_only(launcher, setup, max_requeues, ray_runtime_env)
    if launcher == "slurm" and launch_options is not None:
        launch_options.setup = tuple(setup)
        if max_requeues is not None:
            launch_options.max_requeues = max_requeues
    if launcher == "ray" and launch_options is not None and ray_runtime_env is not None:
        launch_options.runtime_env = _runtime_env(ray_runtime_env)
    seed_list = parse_ints(seeds or "0-4", "--seeds")
    if sequential and len(seed_list) > max_seeds:
        raise typer.BadParameter(f"{len(seed_list)} seeds in the first round, more than --max-seeds {max_seeds}; "
                                 "allowed: at most --max-seeds", param_hint="'--seeds'")  # fmt: skip
    check_range("--jobs", jobs, 1, 1024)
    workers = min(jobs or 1, max_parallel or jobs or 1)  # local: --max-parallel caps --jobs
    check_range("--smooth", smooth, 1)
    from hadw.safe_files import folder_name_problem

    if problem := folder_name_problem(out):
        raise typer.BadParameter(f"{str(out)!r} {problem}", param_hint="'--out'")
    # imported after the option checks: a bad option is one line without torch (tests/test_cli_startup.py)
    from hadw.experiments import compare as cmp
    from hadw.experiments.plots import plot_compare

    if not (dry_run and arm and not collect_only):  # a dry run writes nothing, so locks nothing
        # one `hadw compare` per --out, taken before anything there is removed, truncated or written
        lock = cmp.lock_sweep(out, create=bool(arm) and not collect_only)
        if lock is not None:
            _held_locks.append(lock)  # released when the command ends (_releasing_locks)
    cmp.check_reports(out, overwrite)  # before hours of runs, not after
    if json_path not in (None, "-"):
        from hadw.safe_files import check_output, owned_json

        check_output(Path(json_path), "--json", owned_json("compare"), overwrite)
    if arm and not collect_only:
        try:
            arms = [cmp.parse_arm(a) for a in arm]
            specs = cmp.plan_runs(config, arms, seed_list, out, override, threads_per_run=threads)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="'--arm'") from None
        if config is not None and not config.is_file():
            raise typer.BadParameter(f"config file not found: {config}", param_hint="'--config'")
        slots = _check_configs(specs, metric)
        if launch_options is not None and slots > 1:  # engine=trl: a task of trl.num_processes GPUs (or CPUs)
            try:
                cmp.engine_slots(launch_options, slots)
            except ValueError as err:
                raise typer.BadParameter(str(err), param_hint="'--gpus-per-run'") from None
        if dry_run:
            _print_dry_run(specs, launcher, launch_options, out, workers)
            return
        run = functools.partial(_execute, launcher=launcher, options=launch_options, out=out, workers=workers)
        if sequential:
            if baseline is not None and baseline not in [a.name for a in arms]:  # before any round, not after one
                raise typer.BadParameter(f"baseline arm {baseline!r} is not one of {[a.name for a in arms]}",
                                         param_hint="'--baseline'")  # fmt: skip
            plan = functools.partial(cmp.plan_runs, config, arms, out_dir=out, base_overrides=override,
                                     threads_per_run=threads)  # fmt: skip
            write = lambda seeds: cmp.write_manifest(out, arms, seeds, config, override, overwrite)
            size = round_size or len(seed_list)
            rounds = SequentialRounds(plan, write, run, out, [a.name for a in arms], baseline, metric, primary,
                                       confidence, size, max_seeds, equivalence_margin)  # fmt: skip
            seed_list, statuses = rounds.run(seed_list)
        else:
            cmp.write_manifest(out, arms, seed_list, config, override, overwrite)
            statuses = run(specs)
        failed = [r for r in statuses if r["status"] == "failed"]
        for r in failed:
            typer.echo(f"run {r['arm']} seed {r['seed']} failed: {r['error']}", err=True)
        names = [a.name for a in arms]
        counts = {s: sum(r["status"] == s for r in statuses) for s in ("trained", "resumed", "reused", "failed")}
        typer.echo("runs: " + ", ".join(f"{v} {k}" for k, v in counts.items()), err=True)
    else:
        try:
            names, found_seeds = cmp.discover(out)
        except FileNotFoundError as err:
            raise typer.BadParameter(str(err), param_hint="'--out'") from None
        if arm:
            names = [cmp.parse_arm(a if ":" in a else a + ":").name for a in arm]
        seed_list = seed_list if seeds else found_seeds
        failed = []
        unfinished = [
            f"{a} seed {s}" for a in names for s in seed_list if not cmp.is_finished(cmp.run_dir_for(out, a, s))
        ]
        if unfinished:
            typer.echo(f"missing (not finished, left out): {', '.join(unfinished)}", err=True)
    runs = cmp.collect_runs(out, names, seed_list)
    for r in failed:  # e.g. a run dir made with another config: never report it as this one
        runs[r["arm"]].pop(r["seed"], None)
    try:
        result = cmp.aggregate(runs, baseline, metric, confidence, method, robust)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="'--baseline'") from None
    if not result.metrics and failed:  # every run failed (each named above): a failed sweep, not a bad --out
        typer.echo(f"no finished run under {out} to report", err=True)
        raise typer.Exit(1)
    if not result.metrics:
        raise typer.BadParameter(f"no finished runs with final eval metrics {metric} under {out}", param_hint="'--out'")
    primary_key: str | None = primary_metric_key(primary, metric)
    if primary_key not in result.metrics:
        if primary:
            raise typer.BadParameter(f"{primary!r} is not among the final metrics {sorted(result.metrics)}",
                                     param_hint="'--primary'")  # fmt: skip
        primary_key = None  # no "all" bucket of the default metric: no row is marked
    png = plot_compare(out / cmp.COMPARE_PNG, runs, result, curve_metric, metric[0], smooth)
    sections = []
    legend = (f"Primary comparison: `{primary_key}`; every other row is exploratory. " if primary_key else "") + (
        "MDE: the smallest true difference these seeds detect with 80 % power (paired t, α = 0.05) at the observed "
        "SD of the differences."
        + (" Wilcoxon p: the signed-rank test of the same paired differences, a secondary test (--robust); the "
           "interval and p are the t test's." if robust != "none" else ""))  # fmt: skip
    for name in metric:
        headers, rows = compare_rows(result, name, primary_key)
        sections.append(f"## final {name}\n\n{legend}\n\n" + markdown_table(headers, rows))
        if json_path != "-":
            title = f"final {name}: mean [{confidence:.0%} {method} CI] over seeds; primary: {primary_key}"
            stdout_console().print(rich_table(title, headers, rows))
    if primary_key is not None:  # where the paired variance comes from, and what more problems / seeds would buy
        headers, rows = cmp.variance_rows(result, primary_key)
        sections.append(
            f"## Where the variance is: {primary_key}\n\n{VARIANCE_LEGEND}\n\n" + markdown_table(headers, rows)
        )
        if json_path != "-" and rows:
            stdout_console().print(rich_table(f"variance of the paired difference, {primary_key}", headers, rows))
    sequential_data = None
    if sequential and primary_key is not None:
        headers, rows, sequential_data = sequential_rows(result, primary_key, max_seeds, equivalence_margin)
        sections.append(f"## Sequential: {primary_key}\n\n{SEQUENTIAL_LEGEND}\n\n" + markdown_table(headers, rows))
        if json_path != "-":
            stdout_console().print(rich_table(f"sequential: {primary_key}", headers, rows))
    missing = {a: s for a, s in result.missing.items() if s}
    note = f"\nUnfinished runs (left out): {missing}\n" if missing else ""
    from hadw.safe_files import markdown_marker

    report = (
        f"# Comparison over seeds {seed_list} ({confidence:.0%} {method} intervals; differences paired by seed)\n\n"
        + "\n".join(sections)
        + note
        + f"\n![curves]({png.name})\n"
    )
    cmp.write_report(out, cmp.COMPARE_MD, markdown_marker("compare") + report, overwrite)
    data = {**result.to_dict(), "primary": primary_key}
    if sequential_data is not None:
        data["sequential"] = sequential_data
    marked = {"written_by": "hadw compare", **jsonable(data)}
    cmp.write_report(out, cmp.COMPARE_JSON, json.dumps(marked, indent=1) + "\n", overwrite)
    _write_json(json_path, data, "compare", overwrite)
    if json_path != "-":
        typer.echo(f"wrote {out / 'compare.md'}, {out / 'compare.json'}, {png}")
    if failed:
        raise typer.Exit(1)


def _execute(specs, launcher: str, options, out: Path, workers: int) -> list[dict]:
    """Run specs where --launcher says (finished runs reused, interrupted ones resumed); their statuses."""
    from hadw.experiments import compare as cmp

    if launcher == "local":
        bar = _bar(len(specs), f"runs ({workers} at a time)", "run")
        to_train = sum(cmp.run_status(spec.run_dir) != "finished" for spec in specs)
        warned = False

        def done(result: dict) -> None:
            nonlocal to_train, warned
            bar.update(1, last=f"{result['arm']}/{result['seed']}")
            if result["status"] not in ("trained", "resumed"):
                return
            to_train -= 1
            # said once, when it first holds: what a finished run left × the runs still to train > free space
            line = None if warned else cmp.disk_warning(cmp.run_dir_for(out, result["arm"], result["seed"]), to_train)
            if line:
                warned = True
                typer.echo(line, err=True)

        try:  # a signal stops the sweep (jobs = 1: SignalStop, exit 128 + its number)
            return cmp.run_all(specs, workers, done)
        finally:
            bar.close()
    from hadw.experiments.launchers import launch

    return launch(specs, launcher, options, out)


def _check_jobs(jobs: int | None, launcher: str, ray_address: str) -> None:
    """--jobs sizes what runs on this machine; where a scheduler places the runs it would be silently ignored."""
    if jobs is None or launcher == "local" or (launcher == "ray" and ray_address == "local"):
        return
    where = "slurm" if launcher == "slurm" else f"ray --ray-address {ray_address}"
    raise typer.BadParameter(
        f"--jobs {jobs} with --launcher {where}: the scheduler places the runs; use --max-parallel N to cap "
        "how many run at once",
        param_hint="'--jobs'",
    )


def _scheduler_only(launcher: str, setup: list[str], max_requeues: int | None, runtime_env: str | None) -> None:
    """Flags that mean something to one scheduler only: elsewhere they would be silently ignored."""
    given = {"--setup": bool(setup), "--max-requeues": max_requeues is not None}
    for flag, used in given.items():
        if used and launcher != "slurm":
            raise typer.BadParameter(
                f"{flag} is for --launcher slurm (the batch script of each job); with {launcher} it would do "
                "nothing" + ("; on Ray use the nodes' image or --ray-runtime-env" if launcher == "ray" else ""),
                param_hint=f"'{flag}'",
            )
    if runtime_env is not None and launcher != "ray":
        raise typer.BadParameter(
            f"--ray-runtime-env is for --launcher ray; with {launcher} it would do nothing"
            + ("; on Slurm use --setup lines (jobs inherit this shell's environment)" if launcher == "slurm" else ""),
            param_hint="'--ray-runtime-env'",
        )
    check_range("--max-requeues", max_requeues, 0, 1000)
    for line in setup:
        if not line.strip() or any(ch in line for ch in "\n\r\0"):
            raise typer.BadParameter(f"{line!r}: one non-empty shell line per --setup", param_hint="'--setup'")


def _runtime_env(text: str) -> dict:
    """--ray-runtime-env: a JSON object, or the path of a .json file holding one."""
    source = "--ray-runtime-env"
    if text.lstrip()[:1] not in ("{", "["):  # JSON is an object (or a list, refused below); else a file
        path = Path(text)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise typer.BadParameter(
                f"{path}: cannot read it ({getattr(err, 'strerror', None) or err}); expected a JSON object or the "
                "path of a .json file",
                param_hint="'--ray-runtime-env'",
            ) from None
        source = str(path)
    try:
        env = json.loads(text)
    except ValueError as err:
        raise typer.BadParameter(f"{source}: not JSON ({err})", param_hint="'--ray-runtime-env'") from None
    if not isinstance(env, dict):
        raise typer.BadParameter(
            f'{source}: a JSON object is needed, e.g. {{"env_vars": {{"HF_HOME": "/shared/hf"}}}}',
            param_hint="'--ray-runtime-env'",
        )
    return env


def _set_launch_extras(options, max_parallel: int | None, signal_lead_s: int, threads: int) -> None:
    """The throttle, the signal lead and the threads per run on RayOptions / SlurmOptions (checked again)."""
    from hadw.experiments import launchers as L

    options.threads = threads
    if isinstance(options, L.RayOptions):
        options.max_parallel = max_parallel
        return
    options.signal_lead_s = signal_lead_s
    if max_parallel is not None:
        options.parallel = max_parallel
    options.__post_init__()  # the time limit against the new signal lead: one line, exit 2


MAX_CPUS_PER_RUN = 4096  # train.num_threads' limit (hadw.train.config_checks): --cpus-per-run becomes it


def _print_dry_run(specs, launcher: str, options, out: Path, workers: int) -> None:
    """--dry-run: what would run where, on stdout; nothing submitted, nothing written."""
    from hadw.experiments import launchers as L

    if launcher == "local":
        typer.echo(f"# local: {len(specs)} runs, {workers} at a time (processes here)")
        typer.echo(L.task_table(specs), nl=False)
        return
    typer.echo(L.dry_run(specs, launcher, options, out), nl=False)


def _launch_options(launcher, jobs, cpus, gpus, ray_address, partition, time_min, account, sbatch, poll, lead_s):
    """RayOptions / SlurmOptions from the flags, checked before anything is written: one line, exit 2."""
    from hadw.experiments import launchers as L

    if cpus <= 0 or gpus < 0 or poll <= 0:
        raise typer.BadParameter(
            f"--cpus-per-run {cpus} and --poll {poll} must be > 0, --gpus-per-run {gpus} >= 0",
            param_hint="'--launcher'",
        )
    if launcher == "ray":
        # A local instance gets --jobs × --cpus-per-run CPUs: --jobs keeps meaning "runs at once on this machine".
        return L.RayOptions(ray_address, cpus, gpus, local_cpus=max(1, round(jobs * cpus)), poll_s=poll)
    if cpus != int(cpus) or gpus != int(gpus):
        raise typer.BadParameter(
            f"slurm takes whole CPUs and GPUs per run; got {cpus}, {gpus}", param_hint="'--launcher'"
        )
    # (the signal lead here, not later: the time limit is checked against it as the options are made)
    return L.SlurmOptions(
        partition, time_min, int(cpus), int(gpus), account, tuple(sbatch), signal_lead_s=lead_s, poll_s=poll
    )


def _check_configs(specs, metrics=()) -> int:
    """Every run's config (base, --set, the arm's overrides) loads, and computes the --metric asked for, before any
    run starts: a typo is one line naming the arm, not one traceback per run followed by an error about --out.
    Returns the most processes a run has (engine=trl: trl.num_processes; else 1)."""
    from hadw.experiments.compare import check_final_metrics
    from hadw.train.config import ConfigError, load_config

    slots = 1  # the most processes one run is (engine=trl: trl.num_processes)
    checked: set[tuple] = set()
    for spec in specs:
        key = (spec.arm, tuple(o for o in spec.overrides if not o.startswith(("train.seed=", "train.output_dir="))))
        if key in checked:
            continue
        checked.add(key)
        try:
            cfg = load_config(spec.config_path, list(spec.overrides))
        except ConfigError as err:
            raise ConfigError(f"arm {spec.arm!r} (--config / --set / --arm): {err}") from None
        try:  # issue 49: before any run trains, not after all of them
            check_final_metrics(cfg, metrics, spec.arm)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="'--metric'") from None
        slots = max(slots, cfg.trl.num_processes if cfg.engine == "trl" else 1)
    return slots


def demo(
    out_dir: Annotated[Path, typer.Option(help="where runs, table and plot go")] = Path("runs/demo"),
    steps: Annotated[int | None, typer.Option(help="RL steps per arm (default: the demo's 200)")] = None,
    seed: Annotated[int, typer.Option(help="random seed of RL (same for both arms; with rebuild, of SFT too)")] = 0,
    warm_start: Annotated[
        str,
        typer.Option(
            help="a shipped warm start (the same file on every machine; checked by sha256), or 'rebuild': SFT it "
            "here, which gives another start, and so another table, on another CPU's kernels"
        ),
    ] = "sums234-s0",
    overwrite: Annotated[bool, OverwriteOption] = False,
) -> None:
    """Tiny model, CPU: warm start, then GRPO vs GRPO+HA-DW from the same start; table + PNG."""
    from hadw.experiments.demo import DemoSettings, run_demo
    from hadw.train import warm_starts

    check_range("--steps", steps, 1)  # before the warm start: a bad value fails in a second
    if warm_start != "rebuild":
        warm_starts.get(warm_start)  # an unknown name: one line naming the shipped ones
    _quiet_transformers()
    settings = DemoSettings(out_dir=out_dir, seed=seed, warm_start=warm_start, overwrite=overwrite)
    if steps is not None:
        settings.steps = steps
    run_demo(settings)


def plot(
    run_dirs: Annotated[list[Path], typer.Argument(help="one or more run folders (with metrics.jsonl)")],
    out: Annotated[Path, typer.Option(help="Figure to write (.png, .pdf, .svg, .eps or .ps)")] = Path("curves.png"),
    overwrite: Annotated[bool, OverwriteOption] = False,
) -> None:
    """Draw the training curves (accuracy, anchor) of finished or running runs."""
    from hadw.experiments.demo import plot_runs
    from hadw.safe_files import check_figure

    # the run folders are only read: a read-only one is fine; --out is checked like every file hadw writes
    check_figure(out, "--out", overwrite)
    names = [d.name for d in run_dirs]
    labels = [d.name if names.count(d.name) == 1 else str(d) for d in run_dirs]  # runs/a/seed0 vs runs/b/seed0
    typer.echo(plot_runs(dict(zip(labels, run_dirs, strict=True)), out))


def register(app: typer.Typer) -> None:
    app.command("compare")(_releasing_locks(compare_cmd))
    app.command("demo")(demo)
    app.command("plot")(plot)
