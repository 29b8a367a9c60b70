"""The rollout batch every engine returns, and the engine interface the trainer talks to."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from hadw.rollout.sampling import SamplingParams


@dataclass
class RolloutBatch:
    """G = n samples for each of the input prompts, N = num_prompts * n rows.

    Row k is sample (k % n) of prompt (k // n). Engines return the batch on the CPU; `.to(device)`.
    """

    prompt_ids: torch.Tensor  # [N, P] long, LEFT-padded with the pad id
    prompt_mask: torch.Tensor  # [N, P] long, 1 on real prompt tokens
    response_ids: torch.Tensor  # [N, R] long, RIGHT-padded; includes the stop/EOS token when generated
    response_mask: torch.Tensor  # [N, R] long, 1 on generated tokens (incl. the EOS), 0 after
    logprobs: torch.Tensor  # [N, R] float32, log softmax(logits / T) of each sampled token, 0 where masked
    finish_reasons: list[str]  # "stop" (EOS / stop token) | "length" (hit max_new_tokens)
    prompt_index: torch.Tensor  # [N] long, index of the row's prompt in the input list
    response_texts: list[str]  # decoded responses, special tokens skipped

    @property
    def input_ids(self) -> torch.Tensor:
        """[N, P + R] prompt and response side by side (what `compute_logprobs` takes)."""
        return torch.cat([self.prompt_ids, self.response_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """[N, P + R] 1 on real prompt tokens and generated tokens."""
        return torch.cat([self.prompt_mask, self.response_mask], dim=1)

    @property
    def response_lengths(self) -> torch.Tensor:
        """[N] long, number of generated tokens per row (incl. the EOS)."""
        return self.response_mask.sum(dim=1)

    def __len__(self) -> int:
        return self.response_ids.shape[0]

    def to(self, device: torch.device | str) -> RolloutBatch:
        moved = {
            f.name: getattr(self, f.name).to(device)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return dataclasses.replace(self, **moved)


class RolloutEngine(Protocol):
    def generate(
        self, prompts: list[list[int]], params: SamplingParams, on_rows_done: Callable[[int], None] | None = None
    ) -> RolloutBatch:
        """Sample params.n responses for each prompt (a list of token ids, no padding).

        on_rows_done(n), when given, is called as responses finish (n of them since the last call), so a
        progress bar can move while a large batch decodes.
        """
        ...


def check_prompts(prompts: list[list[int]]) -> None:
    """Clear errors for the inputs every engine shares."""
    if not prompts:
        raise ValueError("generate: prompts is empty; pass a list of token-id lists")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"generate: prompts[{i}] is empty; every prompt needs at least one token")


def left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> (ids [N, L] long, mask [N, L] long), padded on the left."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
    return ids, mask


def right_pad(rows: list[list[int]] | list[list[float]], value: float, dtype: torch.dtype) -> torch.Tensor:
    """Lists -> [N, L] tensor padded on the right with `value` (L = longest row, at least 1)."""
    width = max(1, max(len(r) for r in rows))
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out


def completion_ids(batch: RolloutBatch) -> list[list[int]]:
    """Each row's generated token ids (EOS included when generated, padding left out): TRL's `completion_ids`."""
    return [ids[mask.bool()].tolist() for ids, mask in zip(batch.response_ids, batch.response_mask, strict=True)]
