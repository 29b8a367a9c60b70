"""The metric contract (hadw.metrics): every key a run writes is declared there, final_eval.json replaces the old
sentinel row, JSON is strict (NaN -> null), and W&B continues the same run on --resume."""

from __future__ import annotations

import json
import math
import re
import sys
import types
import typing

import pytest

from hadw import metrics as M
from hadw.rollout import build_tiny_model
from hadw.train.config import load_config
from hadw.train.metrics_log import MetricsLogger
from hadw.train.trainer import Trainer

DECLARED = {v for k, v in vars(M).items() if k.isupper() and isinstance(v, str) and "/" in v}
PATTERNS = [
    re.compile(r"(critic/score|batch/degenerate_frac|hadw/phi_correct)/L\w+"),  # per level (hadw.metrics)
    re.compile(r"val/.+/(greedy|count|avg@\d+|pass@\d+)"),
]


def _declared(key: str) -> bool:
    return key == "step" or key in DECLARED or any(p.fullmatch(key) for p in PATTERNS)


def _run_with(root, name: str, *sets: str):
    """A 2-step run of a tiny model on `addition` (8 held-out problems, an evaluation every step) with `sets`."""
    model = build_tiny_model(root / "model", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=64, seed=0)  # fmt: skip
    cfg = load_config(None, [
        f"model.path={model}", "data.source=task:addition", "data.template=plain", "data.chat_template=never",
        "data.eval_size=8", "rollout.group_size=4", "rollout.max_new_tokens=4", "train.prompts_per_step=4",
        "train.mini_batch_prompts=2", "train.steps=2", "train.eval_every=1", f"train.output_dir={root / name}",
        "logging.progress=false", "train.num_threads=1", *sets,
    ])  # fmt: skip
    Trainer(cfg).train()
    return root / name


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    return _run_with(tmp_path_factory.mktemp("contract"), "run", "hadw.enabled=true", "algorithm.kl_coef=0.01")


def test_sampled_evaluation_adds_avg_and_pass_at_k_and_keeps_greedy_as_it_was(tmp_path):
    """data.eval_samples=3: every evaluation adds avg@3 / pass@3 beside greedy, the per-problem file keeps the three
    sampled scores (their mean is avg@3), and neither training nor the greedy evaluation moves (the sampling draws
    from its own generator)."""
    plain = _run_with(tmp_path, "plain")
    sampled = _run_with(tmp_path, "sampled", "data.eval_samples=3")
    final, before = M.read_run(sampled).final_eval, M.read_run(plain).final_eval
    assert set(final["all"]) == {M.COUNT, M.GREEDY, M.avg_at(3), M.pass_at(3)} and final["all"][M.COUNT] == 8
    assert {b: r[M.GREEDY] for b, r in final.items()} == {b: r[M.GREEDY] for b, r in before.items()}
    steps, steps_before = M.read_run(sampled).steps, M.read_run(plain).steps
    assert [r[M.SCORE_MEAN] for r in steps] == [r[M.SCORE_MEAN] for r in steps_before]
    assert M.val_key("all", M.avg_at(3)) in steps[0]  # the periodic evaluation samples too
    rows = M.read_eval_problems(sampled)
    assert [r["scores"] for r in rows] == [r["scores"] for r in M.read_eval_problems(plain)]
    assert all(len(r["sampled"]) == 3 and set(r["sampled"]) <= {0, 1} for r in rows)
    mean = sum(sum(r["sampled"]) for r in rows) / 24
    assert mean == pytest.approx(final["all"][M.avg_at(3)], abs=1e-12)


def test_every_metric_a_run_writes_is_declared(finished_run):
    records = M.read_run(finished_run)
    keys = {k for r in records.steps for k in r}
    assert {M.PG_LOSS, M.SCORE_MEAN, M.ANCHOR, M.KL_LOSS, M.ADV_MEAN, M.THROUGHPUT} <= keys
    assert sorted(k for k in keys if not _declared(k)) == []


def test_the_update_is_timed_by_phase(finished_run):
    """forward, backward, optimiser and (kl_coef > 0) the reference's log-probs each take time, and together they
    account for most of timing_s/update; no π_old re-score in float32 (recompute_logprobs=auto)."""
    for record in M.read_run(finished_run).steps:
        phases = {key: record[key] for key in M.UPDATE_PHASES}
        assert all(phases[k] > 0 for k in (M.TIME_FORWARD, M.TIME_BACKWARD, M.TIME_OPTIMIZER, M.TIME_REF)), phases
        assert phases[M.TIME_OLD_LOGPROB] == 0.0
        assert 0.5 * record[M.TIME_UPDATE] < sum(phases.values()) <= record[M.TIME_UPDATE]


def test_final_evaluation_is_its_own_file_with_greedy_accuracy(finished_run):
    records = M.read_run(finished_run)
    assert records.finished and [r["step"] for r in records.steps] == [1, 2]  # no sentinel row
    assert set(records.final_eval["all"]) == {M.COUNT, M.GREEDY} and records.final_eval["all"][M.COUNT] == 8
    assert 0.0 <= records.final_eval["all"][M.GREEDY] <= 1.0
    # train.eval_every=1: the step-1 evaluation is in metrics.jsonl under val/ keys, same metric name
    assert M.val_key("all", M.GREEDY) in records.steps[0]


def test_the_final_evaluation_is_kept_per_problem(finished_run):
    final = M.read_run(finished_run).final_eval
    rows = M.read_eval_problems(finished_run)
    assert [r["index"] for r in rows] == list(range(8)) and len({r["uid"] for r in rows}) == 8
    assert {r["source"] for r in rows} == {"addition"} and all(isinstance(r["level"], int) for r in rows)
    assert all(len(r["scores"]) == 1 and r["scores"][0] in (0, 1) for r in rows)  # greedy: one 0/1 score each
    # the file reproduces the summary: its mean is final_eval.json's greedy accuracy, bucket by bucket
    assert sum(r["scores"][0] for r in rows) / 8 == pytest.approx(final["all"][M.GREEDY], abs=1e-12)
    for level in {r["level"] for r in rows}:
        mine = [r["scores"][0] for r in rows if r["level"] == level]
        assert sum(mine) / len(mine) == pytest.approx(final[f"addition/L{level}"][M.GREEDY], abs=1e-12)
    assert (finished_run / M.FINAL_EVAL_PROBLEMS_FILE).stat().st_size < 100 * 8  # small enough to commit


def test_per_problem_rows_and_their_reader(tmp_path):
    from hadw.data import Problem

    problems = [Problem("1+1", "2", 1, "addition", "addition:L1:0:0"), Problem("q", "a", None, "gsm8k", "gsm8k:7")]
    rows = M.eval_problem_rows([[1.0, 0.0], [0.5, 1.0]], problems)
    assert rows[1] == {"index": 1, "uid": "gsm8k:7", "source": "gsm8k", "level": None, "scores": [0.5, 1]}
    logger = MetricsLogger(tmp_path)
    logger.log_final_eval({"all": {"avg@2": 0.625}}, types.SimpleNamespace(correct=[[1.0, 0.0], [0.5, 1.0]],
                                                                            problems=problems))  # fmt: skip
    assert M.read_eval_problems(tmp_path) == rows
    # resumed: the old final evaluation (both files) is gone until the run finishes again
    MetricsLogger(tmp_path, resume_step=0).close()
    assert M.read_eval_problems(tmp_path) is None and not (tmp_path / M.FINAL_EVAL_FILE).exists()
    (tmp_path / M.FINAL_EVAL_PROBLEMS_FILE).write_text('{"index": 0, "scores": []}\n')
    with pytest.raises(M.MetricsFileError, match=r"final_eval_problems.jsonl:1: expected an object"):
        M.read_eval_problems(tmp_path)
    (tmp_path / M.FINAL_EVAL_PROBLEMS_FILE).write_text('{"index": 0, "scores": [1], "sampled": ["1"]}\n')
    with pytest.raises(M.MetricsFileError, match=r"jsonl:1: 'sampled', where present, must be a non-empty list"):
        M.read_eval_problems(tmp_path)
    with_sampled = M.eval_problem_rows([[1.0], [0.0]], problems, sampled=[[1.0, 0.0, 1.0], [0.5, 0.0, 0.0]])
    assert with_sampled[1] == {"index": 1, "uid": "gsm8k:7", "source": "gsm8k", "level": None, "scores": [0],
                               "sampled": [0.5, 0, 0]}  # fmt: skip
    with pytest.raises(ValueError, match="1 sampled rows for 2 problems"):
        M.eval_problem_rows([[1.0], [0.0]], problems, sampled=[[1.0]])
    logger.log_final_eval({})  # no held-out problems: a stale per-problem file is not left to pass for this one
    assert M.read_eval_problems(tmp_path) is None
    logger.close()


def test_val_keys_round_trip():
    flat = M.flatten_eval({"all": {"greedy": 0.5}, "addition/L3": {"pass@4": 0.75}})
    assert flat == {"val/all/greedy": 0.5, "val/addition/L3/pass@4": 0.75}
    assert [M.split_val_key(k) for k in flat] == [("all", "greedy"), ("addition/L3", "pass@4")]


def test_nan_is_written_as_null(tmp_path):
    logger = MetricsLogger(tmp_path)
    logger.log(1, {"a": float("nan"), "b": float("inf"), "c": 1.5})
    logger.log_final_eval({"all": {"greedy": float("nan"), "count": 3.0}})
    logger.close()
    line = (tmp_path / M.METRICS_FILE).read_text().strip()
    assert json.loads(line) == {"step": 1, "a": None, "b": None, "c": 1.5} and "NaN" not in line
    assert json.loads((tmp_path / M.FINAL_EVAL_FILE).read_text()) == {"all": {"greedy": None, "count": 3.0}}
    assert math.isnan(float("nan"))  # (the writer, not the reader, maps NaN to null)


def test_wandb_resumes_the_same_run(tmp_path, monkeypatch):
    calls = []

    class FakeRun:
        summary: typing.ClassVar[dict] = {}

        def log(self, *a, **k): ...

        def finish(self): ...

    fake = types.SimpleNamespace(
        init=lambda **kw: calls.append(kw) or FakeRun(),
        util=types.SimpleNamespace(generate_id=lambda: f"id{len(calls)}"),
    )
    monkeypatch.setitem(sys.modules, "wandb", fake)
    MetricsLogger(tmp_path, wandb=True).close()
    MetricsLogger(tmp_path, wandb=True, resume_step=0).close()
    assert calls[0]["id"] == calls[1]["id"] == "id0" and calls[1]["resume"] == "allow"


def test_each_level_reports_its_gradient_share_and_the_phi_of_its_correct_answers():
    """batch/degenerate_frac/L<level> and hadw/phi_correct/L<level> (issue 50, item 6), checked on a planted batch:
    level 1's group is all correct (no gradient), level 2's mixed, so only level 2 has a Φ of correct answers."""
    import torch

    from hadw.train.dynamic_sampling import level_metrics

    levels = [1, 1, 2, 2, None, None]
    degenerate = torch.tensor([True, True, False, False, False, False])
    weights = torch.tensor([1.3, 1.3, 0.9, 2.0, 5.0, 5.0])
    correct = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    out = level_metrics(levels, degenerate, weights, correct)
    assert out == {M.degenerate_level(1): 1.0, M.degenerate_level(2): 0.0, M.phi_correct_level(2): 2.0}


def test_a_run_with_levels_writes_them(finished_run):
    keys = {k for r in M.read_run(finished_run).steps for k in r}
    assert any(k.startswith("batch/degenerate_frac/L") for k in keys), sorted(keys)
