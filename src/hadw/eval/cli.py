"""`hadw eval`, `hadw compare` and `hadw probe`: accuracy with pass@k, multi-seed comparisons with intervals,
and the bias of group-relative advantages measured on your own model's rollouts."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from hadw.errors import UserError
from hadw.eval.report import (
    PROBE_ADVANTAGE_COLUMNS,
    compare_rows,
    eval_rows,
    jsonable,
    markdown_table,
    probe_rows,
    rich_table,
)

DataOption = typer.Option(
    ...,
    "--data",
    "-d",
    help="task:<name> (addition, linear), benchmark:<name> (math500, aime25, amc23, minerva_math, "
    "olympiadbench, gsm8k) or a JSONL/parquet file or HF dataset folder. Repeat for several.",
)
DataDirOption = typer.Option(None, "--data-dir", help="Benchmark folder (default $HADW_SHARED_DATA or ../shared/data).")
ChatOption = typer.Option("auto", "--chat-template", help="auto (use the tokenizer's if it has one) | always | never.")
JsonOption = typer.Option(None, "--json", help="Write the results as JSON to this file ('-' = stdout).")


def _chat(value: str):
    if value not in ("auto", "always", "never"):
        raise typer.BadParameter(f"{value!r}; allowed: auto, always, never", param_hint="'--chat-template'")
    return {"auto": "auto", "always": True, "never": False}[value]


def _parse_ints(text: str, what: str) -> list[int]:
    """ "0,1,2" or "0-4" (inclusive) or a mix: "0-2,7"."""
    out: list[int] = []
    try:
        for token in filter(None, text.replace(" ", "").split(",")):
            lo, sep, hi = token.partition("-")
            out += list(range(int(lo), int(hi) + 1)) if sep and lo else [int(token)]
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected integers like 0,1,2 or 0-4", param_hint=what) from None
    return out


def _load_sources(data, data_dir, limit, levels: str | None, template, reward, max_new_tokens, seed):
    """The --data sources, with --levels parsed; bad input becomes a usage error naming the option."""
    from hadw.eval.data import load_source

    levels = _parse_ints(levels, "'--levels'") if levels else None

    try:
        return [
            load_source(
                spec, data_dir, limit, levels, seed, template=template, reward=reward, max_new_tokens=max_new_tokens
            )
            for spec in data
        ]
    except (ValueError, FileNotFoundError) as err:
        if isinstance(err, UserError):
            raise
        raise UserError(f"--data: {err}") from None  # one line, exit 2 (hadw.cli.handle_user_errors)


def _load_model(model: Path, dtype: str, device: str):
    from hadw.rollout import load_model

    try:
        return load_model(model, dtype, device)
    except (FileNotFoundError, ValueError, OSError) as err:
        raise UserError(f"MODEL {model}: {err}") from None  # one line, exit 2 (hadw.cli.handle_user_errors)


def _write_json(path: str | None, data: dict) -> None:
    data = jsonable(data)
    if path == "-":
        typer.echo(json.dumps(data, indent=1))
    elif path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def _bar(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, dynamic_ncols=True, leave=False)


def eval_cmd(
    model: Path = typer.Argument(..., help="A local model folder (any HF causal LM, or a run's final_model/)."),
    data: list[str] = DataOption,
    data_dir: str = DataDirOption,
    k: int = typer.Option(1, "--k", "-k", help="Samples per problem for avg@k and pass@k (1 = greedy only)."),
    temperature: float = typer.Option(1.0, "--temperature", "-t", help="Sampling temperature of the k samples."),
    top_p: float = typer.Option(1.0, "--top-p"),
    pass_k: str = typer.Option("1", "--pass-k", help="Comma-separated j for unbiased pass@j (j <= k)."),
    limit: int = typer.Option(None, "--limit", help="First N problems per source (tasks: N items, default 200)."),
    levels: str = typer.Option(None, "--levels", help="Built-in tasks: comma-separated levels (default all)."),
    template: str = typer.Option("auto", "--template", help="Prompt template (auto: plain for tasks, paper else)."),
    reward: str = typer.Option("auto", "--reward", help="Verifier (auto: exact for tasks, math else)."),
    max_new_tokens: int = typer.Option(None, "--max-new-tokens", help="Default: 16 for tasks, 2048 else."),
    batch_size: int = typer.Option(64, "--batch-size", help="Problems per generation batch."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed (tasks: also picks the held-out items)."),
    chat_template: str = ChatOption,
    dtype: str = typer.Option("float32", "--dtype"),
    device: str = typer.Option("auto", "--device"),
    json_path: str = JsonOption,
    markdown: Path = typer.Option(None, "--markdown", "--md", help="Write the table as markdown to this file."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Greedy accuracy, avg@k at a temperature and unbiased pass@k, per source and difficulty level."""
    from hadw.eval.evaluate import evaluate_sources

    if k < 1:
        raise typer.BadParameter("must be >= 1", param_hint="'--k'")
    pass_ks = _parse_ints(pass_k, "'--pass-k'")
    if any(not 1 <= j <= k for j in pass_ks):
        raise typer.BadParameter(f"every j must satisfy 1 <= j <= k={k}; got {pass_ks}", param_hint="'--pass-k'")
    sources = _load_sources(data, data_dir, limit, levels, template, reward, max_new_tokens, seed)
    lm, tokenizer = _load_model(model, dtype, device)
    total = sum(len(s.problems) for s in sources) * (2 if k > 1 else 1)
    bar = _bar(total, "eval") if progress else None
    try:
        result = evaluate_sources(
            lm,
            tokenizer,
            sources,
            k,
            temperature,
            top_p,
            pass_ks,
            batch_size,
            seed,
            _chat(chat_template),
            bar.update if bar else None,
        )
    finally:
        if bar:
            bar.close()
    headers, rows = eval_rows(result.buckets)
    title = f"{model}: greedy" + (f", avg@{k} and pass@k at T={temperature:g}" if result.sampled is not None else "")
    if markdown:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(f"# {title}\n\n" + markdown_table(headers, rows), encoding="utf-8")
    _write_json(json_path, {"model": str(model), **result.to_dict()})
    if json_path != "-":
        Console().print(rich_table(title, headers, rows))


def compare_cmd(
    config: Path = typer.Option(None, "--config", "-c", help="Base YAML config of every run."),
    arm: list[str] = typer.Option(
        [],
        "--arm",
        "-a",
        help="NAME:OVERRIDES, e.g. 'grpo:' or 'hadw:hadw.enabled=true' or 'g16:rollout.group_size=16'. The first is "
        "the baseline unless --baseline. Repeat for each arm; omit all to collect the arms already in --out.",
    ),
    seeds: str = typer.Option(
        None, "--seeds", help="Seeds, e.g. 0,1,2 or 0-4; each arm runs every one (default 0-4; collect: all found)."
    ),
    override: list[str] = typer.Option([], "--set", "-s", help="key=value applied to every arm (repeat)."),
    out: Path = typer.Option(Path("runs/compare"), "--out", "-o", help="Folder of the runs and the reports."),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Runs in parallel (separate processes, 1 torch thread each)."),
    collect_only: bool = typer.Option(False, "--collect-only", help="Do not train; aggregate what is in --out."),
    baseline: str = typer.Option(None, "--baseline", help="Arm the others are compared with (default: the first)."),
    metric: list[str] = typer.Option(["avg@k"], "--metric", help="Final eval metric name(s) to compare."),
    curve_metric: list[str] = typer.Option(["reward/accuracy"], "--curve", help="Per-step metric(s) to plot."),
    smooth: int = typer.Option(5, "--smooth", help="Moving average window of the learning curves."),
    confidence: float = typer.Option(0.95, "--confidence"),
    method: str = typer.Option("t", "--interval", help="t (Student t over seeds) | bootstrap (percentile)."),
    json_path: str = JsonOption,
) -> None:
    """Run (or collect) N seeds × several configs; report means, intervals and seed-paired differences."""
    from hadw.eval import compare as cmp
    from hadw.eval.plots import plot_compare

    if method not in ("t", "bootstrap"):
        raise typer.BadParameter(f"{method!r}; allowed: t, bootstrap", param_hint="'--interval'")
    if not 0 < confidence < 1:
        raise typer.BadParameter("must be in (0, 1)", param_hint="'--confidence'")
    seed_list = _parse_ints(seeds or "0,1,2,3,4", "'--seeds'")
    if arm and not collect_only:
        try:
            arms = [cmp.parse_arm(a) for a in arm]
            specs = cmp.plan_runs(config, arms, seed_list, out, override)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="'--arm'") from None
        if config is not None and not config.is_file():
            raise typer.BadParameter(f"config file not found: {config}", param_hint="'--config'")
        cmp.write_manifest(out, arms, seed_list, config, override)
        bar = _bar(len(specs), f"runs ({jobs} at a time)")
        statuses = cmp.run_all(specs, jobs, lambda r: (bar.update(1), bar.set_postfix_str(f"{r['arm']}/{r['seed']}")))
        bar.close()
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
    runs = cmp.collect_runs(out, names, seed_list)
    for r in failed:  # e.g. a run dir made with another config: never report it as this one
        runs[r["arm"]].pop(r["seed"], None)
    try:
        result = cmp.aggregate(runs, baseline, metric, confidence, method)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="'--baseline'") from None
    if not result.metrics:
        raise typer.BadParameter(f"no finished runs with final eval metrics {metric} under {out}", param_hint="'--out'")
    png = plot_compare(out / "compare.png", runs, result, curve_metric, metric[0], smooth)
    sections = []
    for name in metric:
        headers, rows = compare_rows(result, name)
        sections.append(f"## final {name}\n\n" + markdown_table(headers, rows))
        if json_path != "-":
            Console().print(rich_table(f"final {name}: mean [{confidence:.0%} {method} CI] over seeds", headers, rows))
    missing = {a: s for a, s in result.missing.items() if s}
    note = f"\nUnfinished runs (left out): {missing}\n" if missing else ""
    (out / "compare.md").write_text(
        f"# Comparison over seeds {seed_list} ({confidence:.0%} {method} intervals; differences paired by seed)\n\n"
        + "\n".join(sections)
        + note
        + f"\n![curves]({png.name})\n",
        encoding="utf-8",
    )
    (out / "compare.json").write_text(json.dumps(jsonable(result.to_dict()), indent=1) + "\n", encoding="utf-8")
    _write_json(json_path, result.to_dict())
    if json_path != "-":
        typer.echo(f"wrote {out / 'compare.md'}, {out / 'compare.json'}, {png}")
    if failed:
        raise typer.Exit(1)


def probe_cmd(
    model: Path = typer.Argument(..., help="A local model folder."),
    data: list[str] = DataOption,
    data_dir: str = DataDirOption,
    group_size: int = typer.Option(8, "--group-size", "-G", help="G: the small group GRPO uses."),
    reference: int = typer.Option(128, "--reference", "-N", help="N: samples whose success rate stands in for p."),
    groups: int = typer.Option(1, "--groups", help="Independent groups of G per prompt (more = tighter estimates)."),
    limit: int = typer.Option(64, "--limit", help="Prompts per source."),
    levels: str = typer.Option(None, "--levels", help="Built-in tasks: comma-separated levels (default all)."),
    temperature: float = typer.Option(1.0, "--temperature", "-t"),
    top_p: float = typer.Option(1.0, "--top-p"),
    template: str = typer.Option("auto", "--template"),
    reward: str = typer.Option("auto", "--reward"),
    max_new_tokens: int = typer.Option(None, "--max-new-tokens", help="Default: 16 for tasks, 2048 else."),
    edges: str = typer.Option("0,0.125,0.25,0.5,0.75,0.875,1", "--edges", help="p_ref bucket edges."),
    seed: int = typer.Option(0, "--seed"),
    chat_template: str = ChatOption,
    dtype: str = typer.Option("float32", "--dtype"),
    device: str = typer.Option("auto", "--device"),
    png: Path = typer.Option(Path("probe.png"), "--png", help="Figure path."),
    json_path: str = JsonOption,
) -> None:
    """Figure 1(b) on your model: group-of-G vs N-sample advantages per difficulty, beside the theory's bias."""
    from hadw.eval.plots import plot_probe
    from hadw.eval.probe import model_sampler, probe_stats, sample_probe

    try:
        edge_list = [float(e) for e in edges.split(",")]
    except ValueError:
        raise typer.BadParameter(f"{edges!r}: expected comma-separated numbers", param_hint="'--edges'") from None
    if group_size < 2 or reference < 1 or groups < 1:
        raise typer.BadParameter("need --group-size >= 2, --reference >= 1, --groups >= 1")
    sources = _load_sources(data, data_dir, limit, levels, template, reward, max_new_tokens, seed)
    lm, tokenizer = _load_model(model, dtype, device)
    n = groups * group_size + reference
    bar = _bar(sum(len(s.problems) for s in sources), f"probe ({n} samples/prompt)")
    parts, problems = [], []
    try:
        for source in sources:
            sampler = model_sampler(
                lm,
                tokenizer,
                source.template,
                source.reward,
                temperature,
                top_p,
                source.max_new_tokens,
                use_chat_template=_chat(chat_template),
                progress=bar.update,
            )
            parts.append(sample_probe(sampler, source.problems, group_size, reference, groups, seed))
            problems += source.problems
    finally:
        bar.close()
    import numpy as np

    try:
        report = probe_stats(
            np.concatenate([g for g, _ in parts]), np.concatenate([r for _, r in parts]), problems, edge_list
        )
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="'--edges'") from None
    plot_probe(png, report)
    _write_json(
        json_path, {"model": str(model), "data": data, "temperature": temperature, "png": str(png), **report.to_dict()}
    )
    if json_path != "-":
        console = Console()
        headers, rows = probe_rows(report.buckets)
        title = (
            f"Bias of the group baseline: A − Â = p̂ − p_ref in groups of G={group_size} with a gradient, p_ref from "
        )
        title += f"N={reference} samples; under/over: share of those groups whose advantage is under/over-estimated"
        console.print(rich_table(title, headers, rows))
        headers, rows = probe_rows(report.buckets, PROBE_ADVANTAGE_COLUMNS)
        title = "Mean advantage of correct / wrong responses, (r − mean) / std: group of G (Â) vs reference (A)"
        console.print(rich_table(title, headers, rows))
        typer.echo(f"wrote {png}")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)
    app.command("compare")(compare_cmd)
    app.command("probe")(probe_cmd)
