"""The live bias probe (paper Figure 1(b), Appendix E.1) on your own model's rollouts.

For every prompt, sample `groups` independent groups of G responses (what GRPO sees) and N more
responses (N ≫ G). The N-sample success rate p_ref stands in for the prompt's true p. In each
non-degenerate group (1 ≤ R ≤ G−1; the only ones that produce a gradient):

    estimated advantage   Â = r − p̂           reference   A = r − p_ref
    (std-normalised, as GRPO and Figure 1(b): divided by the population std √(p̂(1−p̂)), resp. √(p_ref(1−p_ref)))

A − Â = p̂ − p_ref for every response of the group: > 0 means the group UNDER-estimates the advantage
(of correct and wrong responses alike), < 0 over-estimates it. The theory (spec §2, Lemma 2) predicts
E[p̂ − p | S] = bias(p, G), positive for p < 1/2 and negative above; the probe puts its prediction, at
p_ref and weighted by P(S | p_ref) like the measurement, beside the measured mean.

Shapes: group correctness [P, M, G] (P prompts, M groups each), reference correctness [P, N].
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from hadw.data import Problem
from hadw.rewards.combine import RewardRecipe
from hadw.theory import bias as theory_bias
from hadw.theory import p_nondegenerate, prob_misestimate

# (problems, n, seed) -> [len(problems), n] array of 0/1 correctness of n sampled responses per problem
Sampler = Callable[[Sequence[Problem], int, int], np.ndarray]

DEFAULT_EDGES = (0.0, 0.125, 0.25, 0.5, 0.75, 0.875, 1.0)


def model_sampler(
    model,
    tokenizer,
    template: str,
    reward: str | RewardRecipe,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 16,
    max_rows: int = 4096,
    use_chat_template: bool | str = "auto",
    progress=None,
    engine=None,
) -> Sampler:
    """A Sampler backed by a causal LM: `evaluate` with k = n at `temperature`, ≤ max_rows responses per batch
    (the engine splits a batch further so each chunk fits its memory budget)."""
    from hadw.eval.evaluate import evaluate
    from hadw.rollout import HFRolloutEngine

    engine = engine or HFRolloutEngine(model, tokenizer)

    def sample(problems: Sequence[Problem], n: int, seed: int) -> np.ndarray:
        report = evaluate(
            model,
            tokenizer,
            problems,
            template,
            reward,
            k=n,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            batch_size=max(1, max_rows // n),
            seed=seed,
            engine=engine,
            use_chat_template=use_chat_template,
            progress=progress,
        )
        sample.reward_errors += report.reward_errors  # type: ignore[attr-defined]
        if report.reward_failure is not None:  # every completion failed: the probe has nothing to measure
            sample.reward_failure = report.reward_failure  # type: ignore[attr-defined]
        return np.asarray(report.correct, dtype=float).reshape(len(problems), n)

    sample.reward_errors = 0  # type: ignore[attr-defined]  # completions the reward failed on (scored 0)
    sample.reward_failure = None  # type: ignore[attr-defined]  # set when it failed on every completion of a batch
    return sample


def bernoulli_sampler(p: Sequence[float]) -> Sampler:
    """A simulated "model" that solves problem i with known probability p[i] (problems matched by position)."""
    p_arr = np.asarray(p, dtype=float)

    def sample(problems: Sequence[Problem], n: int, seed: int) -> np.ndarray:
        if len(problems) != len(p_arr):
            raise ValueError(f"bernoulli_sampler: {len(problems)} problems but {len(p_arr)} success rates")
        rng = np.random.default_rng(seed)
        return (rng.random((len(problems), n)) < p_arr[:, None]).astype(float)

    return sample


def sample_probe(
    sampler: Sampler, problems: Sequence[Problem], G: int, N: int, groups: int = 1, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """One call for groups·G + N responses per prompt, split into groups [P, M, G] and reference [P, N]."""
    if G < 2 or N < 1 or groups < 1:
        raise ValueError(f"probe needs G >= 2, N >= 1 and groups >= 1; got G={G}, N={N}, groups={groups}")
    correct = np.asarray(sampler(problems, groups * G + N, seed), dtype=float)
    if correct.shape != (len(problems), groups * G + N):
        raise ValueError(f"sampler returned shape {correct.shape}, expected {(len(problems), groups * G + N)}")
    return correct[:, : groups * G].reshape(len(problems), groups, G), correct[:, groups * G :]


@dataclass
class ProbeReport:
    G: int
    N: int
    groups: int
    buckets: dict[str, dict[str, float]]  # bucket -> metric (see `bucket_metrics`)
    p_ref: np.ndarray  # [P] N-sample success rate per prompt
    p_hat: np.ndarray  # [P, M] group success rate
    edges: list[float] = field(default_factory=lambda: list(DEFAULT_EDGES))

    def to_dict(self) -> dict:
        return {"G": self.G, "N": self.N, "groups": self.groups, "edges": self.edges, "buckets": self.buckets}


def _zscore(r: float, p: np.ndarray) -> np.ndarray:
    """(r − p) / √(p(1−p)), nan where p ∈ {0, 1} (no spread)."""
    std = np.sqrt(p * (1 - p))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(std > 0, (r - p) / np.where(std > 0, std, 1.0), np.nan)


def _weighted_mean(x: np.ndarray, w: np.ndarray) -> float:
    keep = (w > 0) & np.isfinite(x)
    return float((x[keep] * w[keep]).sum() / w[keep].sum()) if keep.any() else float("nan")


def bucket_metrics(p_hat: np.ndarray, p_ref: np.ndarray, G: int) -> dict[str, float]:
    """Measured vs predicted bias for one bucket. p_hat: [P, M] group success rates; p_ref: [P]."""
    P, M = p_hat.shape
    ref = np.broadcast_to(p_ref[:, None], p_hat.shape)
    live = (p_hat > 0) & (p_hat < 1)  # non-degenerate groups: the only ones with a gradient
    R = p_hat * G
    gap = (p_hat - ref)[live]  # A − Â per group
    n_live = int(live.sum())
    w_S = p_nondegenerate(p_ref, G)  # theory: how often each prompt's group is non-degenerate
    out = {
        "prompts": float(P),
        "groups": float(P * M),
        "nondegenerate": float(n_live),
        "degenerate_frac": 1.0 - n_live / (P * M),
        "p_ref_mean": float(p_ref.mean()),
        "p_hat_mean_S": float(p_hat[live].mean()) if n_live else float("nan"),
        "bias_measured": float(gap.mean()) if n_live else float("nan"),
        "bias_se": float(gap.std(ddof=1) / np.sqrt(n_live)) if n_live > 1 else float("nan"),
        "bias_theory": _weighted_mean(theory_bias(p_ref, G), w_S),
        "under_frac": float((gap > 0).mean()) if n_live else float("nan"),
        "over_frac": float((gap < 0).mean()) if n_live else float("nan"),
        "under_theory": _weighted_mean(prob_misestimate(p_ref, G, 0.0, "under"), w_S),
        "over_theory": _weighted_mean(prob_misestimate(p_ref, G, 0.0, "over"), w_S),
    }
    # Per-response means over non-degenerate groups: a group holds R correct and G − R wrong responses.
    w_c, w_w = np.where(live, R, 0.0), np.where(live, G - R, 0.0)
    for kind, weights, r in (("correct", w_c, 1.0), ("wrong", w_w, 0.0)):
        out[f"adv_{kind}_est"] = _weighted_mean(r - p_hat, weights)
        out[f"adv_{kind}_ref"] = _weighted_mean(r - ref, weights)
        out[f"z_{kind}_est"] = _weighted_mean(_zscore(r, p_hat), weights)
        out[f"z_{kind}_ref"] = _weighted_mean(_zscore(r, ref), weights)
    return out


def p_bucket_labels(edges: Sequence[float]) -> list[str]:
    last = len(edges) - 2
    return [f"p∈[{a:g},{b:g}{']' if i == last else ')'}" for i, (a, b) in enumerate(itertools.pairwise(edges))]


def probe_stats(
    group_correct: np.ndarray,
    reference: np.ndarray,
    problems: Sequence[Problem] | None = None,
    edges: Sequence[float] = DEFAULT_EDGES,
) -> ProbeReport:
    """Bucket the prompts by p_ref (edges, last bin closed) and by data level, and measure each bucket.

    group_correct: [P, M, G] 0/1; reference: [P, N] 0/1; problems: for the "source/Lx" buckets.
    """
    if group_correct.ndim != 3 or reference.ndim != 2 or group_correct.shape[0] != reference.shape[0]:
        raise ValueError(f"need group [P, M, G] and reference [P, N]; got {group_correct.shape}, {reference.shape}")
    edges = [float(e) for e in edges]
    if len(edges) < 2 or any(b <= a for a, b in itertools.pairwise(edges)) or edges[0] < 0 or edges[-1] > 1:
        raise ValueError(f"--edges must increase within [0, 1]; got {edges}")
    P, M, G = group_correct.shape
    p_hat = group_correct.mean(axis=2)
    p_ref = reference.mean(axis=1)
    members: dict[str, np.ndarray] = {"all": np.ones(P, dtype=bool)}
    bin_index = np.clip(np.searchsorted(edges, p_ref, side="right") - 1, 0, len(edges) - 2)
    inside = (p_ref >= edges[0]) & (p_ref <= edges[-1])
    for i, label in enumerate(p_bucket_labels(edges)):
        members[label] = inside & (bin_index == i)
    if problems is not None:
        keys = [f"{q.source}/L{q.level}" if q.level is not None else None for q in problems]
        for key in sorted({k for k in keys if k is not None}):
            members[key] = np.array([k == key for k in keys])
    buckets = {name: bucket_metrics(p_hat[mask], p_ref[mask], G) for name, mask in members.items() if mask.any()}
    return ProbeReport(G, reference.shape[1], M, buckets, p_ref, p_hat, edges)


def run_probe(
    sampler: Sampler,
    problems: Sequence[Problem],
    G: int = 8,
    N: int = 128,
    groups: int = 1,
    seed: int = 0,
    edges: Sequence[float] = DEFAULT_EDGES,
) -> ProbeReport:
    group_correct, reference = sample_probe(sampler, problems, G, N, groups, seed)
    return probe_stats(group_correct, reference, problems, edges)
