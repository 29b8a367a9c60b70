"""What the trainer says about a run going wrong: a reward's first error (shown once, saved), every failed item
counted, and steps with no learning signal, with the cause measured on the batch.

A part of hadw.train.trainer.Trainer (a mixin: its methods use the trainer's fields).
"""

from __future__ import annotations

import contextlib
import sys

from hadw import metrics as M
from hadw.data import extract_answer
from hadw.rewards.verifiers import canonical_int
from hadw.safe_files import open_append
from hadw.train.config import Config
from hadw.train.dynamic_sampling import Rollout

REWARD_ERRORS_FILE = "reward_errors.jsonl"  # each reward's first failed item (kind, message, row)


def measured_no_signal_causes(metrics: dict[str, float], texts: list[str], cfg: Config) -> list[str]:
    """What this batch shows about why every group is degenerate: reward failures, every answer right,
    truncation, or no answer the verifier can read. Empty when none of these was measured."""
    causes = []
    failed = metrics.get(M.REWARD_ERRORS, 0.0) + metrics.get(M.REWARD_TIMEOUTS, 0.0)
    if failed:
        causes.append(f"the reward failed on {failed:.0f} of {len(texts)} responses (errors and timeouts score 0)")
    if texts and metrics.get(M.SCORE_MEAN, 0.0) >= 1.0:
        causes.append("every response was correct: the prompts are too easy for this model")
    clipped = metrics.get(M.RESPONSE_CLIP_RATIO, 0.0)
    if clipped >= 0.5:
        causes.append(f"{clipped:.0%} of responses were cut off at rollout.max_new_tokens={cfg.rollout.max_new_tokens}")
    readable = {  # what the built-in verifiers read: a \boxed{} or "#### N" answer; exact also a bare integer
        "math": lambda t: extract_answer(t) is not None,
        "exact": lambda t: extract_answer(t) is not None or canonical_int(t) is not None,
    }.get(cfg.reward.correctness)
    if texts and readable is not None and not any(map(readable, texts)):
        causes.append(f"no response had an answer reward {cfg.reward.correctness!r} can read")
    return causes


class RunWatch:
    """A reward's errors made visible, and steps with no learning signal explained."""

    def _report_reward_error(self, name: str, line: str, error, row: dict) -> None:
        """A reward's first error: one line on stderr, and a record in <run>/reward_errors.jsonl."""
        print(f"warning: {line} (later errors are counted in reward/errors, reward/timeouts)", file=sys.stderr)
        record = {"step": self._step + 1, "reward": name, "kind": error.kind, "message": error.message, "row": row}
        with open_append(self.run_dir / REWARD_ERRORS_FILE) as f:
            f.write(M.dumps(record) + "\n")

    def _watch_rewards(self, rollout: Rollout) -> None:
        """Count the step's failed reward items, report each reward's first one, and stop the run
        (RewardFailure) when a reward failed on every item for reward.max_failed_steps steps in a row."""
        r = rollout.rewards
        self._reward_failures += r.num_errors + r.num_timeouts
        rows = [
            {"prompt": p.question, "answer": p.answer, "completion": c}
            for p, c in zip(rollout.problems, rollout.batch.response_texts, strict=True)
        ]
        for name, watch in self._reward_watch.items():
            watch.see(r.errors.get(name, {}), r.first_errors.get(name), name in r.failed_all, rows)

    NO_SIGNAL_STEPS = 3  # consecutive all-degenerate steps before the warning (one such step happens by chance)

    def _warn_if_no_signal(self, step: int, metrics: dict[str, float], texts: list[str]) -> None:
        """Say so, once, when NO_SIGNAL_STEPS steps in a row had only degenerate groups (no gradient at all),
        naming the cause the trainer measured on this batch when it knows one."""
        self._no_signal_streak = self._no_signal_streak + 1 if metrics[M.DEGENERATE_FRAC] >= 1.0 else 0
        if self._no_signal_streak != self.NO_SIGNAL_STEPS or self._warned_no_signal:
            return
        self._warned_no_signal = True
        cfg = self.cfg
        causes = measured_no_signal_causes(metrics, texts, cfg)
        likely = (
            "Measured on the last batch: " + "; ".join(causes)
            if causes
            else (
                "Likely causes: the model never produces an answer the reward can read (a random or base model: SFT "
                "first; a prompt template it does not follow: data.template / data.chat_template), answers cut off "
                f"by rollout.max_new_tokens={cfg.rollout.max_new_tokens}, or a reward that cannot match "
                f"(reward.functions={list(cfg.reward.functions)})"
            )
        )
        message = (
            f"warning: steps {step + 2 - self.NO_SIGNAL_STEPS}-{step + 1}: every group is degenerate (all "
            f"{cfg.rollout.group_size} responses of each prompt scored the same), so there is no learning signal. "
            f"{likely}. Look at the completions (the run's own data, template and reward): "
            f"hadw eval {self.run_dir} --limit 20 --samples eval_samples.jsonl"
        )
        self.no_signal_warning = message
        with contextlib.suppress(OSError):  # a closed terminal (EIO, before SIGHUP arrives) must not end the run
            print(message, file=sys.stderr, flush=True)
