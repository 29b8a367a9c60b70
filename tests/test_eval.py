"""`hadw eval`: pass@k against brute force, the merged greedy / avg@k / pass@k table, data specs, the CLI."""

from __future__ import annotations

import itertools
import json
from math import comb
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.data import make_task
from hadw.eval.data import load_source
from hadw.eval.evaluate import EvalReport, evaluate, evaluate_sources, extracted_answer, pass_at_k
from hadw.eval.report import bucket_order, completion_notes, eval_rows, markdown_table
from hadw.rollout import build_tiny_model, build_tiny_tokenizer


def flat(output: str) -> str:
    """CLI output without rich's box drawing and line wrapping."""
    return " ".join(output.replace("│", " ").split())


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_equals_brute_force_over_all_k_subsets(n):
    for c in range(n + 1):
        samples = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


def test_pass_at_k_known_values_and_errors():
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 − C(2,2)/C(4,2)
    assert pass_at_k(16, 1, 1) == pytest.approx(1 / 16)
    assert pass_at_k(10, 3, 8) == 1.0  # fewer than k wrong samples: every k-subset has a correct one
    for bad in ((4, 5, 1), (4, 2, 0), (4, 2, 5), (3, -1, 1)):
        with pytest.raises(ValueError, match="pass@k"):
            pass_at_k(*bad)


def fake_batch(texts: list[str], on_rows_done=None, truncated=()):
    """What an engine returns, for fakes: texts, finish reasons (rows in `truncated` hit the length limit) and a
    response mask of one token per character; each row reports itself finished, one at a time."""
    for _ in texts:
        if on_rows_done is not None:
            on_rows_done(1)
    lengths = torch.tensor([len(t) for t in texts])
    mask = (torch.arange(int(lengths.max())) < lengths[:, None]).long()
    return SimpleNamespace(
        response_texts=texts,
        finish_reasons=["length" if i in truncated else "stop" for i in range(len(texts))],
        response_mask=mask,
        response_ids=mask * 7,  # token ids, one per character (what rewards get as completion_ids)
    )


class OracleEngine:
    """A fake rollout engine with a known skill per level (module docstring of the test):
    greedy is right on levels 1–2; sample i is right on level 1 always, on level 2 when i is even, never on 3."""

    def __init__(self, tokenizer, problems):
        self.tokenizer = tokenizer
        self.by_prompt = {p.question + "=": p for p in problems}
        self.calls = []

    def generate(self, prompts, params, on_rows_done=None):
        self.calls.append(params)
        texts = []
        for ids in prompts:
            problem = self.by_prompt[self.tokenizer.decode(ids)]
            for i in range(params.n):
                right = problem.level == 1 or (problem.level == 2 and (params.temperature == 0 or i % 2 == 0))
                texts.append(problem.answer if right else problem.answer + "1")
        return fake_batch(texts, on_rows_done)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def test_evaluate_sources_greedy_avg_and_pass_at_k_by_level(tokenizer):
    source = load_source("task:addition", limit=60, levels=[1, 2, 3])
    engine = OracleEngine(tokenizer, source.problems)
    result = evaluate_sources(
        None,
        tokenizer,
        [source],
        k=4,
        temperature=0.7,
        pass_ks=(1, 2, 4),
        engine=engine,
        batch_size=16,
        use_chat_template=False,
    )
    b = result.buckets
    counts = {level: sum(p.level == level for p in source.problems) for level in (1, 2, 3)}
    assert b["all"]["count"] == 60 and sum(b[f"addition/L{lv}"]["count"] for lv in (1, 2, 3)) == 60
    assert b["addition/L1"] == {
        "count": counts[1],
        "greedy": 1.0,
        "avg@4": 1.0,
        "pass@1": 1.0,
        "pass@2": 1.0,
        "pass@4": 1.0,
    }
    assert b["addition/L2"]["greedy"] == 1.0 and b["addition/L2"]["avg@4"] == 0.5
    assert b["addition/L2"]["pass@2"] == pytest.approx(5 / 6) and b["addition/L2"]["pass@4"] == 1.0
    assert b["addition/L3"]["greedy"] == 0.0 and b["addition/L3"]["pass@4"] == 0.0
    assert b["all"]["greedy"] == pytest.approx((counts[1] + counts[2]) / 60)
    assert b["all"]["avg@4"] == pytest.approx((counts[1] + 0.5 * counts[2]) / 60)
    assert b["all"]["pass@1"] == pytest.approx(b["all"]["avg@4"])  # unbiased pass@1 is the mean accuracy
    # the sampled pass used the requested temperature; the greedy pass temperature 0
    assert {c.temperature for c in engine.calls} == {0.0, 0.7} and {c.n for c in engine.calls} == {1, 4}


def test_evaluate_greedy_only_when_k_is_one(tokenizer):
    source = load_source("task:addition", limit=10)
    engine = OracleEngine(tokenizer, source.problems)
    result = evaluate_sources(None, tokenizer, [source], k=1, engine=engine, use_chat_template=False)
    assert result.sampled is None and set(result.buckets["all"]) == {"count", "greedy"}
    assert all(c.temperature == 0.0 for c in engine.calls)


def test_trainer_style_evaluate_keeps_its_report(tokenizer):
    problems = list(make_task("addition", [1, 2], seed=3, size=12))
    report = evaluate(
        None, tokenizer, problems, "plain", "exact", engine=OracleEngine(tokenizer, problems), use_chat_template=False
    )
    assert isinstance(report, EvalReport) and report.accuracy == 1.0
    assert report.level_accuracy() == {"addition/L1": 1.0, "addition/L2": 1.0}


def test_load_source_task_defaults_and_held_out_stream():
    source = load_source("task:linear", limit=5, levels=[2])
    assert (source.template, source.reward, source.max_new_tokens) == ("plain", "exact", 16)
    assert [p.level for p in source.problems] == [2] * 5
    assert source.problems[0].uid.startswith("linear:L2:99991:")  # the trainer's evaluation stream for seed 0


def test_load_source_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown benchmark 'nope'; allowed: math500"):
        load_source("benchmark:nope")
    with pytest.raises(ValueError, match="neither task:<name>"):
        load_source(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="unknown task"):
        load_source("task:chess")


def test_benchmark_source_math500_levels_scored_by_math_verify(shared_data, tokenizer):
    source = load_source("benchmark:math500", shared_data, limit=6)
    assert (source.template, source.reward) == ("paper", "math")

    class Boxed:  # answers the gold answer in \boxed{} for the first half, nonsense afterwards
        def generate(self, prompts, params, on_rows_done=None):
            texts = [
                f"so \\boxed{{{source.problems[i].answer}}}" if i < 3 else "\\boxed{zzz}"
                for i in range(len(prompts))
                for _ in range(params.n)
            ]
            return fake_batch(texts, on_rows_done)

    result = evaluate_sources(None, tokenizer, [source], engine=Boxed(), batch_size=64, use_chat_template=False)
    assert result.buckets["all"]["greedy"] == 0.5
    assert {k for k in result.buckets if k.startswith("math500/L")} == {f"math500/L{p.level}" for p in source.problems}


def test_eval_rows_order_and_markdown():
    buckets = {
        "addition/L10": {"count": 1, "greedy": 0.5},
        "all": {"count": 3, "greedy": 0.25},
        "addition/L2": {"count": 2, "greedy": 0.125, "pass@4": 1.0, "avg@4": 0.5},
        "addition": {"count": 3},
    }
    headers, rows = eval_rows(buckets)
    assert headers == ["bucket", "n", "greedy", "avg@4", "pass@4"]
    assert [r[0] for r in rows] == ["all", "addition", "addition/L2", "addition/L10"]
    assert rows[2] == ["addition/L2", "2", "0.125", "0.500", "1.000"] and rows[1][2] == "—"
    assert sorted(["b/L3", "a", "all", "a/L1"], key=bucket_order) == ["all", "a", "a/L1", "b/L3"]
    table = markdown_table(["x|y", "z"], [["1", "2"]])
    assert table == "| x\\|y | z |\n|---|---|\n| 1 | 2 |\n"


def test_eval_cli_on_tiny_model(tmp_path):
    model_dir = build_tiny_model(tmp_path / "tiny", num_layers=1, hidden_size=32, intermediate_size=64)
    out_json, out_md = tmp_path / "eval.json", tmp_path / "eval.md"
    args = [
        "eval",
        str(model_dir),
        "--data",
        "task:addition",
        "--limit",
        "6",
        "--num-samples",
        "3",
        "--pass-k",
        "1,3",
        "--max-new-tokens",
        "3",
        "--chat-template",
        "never",
        "--json",
        str(out_json),
        "--markdown",
        str(out_md),
        "--no-progress",
    ]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    data = json.loads(out_json.read_text())
    buckets = data["buckets"]
    assert data["k"] == 3 and buckets["all"]["count"] == 6
    assert sum(v["count"] for k, v in buckets.items() if k.startswith("addition/L")) == 6
    assert set(buckets["all"]) == {"count", "greedy", "avg@3", "pass@1", "pass@3"}
    assert buckets["all"]["pass@1"] == pytest.approx(buckets["all"]["avg@3"])
    assert buckets["all"]["pass@3"] >= buckets["all"]["pass@1"]
    assert out_md.read_text().count("\n| addition/L") == len([k for k in buckets if "/L" in k])


def test_eval_cli_rejects_bad_pass_k_and_data(tmp_path):
    app = build_app()
    result = CliRunner().invoke(app, ["eval", str(tmp_path), "--data", "task:addition", "-k", "2", "--pass-k", "4"])
    assert result.exit_code != 0 and "every j must satisfy 1 <= j <= k=2" in flat(result.output)
    result = CliRunner().invoke(app, ["eval", str(tmp_path), "--data", "benchmark:nope"])
    assert result.exit_code != 0 and "unknown benchmark 'nope'" in flat(result.output)


def test_pass_at_k_formula_matches_combinatorial_identity():
    # pass@k = 1 − C(n−c, k)/C(n, k) = 1 − Π_{i=0}^{k−1} (n−c−i)/(n−i)
    for n, c, k in [(20, 3, 5), (128, 9, 8), (64, 60, 2)]:
        prod = 1.0
        for i in range(k):
            prod *= (n - c - i) / (n - i)
        assert pass_at_k(n, c, k) == pytest.approx(1 - prod) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def test_samples_record_every_completion_and_the_stats_count_answers_and_truncation(tokenizer):
    problems = list(make_task("addition", [1], seed=1, size=4))
    answers = {p.question + "=": p.answer for p in problems}

    class Mixed:  # problem 0 boxed right, 1 boxed wrong, 2 no answer at all and cut at the length limit, 3 bare int
        def generate(self, prompts, params, on_rows_done=None):
            golds = [answers[tokenizer.decode(ids)] for ids in prompts]
            texts = [f"\\boxed{{{golds[0]}}}", "\\boxed{-1}", "hmm", golds[3]]
            return fake_batch(texts, on_rows_done, truncated={2})

    ticks = []
    report = evaluate(None, tokenizer, problems, "plain", "exact", engine=Mixed(), use_chat_template=False,
                      progress=ticks.append)  # fmt: skip
    assert ticks == [1, 1, 1, 1]  # one tick per finished problem, not one per batch
    assert [s["score"] for s in report.samples] == [1.0, 0.0, 0.0, 1.0]
    assert [s["extracted"] for s in report.samples] == [problems[0].answer, "-1", None, problems[3].answer]
    assert [s["gold"] for s in report.samples] == [p.answer for p in problems]
    assert report.samples[2]["finish_reason"] == "length" and report.samples[2]["prompt"] == problems[2].question + "="
    assert extracted_answer("the answer is 12", "exact") is None and extracted_answer("#### 1,200", "math") == "1200"

    source = SimpleNamespace(name="t", problems=problems, template="plain", reward="exact", max_new_tokens=4)
    result = evaluate_sources(None, tokenizer, [source], engine=Mixed(), use_chat_template=False)
    greedy = result.stats["greedy"]
    assert greedy["answered"] == 0.75 and greedy["truncated"] == 0.25 and greedy["completions"] == 4
    assert greedy["tokens"] == sum(len(s["completion"]) for s in result.samples)
    assert result.temperature is None and result.to_dict()["temperature"] is None  # greedy only: no T claimed
    assert result.stats["memory"]["perf/cpu_peak_rss_gb"] > 0.05  # a Python process with torch loaded
    notes = completion_notes(result.stats)
    assert notes[0].startswith("greedy: 4 completions, 75.0% with an extracted answer, 25.0% truncated")
    assert not any(n.startswith("warning") for n in notes)
    silent = {"greedy": {**greedy, "answered": 0.0, "scored": 0.0}, "memory": result.stats["memory"]}
    assert completion_notes(silent)[-1].startswith("warning: no greedy completion has an extractable answer")
    # a reward of the user's that reads no \boxed{} scored 71 %: no "every score is 0" (it said so before)
    own_reward = {"greedy": {**greedy, "answered": 0.0, "scored": 0.71}, "memory": result.stats["memory"]}
    assert not any(n.startswith("warning") for n in completion_notes(own_reward))


def test_eval_cli_writes_samples_and_reports_greedy_without_a_temperature(tmp_path):
    model_dir = build_tiny_model(tmp_path / "tiny", num_layers=1, hidden_size=32, intermediate_size=64)
    out_json, samples = tmp_path / "eval.json", tmp_path / "samples.jsonl"
    args = ["eval", str(model_dir), "--data", "task:addition", "--limit", "5", "--max-new-tokens", "3",
            "--chat-template", "never", "--json", str(out_json), "--samples", str(samples),
            "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    data = json.loads(out_json.read_text())
    assert data["temperature"] is None and data["k"] == 1
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(rows) == 5 and {r["mode"] for r in rows} == {"greedy"}
    assert {"prompt", "completion", "extracted", "gold", "score", "finish_reason", "tokens"} <= set(rows[0])
    assert all(r["tokens"] <= 3 for r in rows) and data["stats"]["greedy"]["completions"] == 5
    text = flat(result.output)
    assert "truncated at the length limit" in text and "tokens/s" in text and "CPU peak RSS" in text
