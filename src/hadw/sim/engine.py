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

This module runs the arms (`simulate`) and holds the logit model. `SimSettings` and the arms' weights live in
hadw.sim.arms, below this module and the softmax model, which both use them; they still import from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from hadw.core import make_anchor
from hadw.core.weighting import NORMALIZE
from hadw.sim.arms import ARMS, DEFAULT_LR, MODELS, OPTIMIZERS, SimSettings, observe_anchors, step_weights
from hadw.sim.softmax import run_arm_softmax

# The tiny model's paired SD of a final avg@k difference between two arms (points of accuracy / 100), measured over
# 20 seeds on the `sums` 2-4 testbed (benchmarks/studies/hadw_effect/hadw_effect.md): what `seeds needed` assumes.
TINY_PAIRED_SD = 0.013


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


def _accuracy(z: torch.Tensor, level: torch.Tensor, n_levels: int) -> torch.Tensor:
    """[S, n_levels + 1]: mean true success rate per level, then their mean ("all": levels weigh equally,
    as in an evaluation set whose problems draw their level uniformly)."""
    p = torch.sigmoid(z)
    per_level = torch.stack([p[:, level == lv].mean(dim=1) for lv in range(n_levels)], dim=1)
    return torch.cat([per_level, per_level.mean(dim=1, keepdim=True)], dim=1)


def run_arm(arm: str, settings: SimSettings, progress=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Train every seed with one arm. Returns (record steps, curves [R, S, L+1], anchors [R, S])."""
    if settings.model == "softmax":
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
