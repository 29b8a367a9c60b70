"""The path a user with a real checkpoint takes (issue 10.8), on checkpoints laid out like downloaded ones.

Each checkpoint is built offline: a Llama- or Qwen2-architecture model (random weights, untied / tied embeddings)
with a byte-level BPE tokenizer trained here with `tokenizers` (real merges, so one token is several
characters) and a ChatML chat template, saved with `save_pretrained`. Note that transformers reloads a
`model_type="qwen2"` tokenizer as Qwen2Tokenizer, whose pre-tokenizer splits differently from the one trained
here: the tests check that text still round-trips, and everything below runs on the reloaded tokenizer.
On each: `hadw eval --samples`, two training steps from a JSONL file, `hadw probe`, and the TRL adapter.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast, Qwen2Config
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.rollout import load_model
from hadw.rollout.models import CHATML_TEMPLATE
from hadw.train.config import ConfigError, load_config
from hadw.train.metrics_log import read_jsonl
from hadw.train.trainer import Trainer

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CONFIGS = {"llama": LlamaConfig, "qwen2": Qwen2Config}
PROBLEMS = [
    ("What is $2+3$?", "5", 1),
    ("Compute $\\frac{1}{2}+\\frac{1}{4}$.", "\\frac{3}{4}", 2),
    ("Solve $2x+3=7$ for $x$.", "2", 2),
    ("What is $7\\cdot 6$?", "42", 1),
]


def train_bpe_tokenizer(vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on a small math corpus, with ChatML special tokens and chat template."""
    corpus = [f"{a}+{b}={a + b}" for a in range(100) for b in range(0, 100, 7)]
    corpus += [q + " Let's think step by step and output the final answer within \\boxed{}." for q, _, _ in PROBLEMS]
    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(corpus * 5, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def build_checkpoint(out: Path, arch: str) -> Path:
    tokenizer = train_bpe_tokenizer()
    config = CONFIGS[arch](
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=arch == "qwen2",  # Qwen2.5-0.5B ties, Llama-3 does not
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def checkpoint(request, tmp_path_factory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp(request.param) / "model", request.param)


@pytest.fixture(scope="module")
def math_jsonl(tmp_path_factory) -> Path:
    """MATH layout: the answer is the last \\boxed{} of `solution`, `level` is "Level N"."""
    path = tmp_path_factory.mktemp("data") / "math.jsonl"
    rows = [{"problem": q, "solution": f"So \\boxed{{{a}}}.", "level": f"Level {lv}"} for q, a, lv in PROBLEMS]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_checkpoint_loads_like_a_downloaded_one(checkpoint):
    model, tokenizer = load_model(checkpoint, device="cpu")
    text = "Compute $\\frac{1}{2}+\\frac{1}{4}$. é"
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == text and len(ids) < len(text.encode())  # merges: fewer tokens than bytes
    messages = [{"role": "user", "content": "hi"}]
    chat = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == "<|endoftext|>"
    assert checkpoint.parent.name.startswith(model.config.model_type)  # the folder is named after the arch


def test_eval_with_samples_uses_the_chat_template(checkpoint, math_jsonl, tmp_path):
    samples, out_json = tmp_path / "samples.jsonl", tmp_path / "eval.json"
    args = ["eval", str(checkpoint), "--data", str(math_jsonl), "--max-new-tokens", "6", "--samples", str(samples),
            "--json", str(out_json), "--no-progress", "--device", "cpu"]  # fmt: skip
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert [r["gold"] for r in rows] == [a for _, a, _ in PROBLEMS]
    assert all(r["prompt"].startswith("<|im_start|>user\n") and r["prompt"].endswith("assistant\n") for r in rows)
    assert all("\\boxed{}" in r["prompt"] for r in rows)  # the paper's template inside the chat turn
    stats = json.loads(out_json.read_text())["stats"]["greedy"]
    assert stats["completions"] == 4 and stats["tokens"] == sum(r["tokens"] for r in rows)
    assert "with an extracted answer" in result.output


def mentions_solution(prompts, completions, solution, log, **kwargs):
    """A user's reward with TRL's signature, reading the dataset's own `solution` column. It runs in a pool
    process: it records each call as a JSON line in the file its `log` column names."""
    with open(log[0], "a", encoding="utf-8") as f:
        f.write(json.dumps({"prompts": prompts, "solution": solution}) + "\n")
    return [float(str(s) in c) for c, s in zip(completions, solution, strict=True)]


def test_two_training_steps_with_user_fields_and_an_import_path_reward(checkpoint, tmp_path):
    log = tmp_path / "calls.jsonl"
    rows = [{"query": q, "solution": a, "meta": {"difficulty": lv}, "log": str(log)} for q, a, lv in PROBLEMS]
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    reward = f"{__name__}:mentions_solution"
    cfg = load_config(None, [
        f"model.path={checkpoint}", "model.device=cpu", f"data.source={data}", "data.fields.prompt=query",
        "data.fields.answer=solution", "data.fields.level=meta.difficulty", "data.template=paper",
        "data.eval_size=2", f"reward.functions=[{reward}]", f"reward.correctness={reward}",
        "rollout.group_size=2", "rollout.max_new_tokens=6", "train.prompts_per_step=2", "train.mini_batch_prompts=1",
        "train.steps=2", f"train.output_dir={tmp_path / 'run'}", "logging.progress=false", "optim.lr=1e-4",
    ])  # fmt: skip
    result = Trainer(cfg).train()
    steps = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "critic/rewards/mean" in r]
    assert [r["step"] for r in steps] == [1, 2] and result.steps == 2
    assert all(r["perf/cpu_peak_rss_gb"] > 0 for r in steps)
    # the reward saw the user's prompts (in the paper's template) and the user's own column
    calls = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]  # the reward's own log
    train_calls = [c for c in calls if len(c["prompts"]) == 4][:2]
    assert len(train_calls) == 2 and all("\\boxed{}" in p for p in train_calls[0]["prompts"])
    assert set(train_calls[0]["solution"]) <= {a for _, a, _ in PROBLEMS}
    assert (tmp_path / "run" / "final_model" / "tokenizer.json").is_file()


def test_probe_runs_on_the_checkpoint(checkpoint, math_jsonl, tmp_path):
    args = ["probe", str(checkpoint), "--data", str(math_jsonl), "-G", "2", "-N", "2", "--max-new-tokens", "4",
            "--png", str(tmp_path / "p.png"), "--json", str(tmp_path / "p.json"), "--device", "cpu"]  # fmt: skip
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "p.json").read_text())["buckets"]["all"]["prompts"] == 4


def test_trl_adapter_trains_one_step_on_the_checkpoint(checkpoint, tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset

    from hadw.integrations.trl import HADWGRPOConfig, HADWGRPOTrainer

    def correct(completions, answer, **kwargs):
        return [float(a in c) for c, a in zip(completions, answer, strict=True)]

    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": q}] for q, _, _ in PROBLEMS],
                              "answer": [a for _, a, _ in PROBLEMS]})  # fmt: skip
    args = HADWGRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=4, max_steps=1, report_to=[], use_cpu=True, save_strategy="no",
                          disable_tqdm=True, logging_steps=1)  # fmt: skip
    trainer = HADWGRPOTrainer(model=str(checkpoint), reward_funcs=[correct], args=args, train_dataset=data)
    trainer.train()
    assert trainer.state.global_step == 1 and trainer.hadw_anchor.prior is not None


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data.template={question} \\boxed{}"], "data.template='{question} \\\\boxed{}' is neither a template name"),
        (["data.template=nope"], "data.template='nope' is neither a template name (paper, "),
    ],
)
def test_template_errors_are_one_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_template_strings_that_are_not_yaml(tmp_path):
    # an override is taken as a string even where YAML would read a mapping ({...}) or a key (a colon)
    assert load_config(None, ["data.template={question} Answer:"]).data.template == "{question} Answer:"
    config = tmp_path / "c.yaml"
    config.write_text("data:\n  template: {question} Answer:\n", encoding="utf-8")
    result = CliRunner().invoke(build_app(), ["train", str(config)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{config}:2:" in lines[0] and "quote values" in lines[0]
