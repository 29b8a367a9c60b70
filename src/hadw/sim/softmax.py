"""The softmax policy of `hadw sim` (the default model), trained as the native trainer trains.

Per prompt i of level l a softmax over K candidate answers, answer 0 the correct one:

    logits[s, i, :] = base[s, i, :] + x[s, i, :] @ W[s]          W: [S, D, K], shared by every prompt of seed s
    base[i] = (offset[l] + spread·ε_i,  log q_1, ..., log q_{K−1})   q: the wrong mass, q_1 = wrong_concentration
    x[i]    = (1, one_hot(l), feature_scale·u_i / √features)      u_i ~ N(0, I), D = 1 + L + features

so the initial success rate of a prompt is sigmoid(offset + spread·ε) and its wrong mass is concentrated on a
dominant wrong answer, as a language model's often is on one wrong completion. W starts at 0 (the warm start).
Learning on one prompt moves every prompt through the constant and level features, and partly through the
random ones. A sampled answer a has log π(a) = log_softmax(logits)[a]: d log π(a) / d logits = e_a − π, so the
correct and the wrong responses of a group push in different directions, unlike a binary outcome on one logit.

One step per seed, as hadw.train.trainer.Trainer: draw `prompts` prompts (level uniform, then a prompt), sample
G answers each, reward 1 for answer 0, advantages and Φ from hadw.core (through engine.step_weights; the anchor
observes the whole batch once), then `ppo_epochs` passes over shuffled mini-batches of `mini_batch_prompts`
prompts; each optimiser step minimises hadw.core.policy_loss (clipped ratio against the sampling policy,
per-response mean, optional k3 KL to the initial policy and entropy bonus) and applies the per-seed global-norm
clip and AdamW (betas, ε, decoupled weight decay, bias correction, linear warm-up: torch.optim.AdamW's update)
or plain SGD. Seeds are independent runs advanced together as one batch of tensors.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from hadw.core import LOSS_PRESETS, make_anchor, policy_loss
from hadw.sim.engine import SimSettings, observe_anchors, step_weights


def population(settings: SimSettings) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(base [S, N, K], features [S, N, D], level [N]): drawn per seed, identical across arms."""
    n_levels, K = len(settings.prompts_per_level), settings.answers
    level = torch.repeat_interleave(torch.arange(n_levels), torch.tensor(settings.prompts_per_level))
    N, F = level.numel(), settings.features
    wrong = torch.full((K - 1,), (1 - settings.wrong_concentration) / max(K - 2, 1), dtype=torch.float64)
    wrong[0] = settings.wrong_concentration if K > 2 else 1.0
    bases, feats = [], []
    for seed in settings.seeds:
        gen = torch.Generator().manual_seed(seed)
        jitter = torch.randn(N, generator=gen, dtype=torch.float64) * settings.prompt_spread
        correct = torch.tensor(settings.level_offsets, dtype=torch.float64)[level] + jitter
        bases.append(torch.cat([correct.unsqueeze(1), wrong.log().expand(N, K - 1)], dim=1))
        u = torch.randn(N, F, generator=gen, dtype=torch.float64) * (settings.feature_scale / math.sqrt(max(F, 1)))
        feats.append(torch.cat([torch.ones(N, 1, dtype=torch.float64), torch.eye(n_levels, dtype=torch.float64)[level],
                                u], dim=1))  # fmt: skip
    return torch.stack(bases), torch.stack(feats), level


def _accuracy(W: torch.Tensor, base: torch.Tensor, feats: torch.Tensor, level: torch.Tensor, n_levels: int):
    """[S, n_levels + 1]: mean true success rate (π of answer 0) per level, then their mean."""
    p = torch.softmax(base + feats @ W, dim=-1)[..., 0]
    per_level = torch.stack([p[:, level == lv].mean(dim=1) for lv in range(n_levels)], dim=1)
    return torch.cat([per_level, per_level.mean(dim=1, keepdim=True)], dim=1)


class _Optimiser:
    """AdamW (torch.optim.AdamW's update, per element) or plain SGD over W [S, D, K], after a per-seed global-norm
    clip (torch.nn.utils.clip_grad_norm_'s), with the trainer's linear warm-up of the learning rate."""

    def __init__(self, settings: SimSettings, shape: torch.Size):
        self.s, self.lr = settings, settings.learning_rate()
        self.m = torch.zeros(shape, dtype=torch.float64)
        self.v = torch.zeros(shape, dtype=torch.float64)
        self.t = 0

    def step(self, W: torch.Tensor, grad: torch.Tensor) -> None:
        s = self.s
        if s.grad_clip > 0:
            norm = grad.flatten(1).norm(dim=1).view(-1, 1, 1)
            grad = grad * (s.grad_clip / (norm + 1e-6)).clamp(max=1.0)
        lr = self.lr * (min(1.0, (self.t + 1) / s.warmup_steps) if s.warmup_steps > 0 else 1.0)
        self.t += 1
        if s.optimizer == "sgd":
            W -= lr * (grad + s.weight_decay * W)
            return
        b1, b2 = s.betas
        W.mul_(1 - lr * s.weight_decay)
        self.m.mul_(b1).add_(grad, alpha=1 - b1)
        self.v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        denom = (self.v / (1 - b2**self.t)).sqrt_().add_(s.eps)
        W.addcdiv_(self.m, denom, value=-lr / (1 - b1**self.t))


def run_arm_softmax(arm: str, settings: SimSettings, progress=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Train every seed with one arm. Returns (record steps, curves [R, S, L+1], anchors [R, S])."""
    base, feats, level = population(settings)
    S, _, K = base.shape
    G, B, n_levels = settings.group_size, settings.prompts, len(settings.prompts_per_level)
    W = torch.zeros(S, feats.shape[2], K, dtype=torch.float64)
    opt = _Optimiser(settings, W.shape)
    spec = replace(LOSS_PRESETS["grpo"], clip_low=settings.clip_ratio, clip_high=settings.clip_ratio,
                   kl_coef=settings.kl_coef, entropy_coef=settings.entropy_coef)  # fmt: skip
    anchors = [make_anchor(settings.anchor, **settings.anchor_options) for _ in settings.seeds]
    gen = torch.Generator().manual_seed(1_000_003 * (settings.seeds[0] + 1) + S)
    rows = torch.arange(S).view(S, 1)
    sizes = torch.tensor(settings.prompts_per_level)
    starts = torch.cumsum(sizes, 0) - sizes
    ref_logp = torch.log_softmax(base, dim=-1)  # the initial policy (W = 0): the KL's reference
    record_steps, anchor_means, anchor_sum, since = [0], [], torch.zeros(S, dtype=torch.float64), 0
    curves = [_accuracy(W, base, feats, level, n_levels)]
    for step in range(1, settings.steps + 1):
        lv = torch.randint(n_levels, (S, B), generator=gen)
        idx = starts[lv] + (torch.rand(S, B, generator=gen, dtype=torch.float64) * sizes[lv]).long()
        x, b = feats[rows, idx], base[rows, idx]  # [S, B, D], [S, B, K]
        probs = torch.softmax(b + x @ W, dim=-1)  # [S, B, K] the sampling policy
        answer = torch.multinomial(probs.view(-1, K), G, replacement=True, generator=gen).view(S, B, G)
        rewards = (answer == 0).to(torch.float64)
        c, p_phi = observe_anchors(anchors, rewards, level[idx], idx)
        weights, _ = step_weights(arm, rewards, probs[..., 0], c, settings.lam, p_phi, settings.normalize,
                                  settings.advantage_scale)  # fmt: skip
        old_logp = torch.log(probs.gather(2, answer).clamp_min(1e-300))  # [S, B, G]
        ref = ref_logp[rows, idx].gather(2, answer)
        for _epoch in range(settings.ppo_epochs):
            order = torch.randperm(B, generator=gen)
            for start in range(0, B, settings.mini_batch_prompts):
                mb = order[start : start + settings.mini_batch_prompts]
                W.requires_grad_(True)
                logits = b[:, mb] + x[:, mb] @ W  # [S, m, K]
                logp_all = torch.log_softmax(logits, dim=-1)
                logp = logp_all.gather(2, answer[:, mb])  # [S, m, G]
                entropy = -(logp_all.exp() * logp_all).sum(-1, keepdim=True).expand_as(logp)
                n = logp.numel()
                # one row per response, one "token" each; the mean over all seeds' rows × S = the sum over seeds
                # of each seed's own per-response mean (equal row counts), so each seed gets its own gradient
                loss, _ = policy_loss(logp.reshape(n, 1), old_logp[:, mb].reshape(n, 1),
                                      weights[:, mb].reshape(n), torch.ones(n, 1, dtype=torch.float64), spec,
                                      ref_logprobs=ref[:, mb].reshape(n, 1), entropy=entropy.reshape(n, 1))  # fmt: skip
                (grad,) = torch.autograd.grad(loss * S, W)
                W = W.detach()
                with torch.no_grad():
                    opt.step(W, grad)
        anchor_sum += c if c.dim() == 1 else c.mean(dim=(1, 2))
        since += 1
        if step % settings.eval_every == 0 or step == settings.steps:
            curves.append(_accuracy(W, base, feats, level, n_levels))
            anchor_means.append(anchor_sum / since)
            anchor_sum, since = torch.zeros(S, dtype=torch.float64), 0
            record_steps.append(step)
        if progress is not None:
            progress(1)
    anchor_arr = torch.stack([anchor_means[0], *anchor_means]).numpy()  # record 0 repeats the first mean
    return np.array(record_steps), torch.stack(curves).detach().numpy(), anchor_arr
