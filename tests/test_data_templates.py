"""Prompt templates, with and without a tokenizer chat template."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from hadw.data import Problem, render_prompt

CHAT = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _tokenizer(chat_template: str | None) -> PreTrainedTokenizerFast:
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    tok.chat_template = chat_template
    return tok


PROBLEM = Problem("What is $1+1$?", "2", None, "x", "x:0")


def test_named_templates_without_tokenizer():
    assert render_prompt(PROBLEM, "paper") == (  # no "?." (the question ends its sentence)
        "What is $1+1$? Let's think step by step and output the final answer within \\boxed{}."
    )
    units = Problem("Give it in units.", "2", None, "x", "x:1")
    assert render_prompt(units, "paper").startswith("Give it in units. Let")
    assert render_prompt(Problem("Solve $x+1=2$", "1", None, "x", "x:2"), "paper").startswith("Solve $x+1=2$. Let's")
    assert render_prompt(PROBLEM, "verl") == (
        "What is $1+1$? Let's think step by step and output the final answer within \\boxed{}."
    )
    assert render_prompt(PROBLEM, "boxed").endswith(
        "\nPlease reason step by step, and put your final answer within \\boxed{}."
    )
    assert render_prompt(Problem("47+38", "85", 2, "addition", "a"), "plain") == "47+38="
    assert render_prompt("7x=56", "Solve {question} -> x") == "Solve 7x=56 -> x"


def test_chat_template_wraps_one_user_message_with_generation_prompt():
    tok = _tokenizer(CHAT)
    expected = "<|user|>47+38=\n<|assistant|>"
    assert render_prompt("47+38", "question", tok) == "<|user|>47+38\n<|assistant|>"
    assert render_prompt("47+38", "plain", tok, use_chat_template=True) == expected
    assert render_prompt("47+38", "plain", tok, use_chat_template=False) == "47+38="
    # "auto" leaves the bare "plain" prompt of tiny models alone, whatever the tokenizer offers
    assert render_prompt("47+38", "plain", tok) == "47+38="


def test_tokenizer_without_chat_template_gives_plain_text():
    tok = _tokenizer(None)
    assert render_prompt("47+38", "plain", tok) == "47+38="
    with pytest.raises(ValueError, match="use_chat_template=True but the tokenizer has no chat_template"):
        render_prompt("47+38", "plain", tok, use_chat_template=True)


def test_unknown_template_lists_the_names():
    with pytest.raises(ValueError, match=r"unknown template 'chat'; allowed: paper, verl, boxed, plain, question"):
        render_prompt(PROBLEM, "chat")


class _CountingTokenizer:
    """Counts the characters it is asked to tokenize (one token per character)."""

    def __init__(self) -> None:
        self.seen = 0

    def __call__(self, text: str, add_special_tokens: bool = False):
        self.seen += len(text)
        return type("Encoding", (), {"input_ids": list(range(len(text)))})()


def test_prompt_too_long_never_tokenizes_a_huge_prompt():
    """Issue 35: one 20 MB prompt took 150 s and 10 GB to tokenize; a text far over the limit is judged by its
    length, a short one needs no tokenizer, only the rest is tokenized."""
    from hadw.data.templates import MAX_CHARS_PER_TOKEN, prompt_token_limit, prompt_too_long

    tok = _CountingTokenizer()
    assert prompt_too_long("x" * 3_000_000, tok, 512) == (
        f"3000000 characters (over {MAX_CHARS_PER_TOKEN} per allowed token; not tokenized)"
    )
    assert prompt_too_long("x" * 512, tok, 512) is None and tok.seen == 0
    assert prompt_too_long("é" * 300, tok, 512) is None and tok.seen == 300  # 600 bytes: may be 600 tokens
    assert prompt_too_long("x" * 600, tok, 512) == "600 tokens"
    config = type("Config", (), {"max_position_embeddings": 512})()
    assert prompt_token_limit(config, 16) == 496 and prompt_token_limit(config, 2048) == 1
    assert prompt_token_limit(None, 0) == 1 << 30  # no known context: not limited


LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ messages[0].content }}"


def test_a_chat_template_that_never_finishes_is_stopped_in_one_line(monkeypatch):
    """Issue 35: nested loops in a model's chat template hung the first step (and SIGTERM only sets a flag there)."""
    import time

    from hadw.data import templates

    monkeypatch.setattr(templates, "CHAT_TEMPLATE_SECONDS", 0.3)
    tok = _tokenizer(LOOPS)
    tok.name_or_path = "models/loops"
    start = time.monotonic()
    with pytest.raises(templates.ChatTemplateError, match=r"^models/loops: the model's chat template did not finish"):
        render_prompt("47+38", "question", tok)
    assert time.monotonic() - start < 3


def test_a_chat_template_that_raises_is_one_line():
    from hadw.data.templates import ChatTemplateError

    tok = _tokenizer("{% for i in range(10**6) %}{% endfor %}")  # the sandbox refuses ranges over 100 000
    with pytest.raises(ChatTemplateError, match=r"chat template failed: OverflowError: Range too big.*never"):
        render_prompt("47+38", "question", tok)
    with pytest.raises(ChatTemplateError, match=r"failed: TemplateError: no system role"):
        render_prompt("47+38", "question", _tokenizer("{{ raise_exception('no system role') }}"))


def test_the_time_limit_keeps_a_callers_alarm():
    """The render's SIGALRM timer leaves one set by the caller (a test harness's hang limit, a user's own) as it was:
    re-armed with its remaining time and handler when due later, in charge when due first."""
    import signal

    class Outer(BaseException):
        pass

    def outer(signum, frame):
        raise Outer

    previous = signal.signal(signal.SIGALRM, outer)
    try:
        signal.setitimer(signal.ITIMER_REAL, 100)
        assert render_prompt("1", "question", _tokenizer(CHAT)) == "<|user|>1\n<|assistant|>"
        assert 99 < signal.getitimer(signal.ITIMER_REAL)[0] <= 100
        assert signal.getsignal(signal.SIGALRM) is outer
        signal.setitimer(signal.ITIMER_REAL, 0.2)  # due before the render's own limit: the caller's alarm fires
        with pytest.raises(Outer):
            render_prompt("1", "question", _tokenizer(LOOPS))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_conversational_rows_keep_their_system_turn_and_a_system_prompt_is_added(tmp_path):
    """TRL's conversational format in a user's own fields: the system and earlier turns are kept (they were reduced
    to the last user message); data.system_prompt / --system-prompt adds a system turn, a row's own one wins."""
    import json

    from hadw.data import load_problems, make_fields, with_system_prompt

    rows = [
        {
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
            "gold": 4,
        },
        {"prompt": [{"role": "user", "content": "What is 3+3?"}], "gold": 6},
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = list(load_problems(str(path), make_fields("auto", "prompt", "gold")))
    assert [p.question for p in problems] == ["What is 2+2?", "What is 3+3?"]
    system = "<|system|>"
    tok = _tokenizer(
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    assert render_prompt(problems[0], "question", tok) == f"{system}Be brief.\n<|user|>What is 2+2?\n<|assistant|>"
    assert render_prompt(problems[1], "question", tok) == "<|user|>What is 3+3?\n<|assistant|>"
    added = with_system_prompt(problems, "Answer with a number.")
    assert render_prompt(added[0], "question", tok).startswith(f"{system}Be brief.\n<|user|>")  # its own is kept
    assert render_prompt(added[1], "question", tok) == (
        f"{system}Answer with a number.\n<|user|>What is 3+3?\n<|assistant|>"
    )
    assert with_system_prompt(problems, "") is problems
