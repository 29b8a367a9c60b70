"""The softmax policy of `hadw sim` (the default model), trained as the native trainer trains.

Per prompt i of level l a softmax over K candidate answers, answer 0 the correct one:

    logits[s, i, :] = base[s, i, :] + x[s, i, :] @ W[s]          W: [S, D, K], shared by every prompt of seed s
    base[i] = (offset[l] + spread·ε_i,  log q_1, ..., log q_{K−1})   q: the wrong mass, q_1 = wrong_concentration
    x[i]    = (1, one_hot(l), feature_scale·u_i / √features)      u_i ~ N(0, I), D = 1 + L + features

so the initial success rate of a prompt is sigmoid(offset + spread·ε) and its wrong mass is concentrated on a
dominant wrong answer, as a language model's often is on one wrong completion. With `tokens` = T > 1 an answer is
T tokens, each a softmax over K as above (token 0 right, its rate the T-th root of the prompt's), and it is right
when every token is: a wrong answer then shares its right tokens with the right answer, so a negative advantage
pushes those shared tokens down too (the trainer's per-token loss, one logit block per position).
W starts at 0 (the warm start).
Learning on one prompt moves every prompt through the constant and level features, and partly through the
random ones. A sampled answer a has log π(a) = log_softmax(logits)[a]: d log π(a) / d logits = e_a − π, so the
correct and the wrong responses of a group push in different directions, unlike a binary outcome on one logit.

One step per seed, as hadw.train.trainer.Trainer: draw `prompts` prompts (level uniform, then a prompt), sample
G answers each, reward 1 for answer 0, advantages and Φ from hadw.core (through arms.step_weights; the anchor
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
from hadw.sim.arms import SimSettings, observe_anchors, step_weights


def population(settings: SimSettings) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(base [S, N, T, K], features [S, N, D], level [N]): drawn per seed, identical across arms.

    A prompt's success rate is sigmoid(offset + spread·ε); with T answer tokens each position's correct token has
    that rate's T-th root, so the whole answer starts right with the same probability."""
    n_levels, K, T = len(settings.prompts_per_level), settings.answers, settings.tokens
    level = torch.repeat_interleave(torch.arange(n_levels), torch.tensor(settings.prompts_per_level))
    N, F = level.numel(), settings.features
    wrong = torch.full((K - 1,), (1 - settings.wrong_concentration) / max(K - 2, 1), dtype=torch.float64)
    wrong[0] = settings.wrong_concentration if K > 2 else 1.0
    bases, feats = [], []
    for seed in settings.seeds:
        gen = torch.Generator().manual_seed(seed)
        jitter = torch.randn(N, generator=gen, dtype=torch.float64) * settings.prompt_spread
        correct = torch.tensor(settings.level_offsets, dtype=torch.float64)[level] + jitter
        if T > 1:  # per token: logit of sigmoid(z)^(1/T)
            log_p = torch.nn.functional.logsigmoid(correct) / T
            correct = log_p - torch.log(-torch.expm1(log_p))
        row = torch.cat([correct.unsqueeze(1), wrong.log().expand(N, K - 1)], dim=1)  # [N, K]
        bases.append(row.unsqueeze(1).expand(N, T, K))
        u = torch.randn(N, F, generator=gen, dtype=torch.float64) * (settings.feature_scale / math.sqrt(max(F, 1)))
        feats.append(torch.cat([torch.ones(N, 1, dtype=torch.float64), torch.eye(n_levels, dtype=torch.float64)[level],
                                u], dim=1))  # fmt: skip
    return torch.stack(bases), torch.stack(feats), level


def _logits(base: torch.Tensor, x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """base [S, n, T, K] + x [S, n, D] @ W [S, D, T·K] -> [S, n, T, K]."""
    return base + (x @ W).view(base.shape)


def _accuracy(W: torch.Tensor, base: torch.Tensor, feats: torch.Tensor, level: torch.Tensor, n_levels: int):
    """[S, n_levels + 1]: mean true success rate (every token of the answer correct) per level, then their mean."""
    p = torch.softmax(_logits(base, feats, W), dim=-1)[..., 0].prod(dim=-1)
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


def _token_logp(logp_all: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """logp_all [S, m, T, K], answer [S, m, G, T] -> [S, m, G, T]: the log-prob of each sampled token."""
    G = answer.shape[2]
    return logp_all.unsqueeze(2).expand(-1, -1, G, -1, -1).gather(4, answer.unsqueeze(-1))[..., 0]


def run_arm_softmax(arm: str, settings: SimSettings, progress=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Train every seed with one arm. Returns (record steps, curves [R, S, L+1], anchors [R, S])."""
    base, feats, level = population(settings)
    S, _, T, K = base.shape
    G, B, n_levels = settings.group_size, settings.prompts, len(settings.prompts_per_level)
    W = torch.zeros(S, feats.shape[2], T * K, dtype=torch.float64)
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
        x, b = feats[rows, idx], base[rows, idx]  # [S, B, D], [S, B, T, K]
        probs = torch.softmax(_logits(b, x, W), dim=-1)  # [S, B, T, K] the sampling policy
        draws = torch.multinomial(probs.reshape(-1, K), G, replacement=True, generator=gen)
        answer = draws.view(S, B, T, G).transpose(2, 3)  # [S, B, G, T]: G answers of T tokens
        rewards = (answer == 0).all(dim=-1).to(torch.float64)  # right only when every token is
        c, p_phi = observe_anchors(anchors, rewards, level[idx], idx)
        weights, _ = step_weights(arm, rewards, probs[..., 0].prod(dim=-1), c, settings.lam, p_phi,
                                  settings.normalize, settings.advantage_scale)  # fmt: skip

        old_logp = _token_logp(torch.log(probs.clamp_min(1e-300)), answer)  # [S, B, G, T]
        ref = _token_logp(ref_logp[rows, idx], answer)
        for _epoch in range(settings.ppo_epochs):
            order = torch.randperm(B, generator=gen)
            for start in range(0, B, settings.mini_batch_prompts):
                mb = order[start : start + settings.mini_batch_prompts]
                W.requires_grad_(True)
                logp_all = torch.log_softmax(_logits(b[:, mb], x[:, mb], W), dim=-1)  # [S, m, T, K]
                logp = _token_logp(logp_all, answer[:, mb])  # [S, m, G, T]
                entropy = -(logp_all.exp() * logp_all).sum(-1).unsqueeze(2).expand_as(logp)
                n = logp.shape[0] * logp.shape[1] * G
                # one row per response, T tokens each, as the trainer's per-token loss; the mean over all seeds'
                # rows × S = the sum of each seed's own mean (equal row counts): each seed gets its own gradient
                loss, _ = policy_loss(logp.reshape(n, T), old_logp[:, mb].reshape(n, T), weights[:, mb].reshape(n),
                                      torch.ones(n, T, dtype=torch.float64), spec,
                                      ref_logprobs=ref[:, mb].reshape(n, T), entropy=entropy.reshape(n, T))  # fmt: skip
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
