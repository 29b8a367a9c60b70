"""GRPO ± HA-DW on a simulated prompt population whose true success rates are known.

Two policy models (`SimSettings.model`):

softmax (the default; hadw.sim.softmax): per prompt a softmax over K candidate answers (answer 0 correct, the
    wrong ones with a dominant wrong mode), logits = fixed per-prompt base + features(prompt) @ W, with W shared by
    every prompt (a learnt prompt moves the others through their shared level and random features). Trained as the
    native trainer trains: P prompts per rollout batch in mini-batches of `mini_batch_prompts`, `ppo_epochs` passes,
    the clipped PPO ratio, AdamW with its betas / ε / weight decay / linear warm-up and the global-norm clip (or
    plain SGD), optional KL-to-reference and entropy terms, the loss from hadw.core.policy_loss.

logit (the previous model, kept as an option): one logit per prompt,

    z[s, i] = skill[s] + theta[s, i] + offset[level(i)]        p[s, i] = sigmoid(z[s, i])

`skill` is shared by every prompt, `theta` is the prompt's own logit, `offset` a fixed difficulty per level; one
plain SGD step per rollout batch on −mean(Â·Φ · log π(r)), d log π / dz = r − p. A binary outcome with one logit
gives every response of a prompt the same gradient direction, and SGD makes λ a learning rate: this model
over-predicts HA-DW under AdamW (docs/sim.md).

Arms (how the per-response weight of the surrogate is formed; every arm then × `advantage_scale`):
    grpo         Â = (r − p̂)/σ̂, Φ = 1                                 (hadw.core.compute_advantages)
    grpo_lam     Â·λ: GRPO with the step scaled by λ — HA-DW's Φ averages ≈ λ, so this arm separates
                 "a λ-times larger step" from the re-weighting itself (the trainer's algorithm.advantage_scale=λ)
    hadw         Â·Φ with Φ from p̂ and the anchor, normalised as `normalize` says (hadw.core.apply_hadw's maths)
    hadw_norm    Â·Φ with Φ rescaled to mean 1 over each batch's informative responses (hadw.normalize=batch)
    hadw_oracle  Â·Φ with Φ from the TRUE p instead of p̂                 (method.md §3.4: the ceiling of Φ)
    debiased     (r − c*·p̂)/σ̂, c* = Lemma 1's exact de-biasing constant at the true p
                 (hadw.theory.debias_constant; E[c*·p̂ | S] = p, so the baseline is unbiased given S)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from hadw.core import LOSS_PRESETS, compute_advantages, hadw_weights, make_anchor, normalize_weights, scale_advantages
from hadw.core.weighting import DEFAULT_LAMBDA, NORMALIZE
from hadw.theory.rectified import debias_constant

ARMS = ("grpo", "grpo_lam", "hadw", "hadw_norm", "hadw_oracle", "debiased")
MODELS = ("softmax", "logit")
OPTIMIZERS = ("adamw", "sgd")
# The learning rate `lr=None` stands for, per (model, optimiser): calibrated so that GRPO on the default population
# (the tiny model's `sums` 2-4 testbed, benchmarks/archive/sim_vs_trainer.md) ends where the tiny model's GRPO ends
# (AdamW: the trainer's defaults; SGD: optim.lr=0.01 with the clip off, a one-seed pilot; the logit model: its old
# default).
DEFAULT_LR = {("softmax", "adamw"): 3e-4, ("softmax", "sgd"): 0.0012, ("logit", "sgd"): 0.5}
# The tiny model's paired SD of a final avg@k difference between two arms (points of accuracy / 100), measured
# over 20 seeds on the `sums` 2-4 testbed (benchmarks/archive/hadw_effect.md): what `seeds needed` assumes by default.
TINY_PAIRED_SD = 0.013


@dataclass
class SimSettings:
    """Every knob of `hadw sim`. The defaults are the tiny model's `sums` 2-4 testbed as the native trainer runs it
    (the demo's recipe: 16 prompts × G = 8 per step in mini-batches of 4, 200 steps, AdamW with warm-up 5 and clip
    1.0), the population calibrated to its warm start (benchmarks/archive/sim_vs_trainer.md); 20 seeds × 6 arms run
    in well under a minute on 2 cores."""

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


@dataclass
class SimResult:
    """curves[arm]: [n_records, n_seeds, n_levels + 1] true expected accuracy (last column: all prompts);
    steps: [n_records] the step after which each record was taken (0 = before training)."""

    settings: SimSettings
    steps: np.ndarray
    curves: dict[str, np.ndarray]
    anchors: dict[str, np.ndarray]  # arm -> [n_records, n_seeds] mean C over the steps since the last record
    seconds: dict[str, float]


def _check(settings: SimSettings) -> None:
    if len(settings.prompts_per_level) != len(settings.level_offsets) or not settings.prompts_per_level:
        raise ValueError("prompts_per_level and level_offsets need one entry per level, same length")
    if min(settings.prompts_per_level) < 1 or settings.group_size < 2 or settings.prompts < 1:
        raise ValueError("need >= 1 prompt per level, group_size >= 2 and prompts >= 1")
    if settings.steps < 1 or not settings.seeds or settings.eval_every < 1:
        raise ValueError("need steps >= 1, at least one seed and eval_every >= 1")
    unknown = [a for a in settings.arms if a not in ARMS]
    if unknown or not settings.arms:
        raise ValueError(f"unknown arm(s) {unknown}; allowed: {', '.join(ARMS)}")
    if settings.model not in MODELS or settings.optimizer not in OPTIMIZERS or settings.normalize not in NORMALIZE:
        raise ValueError(f"model must be one of {MODELS}, optimizer one of {OPTIMIZERS}, normalize one of {NORMALIZE}")
    if (settings.model, settings.optimizer) not in DEFAULT_LR:
        raise ValueError("the logit model trains with plain SGD only (optimizer=sgd)")
    if settings.answers < 2 or settings.mini_batch_prompts < 1 or settings.ppo_epochs < 1 or settings.tokens < 1:
        raise ValueError("need answers >= 2, tokens >= 1, mini_batch_prompts >= 1 and ppo_epochs >= 1")
    if settings.answers > 2 and not 1 / (settings.answers - 1) <= settings.wrong_concentration < 1:
        raise ValueError(f"wrong_concentration must be in [1/(K-1), 1) = [{1 / (settings.answers - 1):.3f}, 1)")


def initial_policy(settings: SimSettings) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(skill [S], theta [S, P], offset [P], level [P]) — theta drawn per seed, identical across arms."""
    level = torch.repeat_interleave(
        torch.arange(len(settings.prompts_per_level)), torch.tensor(settings.prompts_per_level)
    )
    offset = torch.tensor(settings.level_offsets, dtype=torch.float64)[level]
    theta = torch.stack(
        [
            torch.randn(level.numel(), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
            for seed in settings.seeds
        ]
    ).mul_(settings.prompt_spread)
    skill = torch.zeros(len(settings.seeds), dtype=torch.float64)
    return skill, theta, offset, level


def sample_groups(p: torch.Tensor, group_size: int, gen: torch.Generator) -> torch.Tensor:
    """Exact group sampling: [..., G] independent Bernoulli(p) rewards (0./1.) for p of shape [...]."""
    u = torch.rand(*p.shape, group_size, generator=gen, dtype=p.dtype)
    return (u < p.unsqueeze(-1)).to(p.dtype)


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


def _accuracy(z: torch.Tensor, level: torch.Tensor, n_levels: int) -> torch.Tensor:
    """[S, n_levels + 1]: mean true success rate per level, then their mean ("all": levels weigh equally,
    as in an evaluation set whose problems draw their level uniformly)."""
    p = torch.sigmoid(z)
    per_level = torch.stack([p[:, level == lv].mean(dim=1) for lv in range(n_levels)], dim=1)
    return torch.cat([per_level, per_level.mean(dim=1, keepdim=True)], dim=1)


def run_arm(arm: str, settings: SimSettings, progress=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Train every seed with one arm. Returns (record steps, curves [R, S, L+1], anchors [R, S])."""
    if settings.model == "softmax":
        from hadw.sim.softmax import run_arm_softmax  # imports this module's helpers

        return run_arm_softmax(arm, settings, progress)
    return run_arm_logit(arm, settings, progress)


def run_arm_logit(arm: str, settings: SimSettings, progress=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The one-logit-per-prompt SGD model (module docstring); returns as run_arm."""
    skill, theta, offset, level = initial_policy(settings)
    skill.requires_grad_(True)
    theta.requires_grad_(True)
    S, G, B = len(settings.seeds), settings.group_size, settings.prompts
    n_levels = len(settings.level_offsets)
    anchors = [make_anchor(settings.anchor, **settings.anchor_options) for _ in settings.seeds]
    gen = torch.Generator().manual_seed(1_000_003 * (settings.seeds[0] + 1) + S)
    rows = torch.arange(S).unsqueeze(1)
    sizes = torch.tensor(settings.prompts_per_level)
    starts = torch.cumsum(sizes, 0) - sizes
    record_steps, curves, anchor_means, anchor_sum, since = [0], [], [], torch.zeros(S, dtype=torch.float64), 0
    with torch.no_grad():
        curves.append(_accuracy(skill.unsqueeze(1) + theta + offset, level, n_levels))
    for step in range(1, settings.steps + 1):
        # level uniform, then a prompt uniform within it (as hadw.data's task streams draw); the same
        # draws for every arm while the arms' rewards agree (same generator seed)
        lv = torch.randint(n_levels, (S, B), generator=gen)
        idx = starts[lv] + (torch.rand(S, B, generator=gen, dtype=torch.float64) * sizes[lv]).long()
        z = skill.unsqueeze(1) + theta[rows, idx] + offset[idx]  # [S, B]
        with torch.no_grad():
            p = torch.sigmoid(z)
            rewards = sample_groups(p, G, gen)
            c, p_phi = observe_anchors(anchors, rewards, level[idx], idx)
            weights, _ = step_weights(
                arm, rewards, p, c, settings.lam, p_phi, settings.normalize, settings.advantage_scale
            )
        logp = rewards * F.logsigmoid(z).unsqueeze(-1) + (1 - rewards) * F.logsigmoid(-z).unsqueeze(-1)
        loss = -(weights * logp).mean(dim=(1, 2)).sum()  # per seed: mean over its B·G responses
        g_skill, g_theta = torch.autograd.grad(loss, (skill, theta))
        with torch.no_grad():
            # theta's gradient is 1/(B·G)-scaled per response; scale by B so lr reads "per visited prompt"
            theta -= settings.learning_rate() * B * g_theta
            skill -= settings.skill_lr * B * g_skill
        anchor_sum += c if c.dim() == 1 else c.mean(dim=(1, 2))
        since += 1
        if step % settings.eval_every == 0 or step == settings.steps:
            with torch.no_grad():
                curves.append(_accuracy(skill.unsqueeze(1) + theta + offset, level, n_levels))
            anchor_means.append(anchor_sum / since)
            anchor_sum, since = torch.zeros(S, dtype=torch.float64), 0
            record_steps.append(step)
        if progress is not None:
            progress(1)
    anchor_arr = torch.stack([anchor_means[0], *anchor_means]).numpy()  # record 0 repeats the first mean
    return np.array(record_steps), torch.stack(curves).numpy(), anchor_arr


def simulate(settings: SimSettings, progress=None) -> SimResult:
    """Run every arm of `settings` on every seed (same initial policies and prompt draws per seed)."""
    import time

    _check(settings)
    curves, anchors, seconds, steps = {}, {}, {}, np.zeros(0)
    for arm in settings.arms:
        start = time.perf_counter()
        steps, curves[arm], anchors[arm] = run_arm(arm, settings, progress)
        seconds[arm] = time.perf_counter() - start
    return SimResult(settings, steps, curves, anchors, seconds)
