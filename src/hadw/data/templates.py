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
