"""Prompt templates: a Problem -> the text the policy sees.

"paper"  - the HA-DW paper's prompt (docs/method.md §3.3), sent as one user chat message.
"verl"   - the same instruction joined with a space, as in verl's MATH parquet (no ".." after a
           question that already ends in a period).
"boxed"  - the Qwen2.5-Math evaluation prompt (step-by-step, answer in \\boxed{}).
"plain"  - "{question}=" for tiny character-level models on the built-in tasks ("47+38=" -> "85").
"question" - the bare question.

With a tokenizer that has a chat template, the filled template becomes one user message and the
tokenizer's chat template is applied with add_generation_prompt=True ("auto" skips this for "plain");
otherwise the text is used as is.
"""

from __future__ import annotations

from typing import Any, Literal

from hadw.data.problem import Problem

TEMPLATES: dict[str, str] = {
    "paper": "{question}. Let's think step by step and output the final answer within \\boxed{{}}.",
    # verl joins with a space; reproduces the math_train parquet prompts (up to a trailing newline in 489 rows).
    "verl": "{question} Let's think step by step and output the final answer within \\boxed{{}}.",
    "boxed": "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}.",
    "plain": "{question}=",
    "question": "{question}",
}


def fill_template(question: str, template: str) -> str:
    """Fill a named template, or a custom format string containing "{question}" (literal braces as {{}})."""
    if template in TEMPLATES:
        template = TEMPLATES[template]
    elif "{question}" not in template:
        raise ValueError(
            f"unknown template {template!r}; allowed: {', '.join(TEMPLATES)}, or a format string with {{question}}"
        )
    return template.format(question=question)


def has_chat_template(tokenizer: Any) -> bool:
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def render_prompt(
    problem: Problem | str,
    template: str = "paper",
    tokenizer: Any = None,
    use_chat_template: bool | Literal["auto"] = "auto",
) -> str:
    """The prompt string for one problem.

    use_chat_template: "auto" applies the tokenizer's chat template when it has one, except with the
    "plain" template (made for tiny models trained on bare "47+38=" prompts); True requires one
    (ValueError otherwise); False never applies it.
    """
    question = problem.question if isinstance(problem, Problem) else problem
    text = fill_template(question, template)
    if use_chat_template == "auto":
        use_chat = has_chat_template(tokenizer) and template != "plain"
    else:
        use_chat = use_chat_template
    if not use_chat:
        return text
    if not has_chat_template(tokenizer):
        raise ValueError("use_chat_template=True but the tokenizer has no chat_template")
    messages = [{"role": "user", "content": text}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


# A token covers at most this many characters in practice: a text this many times longer than the allowed tokens is
# too long without tokenizing it (tokenizing a 20 MB row took minutes and gigabytes: issue 35).
MAX_CHARS_PER_TOKEN = 64


def prompt_token_limit(model_config: Any, max_new_tokens: int) -> int:
    """The most prompt tokens a model takes with room left for max_new_tokens: its context (max_position_embeddings)
    minus max_new_tokens, at least 1; a config without a context is not limited (1 << 30)."""
    context = getattr(model_config, "max_position_embeddings", None) or 1 << 30
    return max(context - max_new_tokens, 1)


def prompt_too_long(text: str, tokenizer: Any, limit: int) -> str | None:
    """None when `text` fits in `limit` tokens, else its length in words ("3145728 characters", "700 tokens").

    The one home of the rule `hadw train` (skips the row), `hadw eval` and `hadw probe` (refuse it) apply. A token
    holds at least one UTF-8 byte, so a text of at most `limit` bytes fits untokenized; a text over
    MAX_CHARS_PER_TOKEN characters per allowed token is too long untokenized; only the rest is tokenized.
    """
    if len(text) <= limit and len(text.encode("utf-8", "surrogatepass")) <= limit:
        return None
    if len(text) > MAX_CHARS_PER_TOKEN * limit:
        return f"{len(text)} characters (over {MAX_CHARS_PER_TOKEN} per allowed token; not tokenized)"
    tokens = len(tokenizer(text, add_special_tokens=False).input_ids)
    return f"{tokens} tokens" if tokens > limit else None
