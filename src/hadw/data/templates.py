"""Prompt templates: a Problem -> the text the policy sees.

"paper"  - the HA-DW paper's prompt (docs/method.md §3.3), sent as one user chat message; after a question that
           already ends a sentence (. ? !) the instruction follows a space, not a second stop ("units.. Let's").
"verl"   - the same instruction joined with a space, as in verl's MATH parquet (no ".." after a
           question that already ends in a period).
"boxed"  - the Qwen2.5-Math evaluation prompt (step-by-step, answer in \\boxed{}).
"plain"  - "{question}=" for tiny character-level models on the built-in tasks ("47+38=" -> "85").
"question" - the bare question.

With a tokenizer that has a chat template, the filled template becomes one user message and the
tokenizer's chat template is applied with add_generation_prompt=True ("auto" skips this for "plain");
otherwise the text is used as is. A chat template is untrusted code of the model's folder: it renders in a
sandbox (transformers) and here within CHAT_TEMPLATE_SECONDS; one that raises or runs longer is a one-line
ChatTemplateError naming the model.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any, Literal

from hadw.data.problem import Problem
from hadw.errors import UserError

# A chat template renders one prompt in milliseconds; one still running after this long loops for ever (nested
# `{% for %}` over range(10**5)): stopped, so the first step cannot hang where SIGTERM only sets a flag (issue 35).
CHAT_TEMPLATE_SECONDS = 5.0


class ChatTemplateError(UserError):
    """A model's chat template that raises or does not finish rendering: one line naming the model, exit 2."""


class _TimeUp(BaseException):
    """Raised into the rendering by the timer; a BaseException, so no `except Exception` inside can swallow it."""


TEMPLATES: dict[str, str] = {
    "paper": "{question}. Let's think step by step and output the final answer within \\boxed{{}}.",
    # verl joins with a space; reproduces the math_train parquet prompts (up to a trailing newline in 489 rows).
    "verl": "{question} Let's think step by step and output the final answer within \\boxed{{}}.",
    "boxed": "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}.",
    "plain": "{question}=",
    "question": "{question}",
}
# A question that already ends a sentence: "paper" joins the instruction with a space, not ". " (fill_template)
SENTENCE_ENDS = (".", "?", "!", "。", "？", "！")


def fill_template(question: str, template: str) -> str:
    """Fill a named template, or a custom format string containing "{question}" (literal braces as {{}})."""
    if template == "paper" and question.rstrip().endswith(SENTENCE_ENDS):
        template = TEMPLATES["verl"]  # "units." + ". Let's" would read "units.. Let's": the sentence has its stop
    elif template in TEMPLATES:
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
    context = list(problem.context) if isinstance(problem, Problem) else []  # system and earlier turns, as given
    if not use_chat:
        if isinstance(problem, Problem) and problem.context:  # the text alone drops them (data.system_prompt did)
            raise PromptTurnsError(_dropped_turns(problem, template, tokenizer, use_chat_template))
        return text
    if not has_chat_template(tokenizer):
        raise ValueError("use_chat_template=True but the tokenizer has no chat_template")
    return apply_chat_template(tokenizer, [*context, {"role": "user", "content": text}])


class PromptTurnsError(UserError):
    """A prompt with chat turns before its question (a system prompt, a row's earlier turns) that no chat template
    renders: one line naming the keys, never the question alone."""


def _dropped_turns(problem: Problem, template: str, tokenizer: Any, use_chat_template: bool | str) -> str:
    roles = ", ".join(str(m.get("role", "?")) for m in problem.context)
    if use_chat_template is False:
        why = "data.chat_template=never (--chat-template never)"
    elif not has_chat_template(tokenizer):
        why = "the model's tokenizer has no chat template"
    else:
        why = f"data.template={template} is used without the chat template under data.chat_template=auto"
    return (
        f"{problem.where or problem.uid}: the prompt has {len(problem.context)} chat turn(s) before its question "
        f"({roles}: data.system_prompt / --system-prompt, or the row's own turns) and no chat template renders "
        f"them ({why}); they would be dropped. Allowed: a model with a chat template, data.chat_template=auto or "
        "always and a template other than plain; or no data.system_prompt and single-turn rows"
    )


def apply_chat_template(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The tokenizer's chat template applied to `messages` (with the generation prompt), within
    CHAT_TEMPLATE_SECONDS; a template that runs longer or raises is a ChatTemplateError naming the model."""
    import jinja2

    model = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    way_out = "fix chat_template in the model's tokenizer_config.json / chat_template.jinja, or pass --chat-template "
    way_out += "never (data.chat_template=never) to use the prompt as it is"
    try:
        with _time_limit(CHAT_TEMPLATE_SECONDS):
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except _TimeUp:
        raise ChatTemplateError(
            f"{model}: the model's chat template did not finish rendering one prompt in {CHAT_TEMPLATE_SECONDS:g} s "
            f"(a loop that never ends?); allowed: a template that renders in milliseconds; {way_out}"
        ) from None
    # What a template can raise: jinja's errors (the sandbox's SecurityError, raise_exception(...), an undefined
    # name), the sandbox's OverflowError for range() over 100 000, a recursive macro, bad operands.
    except (jinja2.TemplateError, ArithmeticError, LookupError, TypeError, ValueError, RecursionError) as err:
        first = str(err).splitlines()[0] if str(err) else ""
        raise ChatTemplateError(
            f"{model}: the model's chat template failed: {type(err).__name__}: {first:.200}; {way_out}"
        ) from None


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise _TimeUp in the block after `seconds` of wall time (SIGALRM; main thread only, elsewhere unlimited).

    An alarm already set (a caller's own time limit) is kept: when it is due first, it stays in charge and this
    sets none; otherwise it is re-armed with its remaining time afterwards, its handler restored."""
    main = threading.current_thread() is threading.main_thread()
    if not (main and hasattr(signal, "setitimer")):
        yield
        return
    outer_delay, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    if 0 < outer_delay <= seconds:
        yield
        return

    def time_up(signum: int, frame: Any) -> None:
        raise _TimeUp

    outer_handler = signal.signal(signal.SIGALRM, time_up)
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:  # restored even when the alarm fired just as the block ended
            signal.signal(signal.SIGALRM, outer_handler)
            if outer_delay > 0:  # never 0: that would cancel the caller's alarm instead of firing it
                left = max(outer_delay - (time.monotonic() - start), 1e-3)
                signal.setitimer(signal.ITIMER_REAL, left, outer_interval)


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
