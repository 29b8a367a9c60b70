"""The simulator's settings and what an arm does in one step, shared by both policy models of `hadw sim`.

`SimSettings` (every knob), the arms and `step_weights` (an arm's per-response weight Â·Φ of the surrogate, from
hadw.core), and `observe_anchors` (each seed's anchor fed once per batch). The one-logit model in
hadw.sim.engine and the softmax model in hadw.sim.softmax both train with these, and engine runs both models:
so these sit below both (softmax importing them from engine, which imports softmax, was an import circle;
tests/test_layers.py). What each arm is: hadw.sim.engine's docstring. Import them from hadw.sim.engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hadw.core import LOSS_PRESETS, compute_advantages, hadw_weights, normalize_weights, scale_advantages
from hadw.core.weighting import DEFAULT_LAMBDA
from hadw.theory.rectified import debias_constant

ARMS = ("grpo", "grpo_lam", "hadw", "hadw_norm", "hadw_oracle", "debiased")
MODELS = ("softmax", "logit")
OPTIMIZERS = ("adamw", "sgd")
# The learning rate `lr=None` stands for, per (model, optimiser): calibrated so that GRPO on the default population
# (the tiny model's `sums` 2-4 testbed, benchmarks/studies/sim_vs_trainer/sim_vs_trainer.md) ends where the tiny
# model's GRPO ends (AdamW: the trainer's defaults; SGD: optim.lr=0.01 with the clip off, a one-seed pilot; the logit
# model: its old default).
DEFAULT_LR = {("softmax", "adamw"): 3e-4, ("softmax", "sgd"): 0.0012, ("logit", "sgd"): 0.5}


@dataclass
class SimSettings:
    """Every knob of `hadw sim`. The defaults are the tiny model's `sums` 2-4 testbed as the native trainer runs it
    (the demo's recipe: 16 prompts × G = 8 per step in mini-batches of 4, 200 steps, AdamW with warm-up 5 and clip
    1.0), the population calibrated to its warm start (benchmarks/studies/sim_vs_trainer/sim_vs_trainer.md); 20 seeds
    × 6 arms run in well under a minute on 2 cores."""

    model: str = "softmax"  # softmax (K answers, shared parameters, the trainer's optimiser) | logit (the old model)
    # Prompts per level and each level's logit offset (harder levels: lower offset): the logit of a level's
    # initial success rate. Defaults: the warm start's avg@4 per level, 0.55 / 0.23 / 0.13.
    prompts_per_level: list[int] = field(default_factory=lambda: [1000, 1000, 1000])
    level_offsets: list[float] = field(default_factory=lambda: [0.25, -1.45, -2.2])
    prompt_spread: float = 1.0  # std of the per-prompt logit jitter (prompts within a level differ)
    group_size: int = 8  # G responses per prompt
    prompts: int = 16  # prompts per step (the rollout batch is prompts × G responses)
    steps: int = 200
    lr: float | None = None  # learning rate; None = DEFAULT_LR of the model and optimiser
    skill_lr: float = 0.0005  # logit model: SGD rate of the shared skill (its gradient sums over the batch)
    lam: float = DEFAULT_LAMBDA  # λ of HA-DW
    normalize: str = "none"  # the hadw arm's Φ: none (the paper's) | batch (mean 1 over informative responses)
    advantage_scale: float = 1.0  # every arm's Â·Φ times this (the trainer's algorithm.advantage_scale)
    anchor: str = "window"  # any kind hadw.core.make_anchor knows (per_level / per_source: keyed by level)
    anchor_options: dict = field(default_factory=dict)
    seeds: list[int] = field(default_factory=lambda: list(range(20)))
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    eval_every: int = 5  # record the true accuracy every this many steps (and at the last one)
    # softmax model: the policy
    # T tokens per answer, each a softmax over K (token 0 right); an answer is right when every token is. T > 1: a
    # wrong answer shares most tokens with the right one, so pushing it down also pushes down those shared tokens
    tokens: int = 1
    answers: int = 4  # K candidate answers per prompt (one correct); with tokens > 1: K candidates per token
    wrong_concentration: float = 0.6  # share of the initial wrong mass on the dominant wrong answer (≥ 1/(K−1))
    features: int = 16  # random per-prompt feature dimensions (besides a constant and a level indicator)
    feature_scale: float = 1.0  # norm scale of the random features (how much prompts of a level differ in W)
    # softmax model: the trainer's optimisation (hadw.train.config's optim.* / train.* / algorithm.*)
    optimizer: str = "adamw"  # adamw | sgd (plain, no momentum)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    warmup_steps: int = 5  # optimiser steps of linear warm-up
    grad_clip: float = 1.0  # global-norm clip per seed (0 = off)
    mini_batch_prompts: int = 4  # prompts per optimiser step
    ppo_epochs: int = 1
    clip_ratio: float = LOSS_PRESETS["grpo"].clip_low  # PPO's ε (both sides, as the grpo preset)
    kl_coef: float = 0.0  # β of the k3 KL to the initial policy
    entropy_coef: float = 0.0  # weight of the (exact) entropy bonus

    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR[(self.model, self.optimizer)]


def step_weights(
    arm: str,
    rewards: torch.Tensor,
    p_true: torch.Tensor,
    anchors: torch.Tensor,
    lam: float,
    p_phi: torch.Tensor | None = None,
    normalize: str = "none",
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-response weight of the surrogate (Â·Φ) and each response's group's p̂.

    rewards: [S, B, G] 0/1; p_true: [S, B] the prompts' true success rates; anchors: this step's C, [S]
    (one per seed) or [S, B, G] (per response: per_level anchors); p_phi: [S, B, G] the success rate Φ
    compares with C in place of p̂ (per_prompt's pooled p̃), None for p̂; normalize: the hadw arm's Φ
    (hadw_norm always "batch"; each seed's batch normalised on its own); scale: every arm's weights × this.
    returns: weights [S, B, G], p_hat [S, B, G].
    """
    weights, p_hat = _arm_weights(arm, rewards, p_true, anchors, lam, p_phi, normalize)
    return scale_advantages(weights, scale), p_hat


def _arm_weights(arm, rewards, p_true, anchors, lam, p_phi, normalize):
    S, B, G = rewards.shape
    flat = rewards.reshape(-1)
    group_ids = torch.arange(S * B).repeat_interleave(G)  # group = (seed, slot): seeds never mix
    adv = compute_advantages(flat, group_ids, "grpo")
    p_hat = adv.group_mean.view(S, B, G)
    a_hat = adv.advantages.view(S, B, G)
    c = (anchors.view(S, 1, 1) if anchors.dim() == 1 else anchors).expand(S, B, G).reshape(-1).to(rewards.dtype)

    def reweighted(p_cmp: torch.Tensor, mode: str) -> torch.Tensor:
        phi = hadw_weights(adv.advantages, p_cmp, c, lam).view(S, B, G)
        if mode != "none":  # per seed: each seed is its own run, with its own batch
            phi = torch.stack([normalize_weights(phi[s].reshape(-1), a_hat[s].reshape(-1), mode) for s in range(S)])
        return a_hat * phi.view(S, B, G)

    if arm == "grpo":
        return a_hat, p_hat
    if arm == "grpo_lam":
        return a_hat * lam, p_hat
    if arm in ("hadw", "hadw_norm"):
        p_cmp = adv.group_mean if p_phi is None else p_phi.reshape(-1).to(rewards.dtype)
        return reweighted(p_cmp, "batch" if arm == "hadw_norm" else normalize), p_hat
    if arm == "hadw_oracle":
        return reweighted(p_true.unsqueeze(-1).expand(S, B, G).reshape(-1), normalize), p_hat
    if arm == "debiased":
        c_star = torch.from_numpy(debias_constant(p_true.clamp(1e-9, 1 - 1e-9).numpy(), G)).to(rewards.dtype)
        centred = rewards - c_star.unsqueeze(-1) * p_hat
        std = adv.group_std.view(S, B, G).clamp(min=1e-6)
        return torch.where(adv.degenerate.view(S, B, G), torch.zeros_like(centred), centred / std), p_hat
    raise ValueError(f"unknown arm {arm!r}")


def observe_anchors(
    anchors: list, rewards: torch.Tensor, levels: torch.Tensor, prompt_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Feed each seed's anchor once with its batch, as hadw.core.apply_hadw does.

    rewards: [S, B, G]; levels, prompt_ids: [S, B]. Returns C ([S], or [S, B, G] for per_level /
    per_source, keyed by level) and, for per_prompt, p̃ [S, B, G] (else None).
    """
    S, B, G = rewards.shape
    if not getattr(anchors[0], "needs_keys", False):
        c = [a.observe(float(r.mean())) for a, r in zip(anchors, rewards, strict=True)]
        return torch.tensor(c, dtype=torch.float64), None
    by_prompt = hasattr(anchors[0], "observe_prompts")
    keys = (prompt_ids if by_prompt else levels).repeat_interleave(G, dim=1).tolist()  # [S][B·G]
    if by_prompt:
        out = [a.observe_prompts(r.reshape(-1), k) for a, r, k in zip(anchors, rewards, keys, strict=True)]
        c = torch.tensor([float(ci) for ci, _ in out], dtype=torch.float64)
        return c, torch.stack([p for _, p in out]).view(S, B, G).to(torch.float64)
    rows = [a.observe_keyed(r.reshape(-1), k) for a, r, k in zip(anchors, rewards, keys, strict=True)]
    return torch.stack(rows).view(S, B, G).to(torch.float64), None
