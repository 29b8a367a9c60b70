"""A run's held-out evaluation: greedy, and avg@k / pass@k of data.eval_samples = k sampled answers a problem. One
function for both engines (the native trainer's periodic and final evaluation, and engine=trl's worker), so a run
is scored the same way whoever trained it, and `hadw eval RUN_DIR` reproduces it."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from hadw import metrics as M
from hadw.eval.evaluate import evaluate
from hadw.rewards import RewardRecipe

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from hadw.data import Problem
    from hadw.eval.evaluate import EvalReport
    from hadw.train.config import Config

CHAT = {"auto": "auto", "always": True, "never": False}  # data.chat_template -> evaluate's use_chat_template


def evaluate_held_out(
    model,
    tokenizer,
    cfg: Config,
    problems: Sequence[Problem],
    engine: Any = None,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    progress: Callable[[int], Any] | None = None,
) -> tuple[dict[str, dict[str, float]], EvalReport, EvalReport | None]:
    """(summary {bucket: {metric: value}}, the greedy EvalReport, the k-sample one or None) of `problems`.

    engine: the rollout engine to sample with (the native trainer's own; None: a default HFRolloutEngine);
    autocast: the forward's precision context; progress: callable(advance) as problems finish."""
    k = cfg.data.eval_samples

    def once(k_: int, temperature: float) -> EvalReport:
        with autocast():
            return evaluate(
                model,
                tokenizer,
                problems,
                cfg.data.template,
                RewardRecipe.from_config(asdict(cfg.reward)),
                k=k_,
                temperature=temperature,
                top_p=cfg.rollout.top_p if temperature > 0 else 1.0,
                max_new_tokens=cfg.rollout.max_new_tokens,
                seed=cfg.train.seed if temperature > 0 else 0,  # greedy: as before the sampled pass existed
                engine=engine,
                use_chat_template=CHAT[cfg.data.chat_template],
                pass_ks=(k_,) if k_ > 1 else (),
                progress=progress,
            )

    greedy = once(1, 0.0)
    sampled = once(k, cfg.rollout.temperature) if k else None
    summary = {bucket: dict(row) for bucket, row in greedy.summary.items()}
    for bucket, row in (sampled.summary if sampled else {}).items():  # avg@k, pass@k beside greedy
        summary.setdefault(bucket, {}).update({m: v for m, v in row.items() if m != M.COUNT})
    return summary, greedy, sampled
