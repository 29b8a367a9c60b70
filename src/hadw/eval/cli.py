"""`hadw eval` and `hadw probe`: accuracy with pass@k, and the bias of group-relative advantages measured on your
own model's rollouts."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from hadw.cli_lists import check_range, parse_ints
from hadw.errors import UserError
from hadw.eval.report import (
    PROBE_ADVANTAGE_COLUMNS,
    completion_notes,
    eval_rows,
    jsonable,
    markdown_table,
    no_informative_group_note,
    probe_rows,
    rich_table,
)
from hadw.progress import stdout_console

DataOption = typer.Option(
    "--data",
    "-d",
    help="task:<name> (addition, linear, sums), benchmark:<name> (math500, aime25, amc23, minerva_math, "
    "olympiadbench, gsm8k), hf:ORG/NAME[:split], or a JSONL/parquet file or HF dataset folder. Repeat for several.",
)
DataDirOption = typer.Option(
    "--data-dir",
    help="Benchmark folder (default: $HADW_SHARED_DATA, ~/.cache/hadw/data; else the Hub).",
)
ChatOption = typer.Option("--chat-template", help="auto (use the tokenizer's if it has one) | always | never.")
JsonOption = typer.Option("--json", help="Write the results as JSON to this file ('-' = stdout).")


def _chat(value: str):
    if value not in ("auto", "always", "never"):
        raise typer.BadParameter(f"{value!r}; allowed: auto, always, never", param_hint="'--chat-template'")
    return {"auto": "auto", "always": True, "never": False}[value]


PromptFieldOption = typer.Option("--prompt-field", help="Your data's question field (dotted path: a.b).")
AnswerFieldOption = typer.Option("--answer-field", help="Your data's gold-answer field (dotted path).")
LevelFieldOption = typer.Option("--level-field", help="Your data's difficulty-level field (optional).")
TrustOption = typer.Option("--trust-remote-code", help="Run the model repository's own code (if you trust it).")
SystemOption = typer.Option(
    "--system-prompt",
    help="A system turn before every prompt (chat templates; a row's own system turn is kept). Default: a run "
    "folder's data.system_prompt, else none (the chat template's own default).",
)


ModelArgument = typer.Argument(
    help="A model folder (any HF causal LM), a Hub id, or a run folder of `hadw train`: then the run's own data, "
    "template, chat template, fields, reward and answer length are the defaults (each option still overrides)."
)


def _with_run(model: str, data, data_dir, template, reward, max_new_tokens, chat_template, fields, levels, limit,
              seed):  # fmt: skip
    """MODEL as a run folder: its recipe (hadw.eval.run_recipe) fills every option left at its default."""
    from hadw.eval.run_recipe import is_run_dir, read_run

    if not is_run_dir(model):
        if not data:
            message = "give at least one --data source (or a run folder as MODEL)"
            raise typer.BadParameter(message, param_hint="'--data'")
        return model, data, data_dir, template, reward, max_new_tokens, chat_template, fields, levels, limit, seed
    run = read_run(model)
    if reward == "auto" and ":" in run.reward.name:  # a run folder's config is data: its reward only if trusted
        from hadw.rewards.trust import check_saved, import_from

        folder = check_saved(run.reward.name, Path(model), str(Path(model) / "config.yaml"))
        if folder is not None:
            import_from(run.reward.name, folder)
    task = run.data.startswith("task:")
    return (
        str(run.model),
        data or [run.data],
        data_dir if data_dir is not None else (run.data_dir or None),
        run.template if template == "auto" else template,
        run.reward if reward == "auto" else reward,
        max_new_tokens or run.max_new_tokens,
        run.chat_template if chat_template == "auto" else chat_template,
        fields if any(fields) else run.fields,
        levels if levels is not None or not (task and run.levels) else ",".join(map(str, run.levels)),
        # a task's held-out items the trainer scored; a file's are picked from the whole file (_trainer_held_out)
        limit if limit is not None or not task else run.eval_size,
        seed if seed != 0 else run.seed,  # a task's held-out items follow the run's seed
    )


def _run_dir(model: str) -> str | None:
    """MODEL when it is a run folder of `hadw train` (its weights may change while it trains), else None."""
    from hadw.eval.run_recipe import is_run_dir

    return model if is_run_dir(model) else None


def _trainer_held_out(sources, run_dir: str) -> None:
    """A run's own file source: the rows its trainer held out and scored (hadw.data.split_held_out), not the first
    data.eval_size rows of the file (some of which it trained on)."""
    from hadw.data import split_held_out
    from hadw.eval.run_recipe import read_run

    eval_size = read_run(run_dir).eval_size
    for source in sources:
        if not source.name.startswith("task:"):
            source.problems = split_held_out(source.problems, eval_size)[1]


def _add_system_prompt(sources, system_prompt: str | None, run_dir: str | None) -> None:
    """--system-prompt (default: the run's data.system_prompt) as every problem's first chat turn."""
    from hadw.data import with_system_prompt
    from hadw.eval.run_recipe import read_run

    if system_prompt is None and run_dir is not None:
        system_prompt = read_run(run_dir).system_prompt
    for source in sources:
        source.problems = with_system_prompt(source.problems, system_prompt or "")


def _load_sources(
    data, data_dir, limit, levels: str | None, template, reward, max_new_tokens, seed, field_names=(None, None, None)
):
    """The --data sources, with --levels and the --*-field names parsed; bad input becomes a usage error
    naming the option."""
    from hadw.data import make_fields
    from hadw.eval.data import load_source

    levels = parse_ints(levels, "--levels") if levels is not None else None
    if template != "auto":
        from hadw.data.templates import fill_template

        try:
            fill_template("x", template)
        except (ValueError, KeyError, IndexError) as err:
            message = f"{template!r} is not a template name nor a format string with {{question}}: {err}"
            raise typer.BadParameter(message, param_hint="'--template'") from None
    try:
        fields = make_fields("auto", *field_names)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="'--prompt-field' / '--answer-field'") from None
    try:
        return [
            load_source(
                spec,
                data_dir,
                limit,
                levels,
                seed,
                fields=fields,
                template=template,
                reward=reward,
                max_new_tokens=max_new_tokens,
            )
            for spec in data
        ]
    except (ValueError, FileNotFoundError) as err:
        raise UserError(f"--data: {err}") from None  # one line, exit 2 (hadw.cli.handle_user_errors)


def _say_length_limit(command: str, data: list[str], max_new_tokens: int | None) -> None:
    """With no --max-new-tokens (and no run folder's own limit), a dataset gets the default limit for a chain of
    thought: say it on stderr before generating, as hadw's first line. A bare model that never stops writes that
    many tokens per answer, minutes per batch on a CPU, and a silent wait looks like a hang (issue 33). Said once
    the data and the model have loaded, so that a bad --data or MODEL stays a one-line error."""
    from hadw.data.sources import DATASET_RECIPE, default_recipe

    datasets = [spec for spec in data if default_recipe(spec) is DATASET_RECIPE]
    if max_new_tokens is None and datasets:
        typer.echo(
            f"{command}: up to {DATASET_RECIPE.max_new_tokens} new tokens per answer on {', '.join(datasets)} "
            "(the default for a dataset: room for a chain of thought); --max-new-tokens N to change it",
            err=True,
        )


def _reward_name(reward) -> str:
    """A source's reward: a name, or a run's RewardRecipe."""
    return getattr(reward, "name", reward)


def _check_options(temperature, top_p, limit, max_new_tokens, device, dtype, chat_template, reward) -> None:
    """The options eval and probe share, checked before any data or model is loaded (usage errors naming
    the option)."""
    from hadw.rewards import resolve_reward

    check_range("--temperature", temperature, 0.0, 100.0)
    check_range("--top-p", top_p, 0.0, 1.0, low_open=True)
    check_range("--limit", limit, 1)
    check_range("--max-new-tokens", max_new_tokens, 1)
    for option, value, allowed in (
        ("--device", device, ("auto", "cpu", "cuda")),
        ("--dtype", dtype, ("float32", "bfloat16")),
    ):
        if value not in allowed:
            raise typer.BadParameter(f"{value!r}; allowed: {', '.join(allowed)}", param_hint=f"'{option}'")
    _chat(chat_template)
    if reward != "auto":
        try:
            resolve_reward(reward)
        except ValueError as err:
            raise typer.BadParameter(" ".join(str(err).split()), param_hint="'--reward'") from None


def _engine(model, tokenizer, memory_budget_gb: float | None):
    """The rollout engine of eval / probe; its chunks fit `memory_budget_gb` (None: half the free memory)."""
    from hadw.rollout import HFRolloutEngine

    _check_budget(memory_budget_gb)
    return HFRolloutEngine(model, tokenizer, memory_budget_gb=memory_budget_gb)


def _check_budget(memory_budget_gb: float | None) -> None:
    """--memory-budget-gb, checked with the other options: before the data, the model and the progress lines."""
    if memory_budget_gb is not None and not memory_budget_gb > 0:
        raise typer.BadParameter(f"{memory_budget_gb}; allowed: > 0", param_hint="'--memory-budget-gb'")


def _load_model(model: str, dtype: str, device: str, trust_remote_code: bool = False, run_dir: str | None = None):
    """(model, tokenizer, the path loaded), in memory. run_dir: MODEL was that run folder's newest weights; a
    running trainer may prune that checkpoint (checkpoint.keep_last) while it loads: then the run's newest weights
    are looked up again (up to 3 times), never a half-read checkpoint. Any other failure is one line, exit 2."""
    from hadw.eval.run_recipe import read_run
    from hadw.rollout import load_model
    from hadw.rollout.models import model_load_error

    for _ in range(3):
        try:
            return (*load_model(model, dtype, device, trust_remote_code=trust_remote_code), model)
        except Exception as err:  # missing, damaged or mismatched: one line, exit 2
            if run_dir is not None and str(newer := read_run(run_dir).model) != model:
                model = str(newer)  # pruned under us by the trainer (or being pruned): its newer weights
                continue
            line = str(err) if isinstance(err, UserError | FileNotFoundError) else model_load_error(err)
            raise UserError(f"MODEL {model}: {line}") from None
    raise UserError(f"MODEL {run_dir}: its checkpoints were pruned three times while loading; try again")


OverwriteOption = typer.Option(
    "--overwrite", help="Replace existing output files that hadw did not write (they are refused otherwise)."
)
# An eval samples row as json.dumps writes it (evaluate.py): how an existing --samples file is recognised as one
# `hadw eval` wrote (a run's training samples.jsonl, or the user's own file, is not).
_SAMPLES_ROW = re.compile(
    rb'^\{(?:"mode": "[a-z]+", )?"source": "(?:[^"\\]|\\.)*", "level": [^,]*, "index": \d+, "sample": \d+, '
    rb'"temperature": '
)


def owned_samples(data: bytes) -> bool:
    """True when `data` (a file's first bytes) starts with an eval samples row."""
    return _SAMPLES_ROW.match(data) is not None


def _refuse_run_file(path: Path, option: str) -> None:
    """A run folder's own files are never an output file: `hadw eval RUN --samples samples.jsonl` run inside the
    run folder must not replace its training log, --overwrite or not."""
    from hadw.metrics import is_run_file

    if is_run_file(path):
        raise UserError(
            f"{option} {path}: that is the run's own {path.name}, written by hadw train; choose another file"
        )


def write_output(path: str | Path, text: str, option: str, owned: Callable[[bytes], bool], overwrite: bool) -> None:
    """Write an output file the user named (hadw.safe_files.write_output), never one of a run folder's own files."""
    from hadw.safe_files import write_output as safe_write

    _refuse_run_file(Path(path), option)
    safe_write(Path(path), text, option, owned, overwrite)


def _write_json(path: str | None, data: dict, command: str = "eval", overwrite: bool = False) -> None:
    """The report as JSON: to stdout ('-') or a file whose first key says which hadw command wrote it."""
    from hadw.safe_files import owned_json

    data = {"written_by": f"hadw {command}", **jsonable(data)}
    if path == "-":
        typer.echo(json.dumps(data, indent=1))
    elif path:
        write_output(path, json.dumps(data, indent=1) + "\n", "--json", owned_json(command), overwrite)


def _check_outputs(
    samples: Path | None, markdown: Path | None, json_path: str | None, overwrite: bool, command: str = "eval"
) -> None:
    """Each output file of `hadw eval` / `probe` may be written (write_output's checks), checked before the
    model runs."""
    from hadw.safe_files import check_output, owned_json, owned_markdown

    outputs = [("--samples", samples, owned_samples), ("--markdown", markdown, owned_markdown("eval"))]
    outputs.append(("--json", Path(json_path) if json_path not in (None, "-") else None, owned_json(command)))
    paths = [p.resolve() for _, p, _ in outputs if p is not None]
    if len(set(paths)) != len(paths):
        raise UserError("--samples, --markdown and --json name the same file; give each its own")
    for option, path, owned in outputs:
        if path is not None:
            _refuse_run_file(path, option)
            check_output(path, option, owned, overwrite)


def _bar(total: int, desc: str, unit: str, mode: bool | str = "auto"):
    """The command's progress display (hadw.progress): a bar on a terminal, a plain line every 10 s elsewhere."""
    from hadw.progress import Bar

    return Bar(total, desc, mode=mode, unit=unit)


def eval_cmd(
    model: Annotated[str, ModelArgument],
    data: Annotated[list[str] | None, DataOption] = None,
    data_dir: Annotated[str | None, DataDirOption] = None,
    prompt_field: Annotated[str | None, PromptFieldOption] = None,
    answer_field: Annotated[str | None, AnswerFieldOption] = None,
    level_field: Annotated[str | None, LevelFieldOption] = None,
    trust_remote_code: Annotated[bool, TrustOption] = False,
    k: Annotated[
        int, typer.Option("--num-samples", "-k", help="k: samples per problem for avg@k and pass@k (1 = greedy only).")
    ] = 1,
    temperature: Annotated[
        float, typer.Option("--temperature", "-t", help="Sampling temperature of the k samples.")
    ] = 1.0,
    top_p: Annotated[
        float, typer.Option("--top-p", help="Nucleus sampling: keep the smallest token set of this mass.")
    ] = 1.0,
    pass_k: Annotated[str, typer.Option("--pass-k", help="Comma-separated j for unbiased pass@j (j <= k).")] = "1",
    limit: Annotated[
        int | None, typer.Option("--limit", help="First N problems per source (tasks: N items, default 200).")
    ] = None,
    levels: Annotated[
        str | None, typer.Option("--levels", help="Built-in tasks: comma-separated levels (default all).")
    ] = None,
    template: Annotated[
        str, typer.Option("--template", help="Prompt template (auto: plain for tasks, paper else).")
    ] = "auto",
    reward: Annotated[str, typer.Option("--reward", help="Verifier (auto: exact for tasks, math else).")] = "auto",
    max_new_tokens: Annotated[
        int | None,
        typer.Option("--max-new-tokens", help="Default: 16 for tasks, 2048 else (said on the first line)."),
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Problems per generation batch.")] = 64,
    memory_budget_gb: Annotated[
        float | None,
        typer.Option("--memory-budget-gb", help="Memory one generate chunk may use (default: half the free memory)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed (tasks: also picks the held-out items).")] = 0,
    chat_template: Annotated[str, ChatOption] = "auto",
    system_prompt: Annotated[str | None, SystemOption] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="Weights dtype: float32 | bfloat16.")] = "float32",
    device: Annotated[str, typer.Option("--device", help="auto (cuda when available) | cpu | cuda.")] = "auto",
    json_path: Annotated[str | None, JsonOption] = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", "--md", help="Write the table as markdown to this file.")
    ] = None,
    samples: Annotated[
        Path | None,
        typer.Option(
            "--samples",
            help="Write every completion as JSONL (prompt, completion, extracted answer, gold, score, finish reason, "
            "tokens) to this file, to see why a score is what it is.",
        ),
    ] = None,
    progress: Annotated[
        bool,
        typer.Option(
            "--progress/--no-progress",
            help="Show the progress: a bar on a terminal, a plain line every 10 s elsewhere (HADW_PROGRESS=lines|bar).",
        ),
    ] = True,
    overwrite: Annotated[bool, OverwriteOption] = False,
) -> None:
    """Greedy accuracy, avg@k at a temperature and unbiased pass@k, per source and difficulty level."""
    if k < 1:
        raise typer.BadParameter("must be >= 1", param_hint="'--num-samples'")
    _check_options(temperature, top_p, limit, max_new_tokens, device, dtype, chat_template, reward)
    check_range("--batch-size", batch_size, 1)
    _check_budget(memory_budget_gb)
    pass_ks = parse_ints(pass_k, "--pass-k")
    if any(not 1 <= j <= k for j in pass_ks):
        raise typer.BadParameter(f"every j must satisfy 1 <= j <= k={k}; got {pass_ks}", param_hint="'--pass-k'")
    _check_outputs(samples, markdown, json_path, overwrite)  # before minutes of generation, not after
    fields = (prompt_field, answer_field, level_field)
    run_dir, given_data = _run_dir(model), data
    model, data, data_dir, template, reward, max_new_tokens, chat_template, fields, levels, limit, seed = _with_run(
        model, data, data_dir, template, reward, max_new_tokens, chat_template, fields, levels, limit, seed
    )
    sources = _load_sources(data, data_dir, limit, levels, template, reward, max_new_tokens, seed, fields)
    if run_dir is not None and given_data is None and limit is None:
        _trainer_held_out(sources, run_dir)
    _add_system_prompt(sources, system_prompt, run_dir)
    # imported after the option checks: a bad option is one line without torch (tests/test_cli_startup.py)
    from hadw.eval.evaluate import evaluate_sources

    lm, tokenizer, model = _load_model(model, dtype, device, trust_remote_code, run_dir)
    _say_length_limit("eval", data, max_new_tokens)
    total = sum(len(s.problems) for s in sources) * (2 if k > 1 else 1)
    bar = _bar(total, "eval", "problem", progress)
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
            bar.update,
            engine=_engine(lm, tokenizer, memory_budget_gb),
        )
    finally:
        bar.close()
    headers, rows = eval_rows(result.buckets)
    title = f"{model}: greedy" + (f", avg@{k} and pass@k at T={temperature:g}" if result.sampled is not None else "")
    notes = completion_notes(result.stats, result.reward_failures)
    if samples:
        text = "".join(json.dumps(jsonable(r), ensure_ascii=False) + "\n" for r in result.samples)
        write_output(samples, text, "--samples", owned_samples, overwrite)
        notes.append(f"wrote {len(result.samples)} completions to {samples}")
    if markdown:
        from hadw.safe_files import markdown_marker, owned_markdown

        text = f"# {title}\n\n" + markdown_table(headers, rows) + "".join(f"\n{n}\n" for n in notes)
        write_output(markdown, markdown_marker("eval") + text, "--markdown", owned_markdown("eval"), overwrite)
    _write_json(json_path, {"model": str(model), **result.to_dict()}, "eval", overwrite)
    if json_path != "-":
        console = stdout_console()
        console.print(rich_table(title, headers, rows))
        for note in notes:
            console.print(note, markup=False, highlight=False)
    if result.reward_failures:  # after the outputs (they record it): a script must not read the table as scores
        raise typer.Exit(1)


def probe_cmd(
    model: Annotated[str, ModelArgument],
    data: Annotated[list[str] | None, DataOption] = None,
    data_dir: Annotated[str | None, DataDirOption] = None,
    prompt_field: Annotated[str | None, PromptFieldOption] = None,
    answer_field: Annotated[str | None, AnswerFieldOption] = None,
    level_field: Annotated[str | None, LevelFieldOption] = None,
    trust_remote_code: Annotated[bool, TrustOption] = False,
    group_size: Annotated[int, typer.Option("--group-size", "-G", help="G: the small group GRPO uses.")] = 8,
    reference: Annotated[
        int, typer.Option("--reference", "-N", help="N: samples whose success rate stands in for p.")
    ] = 128,
    groups: Annotated[
        int, typer.Option("--groups", help="Independent groups of G per prompt (more = tighter estimates).")
    ] = 1,
    limit: Annotated[int, typer.Option("--limit", help="Prompts per source.")] = 64,
    levels: Annotated[
        str | None, typer.Option("--levels", help="Built-in tasks: comma-separated levels (default all).")
    ] = None,
    temperature: Annotated[
        float, typer.Option("--temperature", "-t", help="Sampling temperature of every sample.")
    ] = 1.0,
    top_p: Annotated[
        float, typer.Option("--top-p", help="Nucleus sampling: keep the smallest token set of this mass.")
    ] = 1.0,
    template: Annotated[
        str, typer.Option("--template", help="Prompt template (auto: plain for tasks, paper else).")
    ] = "auto",
    reward: Annotated[str, typer.Option("--reward", help="Verifier (auto: exact for tasks, math else).")] = "auto",
    max_new_tokens: Annotated[
        int | None, typer.Option("--max-new-tokens", help="Default: 16 for tasks, 2048 else.")
    ] = None,
    edges: Annotated[str, typer.Option("--edges", help="p_ref bucket edges.")] = "0,0.125,0.25,0.5,0.75,0.875,1",
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="Rows (samples) per generate call, before the memory split.")
    ] = 4096,
    memory_budget_gb: Annotated[
        float | None,
        typer.Option("--memory-budget-gb", help="Memory one generate chunk may use (default: half the free memory)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed (tasks: also picks the held-out items).")] = 0,
    chat_template: Annotated[str, ChatOption] = "auto",
    system_prompt: Annotated[str | None, SystemOption] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="Weights dtype: float32 | bfloat16.")] = "float32",
    device: Annotated[str, typer.Option("--device", help="auto (cuda when available) | cpu | cuda.")] = "auto",
    png: Annotated[Path, typer.Option("--png", help="Figure path.")] = Path("probe.png"),
    json_path: Annotated[str | None, JsonOption] = None,
    overwrite: Annotated[bool, OverwriteOption] = False,
) -> None:
    """Figure 1(b) on your model: group-of-G vs N-sample advantages per difficulty, beside the theory's bias."""
    try:
        edge_list = [float(e) for e in edges.split(",")]
    except ValueError:
        raise typer.BadParameter(f"{edges!r}: expected comma-separated numbers", param_hint="'--edges'") from None
    if group_size < 2 or reference < 1 or groups < 1:
        raise typer.BadParameter("need --group-size >= 2, --reference >= 1, --groups >= 1")
    if not all(math.isfinite(e) for e in edge_list) or edge_list != sorted(edge_list) or len(edge_list) < 2:
        raise typer.BadParameter(f"{edges!r}: expected at least two increasing finite numbers", param_hint="'--edges'")
    _check_options(temperature, top_p, limit, max_new_tokens, device, dtype, chat_template, reward)
    check_range("--batch-size", batch_size, 1)
    _check_outputs(None, None, json_path, overwrite, "probe")
    from hadw.safe_files import check_figure

    check_figure(png, "--png", overwrite)  # before minutes of sampling, not after
    _check_budget(memory_budget_gb)
    fields = (prompt_field, answer_field, level_field)
    run_dir = _run_dir(model)
    model, data, data_dir, template, reward, max_new_tokens, chat_template, fields, levels, _, seed = _with_run(
        model, data, data_dir, template, reward, max_new_tokens, chat_template, fields, levels, limit, seed
    )
    sources = _load_sources(data, data_dir, limit, levels, template, reward, max_new_tokens, seed, fields)
    _add_system_prompt(sources, system_prompt, run_dir)
    # imported after the option checks: a bad option is one line without torch (tests/test_cli_startup.py)
    from hadw.eval.plots import plot_probe
    from hadw.eval.probe import model_sampler, probe_stats, sample_probe

    lm, tokenizer, model = _load_model(model, dtype, device, trust_remote_code, run_dir)
    _say_length_limit("probe", data, max_new_tokens)
    n = groups * group_size + reference
    bar = _bar(sum(len(s.problems) for s in sources), f"probe ({n} samples/prompt)", "prompt")
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
                max_rows=batch_size,
                use_chat_template=_chat(chat_template),
                progress=bar.update,
                engine=_engine(lm, tokenizer, memory_budget_gb),
            )
            parts.append(sample_probe(sampler, source.problems, group_size, reference, groups, seed))
            problems += source.problems
            if sampler.reward_failure is not None:  # the reward's failure, not a measurement of the model
                raise UserError(
                    f"probe: {source.name}: reward {_reward_name(source.reward)!r} failed on every completion of a "
                    f"batch ({sampler.reward_failure}); nothing to measure: fix the reward (or its data columns)"
                )
            if sampler.reward_errors:  # never a silent row of zeros
                typer.secho(
                    f"warning: {source.name}: the reward failed on {sampler.reward_errors} completions "
                    "(raised, timed out or returned a bad score; scored 0)",
                    fg="yellow",
                    err=True,
                )
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
        json_path,
        {"model": str(model), "data": data, "temperature": temperature, "png": str(png), **report.to_dict()},
        "probe",
        overwrite,
    )
    if json_path != "-":
        console = stdout_console()
        headers, rows = probe_rows(report.buckets)
        title = (
            f"Bias of the group baseline: A − Â = p̂ − p_ref in groups of G={group_size}, p_ref from N={reference} "
            "samples; grad: groups with a gradient (not all scored alike); under/over: share of those groups "
            "whose advantage is under/over-estimated"
        )
        console.print(rich_table(title, headers, rows))
        headers, rows = probe_rows(report.buckets, PROBE_ADVANTAGE_COLUMNS)
        title = (
            "Mean advantage of correct / wrong responses, (r − mean) / std (raw: r − mean): group of G (Â) vs "
            "reference of N (A)"
        )
        console.print(rich_table(title, headers, rows))
        note = no_informative_group_note(report.buckets["all"], group_size)
        if note:
            console.print(note, markup=False, highlight=False)
        typer.echo(f"wrote {png}")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)
    app.command("probe")(probe_cmd)
