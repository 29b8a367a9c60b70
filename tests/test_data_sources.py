"""The one source resolver (hadw.data.sources): the user's field names from config, CLI and Python, the
default data folders (never the current directory), the Hub fallback of benchmarks (offline error,
field mapping on a saved local Dataset standing in for the Hub) and `hadw data download`."""

from __future__ import annotations

import json
import re

import datasets
import pytest
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.data import (
    DatasetError,
    FieldMap,
    Problem,
    default_data_dirs,
    download,
    load_problems,
    make_fields,
    split_held_out,
)
from hadw.data.sources import HUB_FILE
from hadw.eval.data import load_source
from hadw.rollout import build_tiny_model
from hadw.train.config import Config, ConfigError, config_to_yaml, load_config
from hadw.train.prompts import PromptSource

ROWS = [
    {"query": "1+2", "solution": 3, "meta": {"difficulty": 1}, "extra": "a"},
    {"query": "40+2", "solution": "42", "meta": {"difficulty": "Level 2"}, "extra": "b"},
    {"query": "7-9", "solution": [-2], "meta": {"difficulty": 3}, "extra": "c"},
    {"query": "5+5", "solution": 10.0, "meta": {"difficulty": 1}, "extra": "d"},
    {"query": "2+2", "solution": "4", "meta": {"difficulty": 2}, "extra": "e"},
]
EXPECTED = [("1+2", "3", 1), ("40+2", "42", 2), ("7-9", "-2", 3), ("5+5", "10", 1), ("2+2", "4", 2)]
# Arrow columns hold one type: the Hub stand-in has string answers and integer levels.
HUB_ROWS = [{"query": q, "solution": a, "meta": {"difficulty": level}} for q, a, level in EXPECTED]
FIELDS = ["data.fields.prompt=query", "data.fields.answer=solution", "data.fields.level=meta.difficulty"]


def flat(text: str) -> str:
    """CLI output without the box drawing and line wrapping of rich's error panel."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.fixture
def quiz(tmp_path):
    path = tmp_path / "quiz.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_config_field_map_with_dotted_paths_feeds_training_and_held_out(quiz):
    cfg = load_config(None, [f"data.source={quiz}", *FIELDS, "data.eval_size=1"])
    source = PromptSource(cfg.data, seed=0)
    # One held-out rule: the first min(eval_size, len // 5) rows are evaluation rows.
    got = [(p.question, p.answer, p.level) for p in source.eval_problems() + source.problems]
    assert got == EXPECTED
    assert {p.source for p in source.problems} == {"quiz"}  # labelled after the file, not a layout
    assert source.problems[0].row["extra"] == "b"  # the raw row travels with the problem (reward columns)


def test_config_field_map_errors_name_the_key(quiz):
    with pytest.raises(ConfigError, match=r"the answer field is not set \(data.fields.answer"):
        load_config(None, [f"data.source={quiz}", "data.fields.prompt=query"])
    with pytest.raises(ConfigError, match=r"data.layout='mat' is not allowed"):
        load_config(None, ["data.layout=mat"])
    cfg = load_config(None, [f"data.source={quiz}", "data.fields.prompt=query", "data.fields.answer=answr"])
    with pytest.raises(DatasetError, match=r"quiz.jsonl:1: missing field 'answr' \(the row has: \['extra', 'meta'"):
        PromptSource(cfg.data, seed=0)


def test_field_map_set_from_python_is_used_and_saved_as_field_names(quiz):
    cfg = Config()
    cfg.data.source = str(quiz)
    cfg.data.layout = FieldMap("query", "solution", answer_fn=lambda v: f"<{v}>")
    answers = {p.answer for p in PromptSource(cfg.data, seed=0).problems}
    assert answers == {"<42>", "<[-2]>", "<10.0>", "<4>"}  # the first row is held out
    text = config_to_yaml(cfg)  # a run writes its config.yaml: a FieldMap is written as its field names
    assert "  layout: auto\n  fields:\n    prompt: query\n    answer: solution\n" in text
    assert cfg.to_dict()["data"]["fields"]["answer"] == "solution"


def test_split_held_out_and_task_held_out_stream_are_disjoint():
    problems = [Problem(str(i), str(i), None, "s", f"s:{i}") for i in range(12)]
    train, held = split_held_out(problems, eval_size=200)
    assert [p.uid for p in held] == ["s:0", "s:1"] and len(train) == 10  # 12 // 5 = 2
    assert split_held_out(problems, eval_size=0) == (problems, [])
    training = {p.uid for p in load_problems("task:addition", seed=3, limit=300)}
    evaluation = {p.uid for p in load_problems("task:addition", seed=3, limit=300, held_out=True)}
    assert len(training) == len(evaluation) == 300 and not training & evaluation


def test_default_data_folders_never_depend_on_the_current_directory(tmp_path, monkeypatch, shared_data):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HADW_SHARED_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_data_dirs() == [(tmp_path / "cache" / "hadw" / "data").resolve()]  # nothing from the cwd
    # Run from another folder, benchmark:math500 is found through $HADW_SHARED_DATA (no ../shared/data lookup).
    monkeypatch.setenv("HADW_SHARED_DATA", str(shared_data))
    assert default_data_dirs()[0] == shared_data.resolve()
    assert len(load_source("benchmark:math500", limit=3).problems) == 3


def test_benchmark_absent_and_offline_says_how_to_get_it(tmp_path):
    with pytest.raises(DatasetError) as err:
        load_problems("benchmark:math500", data_dir=tmp_path)
    message = str(err.value)
    assert "\n" not in message and "hf:HuggingFaceH4/MATH-500:test" in message
    assert "HF_HUB_OFFLINE" in message and "hadw data download math500 --out DIR" in message
    with pytest.raises(DatasetError, match=r"hf:org/name:train: cannot load it .*HF_HUB_OFFLINE"):
        load_problems("hf:org/name")
    with pytest.raises(DatasetError, match=r"expected hf:ORG/NAME"):
        load_problems("hf:noslash")


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """datasets.load_dataset answering from Datasets saved to disk, with the Hub copies' field names."""
    saved = {
        ("math-ai/amc23", None, "test"): [
            {"id": 0, "question": "How many?", "answer": 27.0, "url": "u"},
            {"id": 1, "question": "Which?", "answer": 3.5, "url": "v"},
        ],
        ("me/quiz", None, "test"): HUB_ROWS,
    }
    for i, rows in enumerate(saved.values()):
        datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / f"hub{i}"))
    paths = {key: tmp_path / f"hub{i}" for i, key in enumerate(saved)}
    calls = []

    def load_dataset(repo, config=None, split=None):
        calls.append((repo, config, split))
        if (repo, config, split) not in paths:
            raise ConnectionError(f"Couldn't reach '{repo}' on the Hub (OfflineModeIsEnabled)")
        return datasets.load_from_disk(str(paths[repo, config, split]))

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_benchmark_falls_back_to_the_hub_copy_with_its_field_names(fake_hub, tmp_path):
    problems = load_problems("benchmark:amc23", data_dir=tmp_path / "empty")
    got = [(p.question, p.answer, p.uid) for p in problems]
    assert got == [("How many?", "27", "amc23:0"), ("Which?", "3.5", "amc23:1")]
    assert fake_hub == [("math-ai/amc23", None, "test")]


def test_hf_source_with_user_fields_and_download_for_offline_use(fake_hub, tmp_path):
    fields = FieldMap("query", "solution", level="meta.difficulty")
    problems = load_problems("hf:me/quiz:test", fields)
    assert [(p.question, p.answer, p.level, p.source) for p in problems][1] == ("40+2", "42", 2, "quiz")
    path, rows = download("amc23", tmp_path / "dl")
    assert (path, rows) == (tmp_path / "dl" / "amc23" / HUB_FILE, 2)
    fake_hub.clear()
    # The downloaded copy is found in the data folder: no Hub call, the Hub copy's field names.
    local = load_problems("benchmark:amc23", data_dir=tmp_path / "dl")
    assert fake_hub == [] and [p.answer for p in local] == ["27", "3.5"]
    path, rows = download("hf:me/quiz:test", tmp_path / "dl")
    assert path == tmp_path / "dl" / "me__quiz" / "test.jsonl" and rows == 5
    assert [p.answer for p in load_problems(str(path), fields)] == [e[1] for e in EXPECTED]


def test_data_download_cli_offline_is_one_line_exit_2(tmp_path):
    result = CliRunner().invoke(build_app(), ["data", "download", "gsm8k", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "hf:openai/gsm8k:main:test: cannot load it from the Hugging Face Hub" in result.output
    assert not (tmp_path / "gsm8k").exists()


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), num_layers=1, hidden_size=32, intermediate_size=64)


def test_eval_cli_field_options_map_a_user_file_by_level(tiny_model_dir, quiz, tmp_path):
    out = tmp_path / "eval.json"
    args = ["eval", str(tiny_model_dir), "-d", str(quiz), "--prompt-field", "query", "--answer-field", "solution"]
    args += ["--level-field", "meta.difficulty", "--reward", "exact", "--max-new-tokens", "2", "--no-progress"]
    result = CliRunner().invoke(build_app(), [*args, "--chat-template", "never", "--json", str(out)])
    assert result.exit_code == 0, result.output
    buckets = json.loads(out.read_text())["buckets"]
    assert buckets["all"]["count"] == 5
    assert {k: v["count"] for k, v in buckets.items() if "/L" in k} == {"quiz/L1": 2, "quiz/L2": 2, "quiz/L3": 1}


def test_eval_and_probe_undetectable_file_suggest_the_field_options(tiny_model_dir, quiz):
    for command in ("eval", "probe"):
        result = CliRunner().invoke(build_app(), [command, str(tiny_model_dir), "-d", str(quiz)])
        assert result.exit_code == 2
        assert "--prompt-field/--answer-field" in flat(result.output) and "layout=" not in result.output
    result = CliRunner().invoke(build_app(), ["probe", str(tiny_model_dir), "-d", str(quiz), "--prompt-field", "query"])
    assert result.exit_code == 2 and "the answer field is not set" in flat(result.output)


class _Report:
    accuracy = 0.0

    def level_accuracy(self):
        return {}


def test_sft_and_the_trainer_hold_out_the_same_problems(tiny_model_dir, quiz, monkeypatch):
    import hadw.train.sft as sft
    from hadw.rollout import load_model
    from hadw.train.config import DataConfig

    seen = []
    monkeypatch.setattr(sft, "evaluate", lambda *a, **k: seen.append(([p.uid for p in a[2]], a[4])) or _Report())
    model, tokenizer = load_model(tiny_model_dir)
    sft.sft_warm_start(model, tokenizer, sft.SFTConfig(levels=[1, 2], max_steps=1, batch_size=2, eval_size=5, seed=4))
    trainer_side = PromptSource(DataConfig(source="task:addition", levels=[1, 2], eval_size=5), seed=4)
    assert seen[-1] == ([p.uid for p in trainer_side.eval_problems()], "exact")
    fields = make_fields(prompt="query", answer="solution")
    cfg = sft.SFTConfig(source=str(quiz), fields=fields, max_steps=1, batch_size=2, eval_size=1)
    sft.sft_warm_start(model, tokenizer, cfg)
    assert seen[-1] == (["quiz:0"], "math")  # a file's first row is its held-out row, scored by math
