"""SFT warm start: teach a (tiny) model the answer format on a built-in task before RL.

A random tiny model gets no reward at all, so every group is degenerate and RL has nothing to learn
from. A short supervised phase on (prompt, answer) pairs brings it to a target greedy accuracy; RL then
starts from a policy that solves some prompts of every level and fails others.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from hadw.data import FieldMap, Problem, load_problems, render_prompt, split_held_out
from hadw.eval.evaluate import evaluate
from hadw.progress import Bar
from hadw.rollout.models import to_model_device


@dataclass
class SFTConfig:
    task: str = "addition"  # the built-in task, when `source` is empty
    # Any source spec of hadw.data.sources (task:, benchmark:, hf:, a file); empty = task:<task>. A finite
    # source trains on its rows after the held-out ones (the trainer's held-out rule), scored by math.
    source: str = ""
    fields: str | FieldMap = "auto"  # field names of a file source (hadw.data.make_fields)
    data_dir: str = ""  # benchmark folder; empty = the default data folders
    levels: list[int] | None = None  # None = every level of the task
    template: str = "plain"
    batch_size: int = 64
    lr: float = 2e-3  # tiny models from scratch learn fast at this rate with AdamW
    weight_decay: float = 0.0
    max_steps: int = 3000
    eval_every: int = 100
    eval_size: int = 200
    target_accuracy: float = 0.5  # stop once greedy accuracy on held-out problems reaches this
    # ... and every level's greedy accuracy reaches this: a start with a level RL cannot learn from (all-wrong
    # groups) made RL learn almost nothing (0.33 overall with L3/L4 at 0.08: +0.010 in 200 steps).
    level_floor: float = 0.0
    max_seconds: float | None = None  # wall-clock budget (the demo keeps within 10 minutes)
    seed: int = 0


@dataclass
class SFTResult:
    steps: int
    accuracy: float
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)


def _encode(tokenizer, problems: list[Problem], template: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded [B, L] input ids, attention mask, and labels (−100 on prompt and padding)."""
    rows, labels = [], []
    for problem in problems:
        prompt = tokenizer(render_prompt(problem, template, tokenizer, False), add_special_tokens=False).input_ids
        answer = [*tokenizer(problem.answer, add_special_tokens=False).input_ids, tokenizer.eos_token_id]
        rows.append(prompt + answer)
        labels.append([-100] * len(prompt) + answer)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    targets = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
    return ids, mask, targets


def below_floor(entry: dict[str, float], floor: float) -> dict[str, float]:
    """The levels of an SFT evaluation entry (`sft/acc_<level>` keys) whose greedy accuracy is under `floor`."""
    return {k.removeprefix("sft/acc_"): v for k, v in entry.items() if k.startswith("sft/acc_") and v < floor}


def sft_warm_start(
    model,
    tokenizer,
    cfg: SFTConfig,
    log: Callable[[dict[str, float]], None] | None = None,
    progress: bool | str | None = False,
) -> SFTResult:
    """Train `model` in place until greedy accuracy ≥ cfg.target_accuracy (or a step/time budget).
    progress: the progress display over the step budget, a hadw.progress mode (auto | bar | lines | off;
    None or True: auto, a bar on a terminal and plain lines elsewhere; False: off)."""
    # The held-out rule of hadw.data.sources: a task's evaluation stream, or a file's first rows.
    spec = cfg.source or f"task:{cfg.task}"
    if spec.startswith("task:"):
        train_stream: Sequence[Problem] = load_problems(spec, levels=cfg.levels, seed=cfg.seed)
        eval_problems = list(load_problems(spec, levels=cfg.levels, seed=cfg.seed, held_out=True, limit=cfg.eval_size))
        reward, draw = "exact", 1 << 40
    else:
        rows = load_problems(spec, cfg.fields, cfg.data_dir or None)
        train_stream, eval_problems = split_held_out(rows, cfg.eval_size)
        reward, draw = "math", len(train_stream)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = random.Random(cfg.seed)
    start, history, accuracy, step = time.perf_counter(), [], 0.0, 0
    model.train()
    bar = Bar(cfg.max_steps, "sft", mode=progress, unit="step")
    for step in range(1, cfg.max_steps + 1):
        batch = [train_stream[rng.randrange(draw)] for _ in range(cfg.batch_size)]
        ids, mask, labels = to_model_device(model, *_encode(tokenizer, batch, cfg.template))
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        bar.update(1, loss=f"{float(loss.detach()):.3f}", acc=f"{accuracy:.3f}")
        out_of_time = cfg.max_seconds is not None and time.perf_counter() - start > cfg.max_seconds
        if step % cfg.eval_every == 0 or step == cfg.max_steps or out_of_time:
            model.eval()
            report = evaluate(model, tokenizer, eval_problems, cfg.template, reward, use_chat_template=False)
            model.train()
            accuracy = report.accuracy
            entry = {"sft/step": step, "sft/loss": float(loss.detach()), "sft/accuracy": accuracy}
            entry |= {f"sft/acc_{k.split('/')[-1]}": v for k, v in report.level_accuracy().items()}
            history.append(entry)
            if log is not None:
                log(entry)
            if out_of_time or (accuracy >= cfg.target_accuracy and below_floor(entry, cfg.level_floor) == {}):
                break
    bar.close()
    model.eval()
    return SFTResult(step, accuracy, time.perf_counter() - start, history)
