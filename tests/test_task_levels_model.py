"""Built-in task levels order a real model's accuracy: a tiny model, briefly trained on levels 1–3 of
addition, solves more level-1 than level-2 or level-3 problems (the data tests check a simulated solver)."""

import pytest
import torch

from hadw.data import make_task
from hadw.eval.evaluate import evaluate
from hadw.rollout import build_tiny_model, load_model
from hadw.train.sft import SFTConfig, sft_warm_start


@pytest.mark.slow
def test_more_digits_lower_accuracy_for_a_trained_tiny_model(tmp_path):
    torch.manual_seed(0)
    model, tokenizer = load_model(build_tiny_model(tmp_path / "tiny", seed=0))
    cfg = SFTConfig(levels=[1, 2, 3], max_steps=150, eval_every=10_000, target_accuracy=1.1, seed=0)
    sft_warm_start(model, tokenizer, cfg)
    accuracy = {}
    for level in (1, 2, 3):
        problems = list(make_task("addition", [level], seed=123, size=60))
        report = evaluate(model, tokenizer, problems, "plain", "exact", max_new_tokens=6, use_chat_template=False)
        accuracy[level] = report.accuracy
    assert accuracy[1] > accuracy[2] + 0.1, accuracy
    assert accuracy[1] > accuracy[3] + 0.1, accuracy
    assert accuracy[2] >= accuracy[3], accuracy
