"""A vectorised simulator of GRPO ± HA-DW on a population of prompts (docs/sim.md).

Policy: prompt i succeeds with p_i = sigmoid(b + u_i), b a shared logit (what transfers between prompts)
and u_i the prompt's own logit. Each step draws a batch of prompts, samples G Bernoulli responses per
prompt exactly, forms GRPO advantages (optionally × Φ from hadw.core.weighting) and takes the exact
policy-gradient step: d log π(r) / d logit = r − p. All seeds run at once as the leading tensor axis;
every arm of one seed sees the same initial population and the same uniform random numbers (paired).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hadw.core.anchors import make_anchor
from hadw.core.weighting import DEFAULT_LAMBDA, hadw_weights

BUCKETS = (0.0, 0.1, 0.3, 0.7, 1.0)  # initial success-rate buckets: hard, medium-hard, medium, easy


@dataclass
class SimConfig:
    """Every option of `hadw sim`, with its default and why."""

    prompts: int = 2000  # population size: thousands, so every bucket has hundreds of prompts
    steps: int = 200  # policy updates
    seeds: int = 20  # independent populations/samples (the intervals are across seeds)
    batch: int = 128  # prompts per step (the paper's batch of 512 prompts is too slow to matter here)
    group_size: int = 8  # G responses per prompt
    beta: tuple[float, float] = (0.6, 1.2)  # initial p ~ Beta(a, b): most prompts hard, as in RLVR on math
    lr: float = 0.3  # step size on the per-prompt logits: reaches ~0.75 overall accuracy by step 200
    shared_lr: float = 0.02  # step size on the shared logit: how far learning transfers between prompts
    std_normalise: bool = True  # GRPO's Â = (r − mean)/std (False: Dr. GRPO's r − mean)
    lam: float = DEFAULT_LAMBDA
    arms: list[str] = field(default_factory=lambda: ["grpo", "grpo-lam", "window", "kalman"])
    # grpo; grpo-lam (Â·λ: mean Φ ≈ λ, so this separates the step-size effect from the reweighting); an anchor kind


def _initial_logits(cfg: SimConfig, gen: torch.Generator) -> torch.Tensor:
    """[S, P] per-prompt logits with p ~ Beta(a, b) (a ratio of Gamma draws)."""
    a, b = cfg.beta
    ga = torch._standard_gamma(torch.full((cfg.seeds, cfg.prompts), a, dtype=torch.float64), generator=gen)
    gb = torch._standard_gamma(torch.full((cfg.seeds, cfg.prompts), b, dtype=torch.float64), generator=gen)
    p = (ga / (ga + gb)).clamp(1e-4, 1 - 1e-4)
    return torch.log(p) - torch.log1p(-p)


def _run_arm(cfg: SimConfig, arm: str, u0: torch.Tensor, idx: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """One arm. u0: [S, P]; idx: [T, S, B] prompts drawn; noise: [T, S, B, G] uniforms.
    Returns the population's expected accuracy per step and bucket: [T+1, S, len(BUCKETS)] (last = all)."""
    S = u0.shape[0]
    u, shared = u0.clone(), torch.zeros(S, 1, dtype=u0.dtype)
    buckets = torch.bucketize(torch.sigmoid(u0), torch.tensor(BUCKETS[1:-1], dtype=u0.dtype))
    onehot = torch.nn.functional.one_hot(buckets, len(BUCKETS) - 1).to(u0.dtype)  # [S, P, K]
    anchors = None if arm in ("grpo", "grpo-lam") else [make_anchor(arm) for _ in range(S)]
    curves = []

    def record() -> None:
        p = torch.sigmoid(u + shared)
        per_bucket = torch.einsum("sp,spk->sk", p, onehot) / onehot.sum(1).clamp_min(1)
        curves.append(torch.cat([per_bucket, p.mean(1, keepdim=True)], 1))

    record()
    for t in range(idx.shape[0]):
        i = idx[t]  # [S, B]
        p = torch.sigmoid(torch.gather(u, 1, i) + shared)  # [S, B]
        r = (noise[t] < p.unsqueeze(-1)).to(u.dtype)  # [S, B, G]: exact Bernoulli(p) groups
        p_hat = r.mean(-1, keepdim=True)
        adv = r - p_hat
        if cfg.std_normalise:
            adv = adv / (r.std(-1, keepdim=True) + 1e-6)
        if arm == "grpo-lam":
            adv = adv * cfg.lam
        if anchors is not None:
            c = torch.tensor([a.observe(float(y)) for a, y in zip(anchors, r.mean((1, 2)), strict=True)])
            adv = adv * hadw_weights(adv, p_hat.expand_as(r), c.to(u.dtype).view(S, 1, 1), cfg.lam)
        grad = (adv * (r - p.unsqueeze(-1))).mean(-1)  # [S, B]: d/d logit of the mean over G of Â·log π
        u.scatter_add_(1, i, cfg.lr * grad)
        shared += cfg.shared_lr * grad.mean(1, keepdim=True)
        record()
    return torch.stack(curves)


def simulate(cfg: SimConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """{arm: [steps+1, seeds, len(BUCKETS)] expected accuracy per bucket, last column the whole population}."""
    gen = torch.Generator().manual_seed(seed)
    u0 = _initial_logits(cfg, gen)
    idx = torch.stack([torch.randint(0, cfg.prompts, (cfg.seeds, cfg.batch), generator=gen) for _ in range(cfg.steps)])
    noise = torch.rand(cfg.steps, cfg.seeds, cfg.batch, cfg.group_size, generator=gen, dtype=torch.float64)
    return {arm: _run_arm(cfg, arm, u0, idx, noise) for arm in cfg.arms}


def group_baseline_bias(p: float, G: int, n: int = 200_000, seed: int = 0) -> float:
    """Simulated E[p̂ | S] − p (S: the group is neither all-correct nor all-wrong); equals theory's bias(p, G)."""
    gen = torch.Generator().manual_seed(seed)
    r = (torch.rand(n, G, generator=gen, dtype=torch.float64) < p).to(torch.float64)
    p_hat = r.mean(1)
    kept = (p_hat > 0) & (p_hat < 1)
    return float(p_hat[kept].mean()) - p
