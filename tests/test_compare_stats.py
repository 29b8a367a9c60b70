"""`hadw compare`'s statistics beyond the paired t interval, on planted data whose answer is known: the variance
split (evaluation sampling vs training) and what more problems or seeds would buy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from hadw import metrics as M
from hadw.cli import build_app
from hadw.experiments import compare as cmp
from hadw.experiments.stats import eval_sampling_variance, projected_half_width, variance_split


# ------------------------------------------------------------------------------------------- variance split
def simulate_independent(rng, seeds: int, problems: int, train_sd: float, effect: float = 0.01):
    """Every seed draws its own problems (p_i ~ U(0.2, 0.8)); training shifts the arm's chance by t_s ~ N(effect,
    train_sd²); each arm's greedy score on a problem is its own Bernoulli. Returns [seeds, problems] scores of
    (arm, baseline). Known: E[d_s | t_s] = t_s, Var(a_i − b_i | t) = 0.44 − t², so the evaluation variance of one
    seed's difference is (0.44 − effect² − train_sd²) / problems and the training variance train_sd²."""
    p = rng.uniform(0.2, 0.8, (seeds, problems))
    t = rng.normal(effect, train_sd, (seeds, 1))
    return (rng.random((seeds, problems)) < p + t).astype(float), (rng.random((seeds, problems)) < p).astype(float)


def split_of(arm: np.ndarray, base: np.ndarray, paired: bool = True):
    evs = [eval_sampling_variance(a, b, paired) for a, b in zip(arm, base, strict=True)]
    return variance_split(arm.mean(axis=1) - base.mean(axis=1), evs, arm.shape[1], paired)


def test_variance_split_recovers_planted_training_and_evaluation_variance():
    rng = np.random.default_rng(0)
    train_sd, m = 0.03, 300
    true_eval = (0.44 - 0.01**2 - train_sd**2) / m  # 0.0014633: SD 0.0383
    split = split_of(*simulate_independent(rng, 2000, m, train_sd))
    # 2000 seeds: the total variance's standard error is ~7.5e-5, the evaluation part's far smaller
    assert split.eval == pytest.approx(true_eval, rel=0.02)
    assert split.train == pytest.approx(train_sd**2, abs=2.5e-4)
    assert np.sqrt(split.train) == pytest.approx(train_sd, abs=0.004)
    assert split.eval_share == pytest.approx(true_eval / (true_eval + train_sd**2), abs=0.05)  # ~0.62
    unpaired = split_of(*simulate_independent(np.random.default_rng(0), 2000, m, train_sd), paired=False)
    # unpaired, the problems' own difficulty (Var p = 0.03, shared by both arms) is counted twice: (0.5 − t²) / m
    assert unpaired.eval == pytest.approx((0.5 - 0.01**2 - train_sd**2) / m, rel=0.02)

    # What the projection promises, against what twice the problems and twice the seeds really give
    doubled = simulate_independent(rng, 2000, 2 * m, train_sd)
    d2 = doubled[0].mean(axis=1) - doubled[1].mean(axis=1)
    n = 20  # a real sweep's size: the projections for 20 seeds, from the variances measured above
    real_2x_problems = stats.t.ppf(0.975, n - 1) * d2.std(ddof=1) / np.sqrt(n)
    assert projected_half_width(split.train, split.eval, n, problems_factor=2) == pytest.approx(real_2x_problems,
                                                                                               rel=0.05)  # fmt: skip
    real_2x_seeds = stats.t.ppf(0.975, 2 * n - 1) * np.sqrt(split.total / (2 * n))
    assert projected_half_width(split.train, split.eval, n, seeds_factor=2) == pytest.approx(real_2x_seeds, rel=0.05)
    # here the evaluation dominates: doubling the problems pays less than doubling the seeds (which halves both)
    assert split.half_width_2x_seeds < split.half_width_2x_problems < split.half_width


def test_pairing_by_problem_keeps_what_both_arms_share_out_of_the_evaluation_part():
    """Both arms score the same problems and mostly agree (greedy answers of two similar models): the arm flips
    the baseline's 0/1 with probability q ± t_s (t_s ~ N(0, 0.02²) the training difference). Var(a_i − b_i) =
    q − t², so the evaluation variance is (q − 0.02²) / m; the unpaired estimate (0.25 + 0.25) / m, five times it,
    would call the whole paired variance evaluation and the training part 0."""
    rng = np.random.default_rng(1)
    seeds, m, q, train_sd = 2000, 300, 0.1, 0.02
    base = (rng.random((seeds, m)) < 0.5).astype(float)
    t = rng.normal(0.0, train_sd, (seeds, 1))
    flip = rng.random((seeds, m)) < np.where(base == 0, q + t, q - t)
    arm = np.where(flip, 1 - base, base)
    split = split_of(arm, base)
    assert split.eval == pytest.approx((q - train_sd**2) / m, rel=0.03)
    assert split.train == pytest.approx(train_sd**2, abs=1e-4)  # SE of the total ~3.3e-5
    unpaired = split_of(arm, base, paired=False)
    assert unpaired.eval > 4 * split.eval and unpaired.train == 0.0 and unpaired.eval_share == 1.0


def test_variance_split_errors():
    with pytest.raises(ValueError, match="at least 2"):
        variance_split([0.1], [0.01], 10)
    with pytest.raises(ValueError, match="equal counts"):
        eval_sampling_variance([1, 0], [1, 0, 1])
    assert np.isnan(eval_sampling_variance([1.0], [0.0]))
    assert np.isnan(projected_half_width(0.1, 0.1, 1))


# ------------------------------------------------------------------------------------------- through hadw compare
SCORES = {  # seed -> (baseline, arm) greedy scores on the seed's 4 held-out problems
    0: ([1, 0, 1, 0], [1, 1, 1, 0]),
    1: ([1, 1, 0, 0], [1, 1, 0, 0]),
    2: ([0, 0, 0, 0], [1, 1, 1, 1]),
}


def problem_run(out: Path, arm: str, seed: int, scores: list[int], uids: list[str] | None = None) -> Path:
    run_dir = out / arm / f"seed{seed}"
    (run_dir / "final_model").mkdir(parents=True)
    uids = uids or [f"addition:L1:{seed}:{i}" for i in range(len(scores))]
    rows = [{"index": i, "uid": u, "source": "addition", "level": 1, "scores": [s]}
            for i, (u, s) in enumerate(zip(uids, scores, strict=True))]  # fmt: skip
    (run_dir / M.FINAL_EVAL_PROBLEMS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    acc = sum(scores) / len(scores)
    final = {"all": {"count": 4.0, "greedy": acc}, "addition/L1": {"count": 4.0, "greedy": acc}}
    (run_dir / M.FINAL_EVAL_FILE).write_text(json.dumps(final))
    (run_dir / M.METRICS_FILE).write_text(json.dumps({"step": 1, M.SCORE_MEAN: 0.5}) + "\n")
    return run_dir


@pytest.fixture
def problem_out(tmp_path):
    for seed, (base, arm) in SCORES.items():
        problem_run(tmp_path, "grpo", seed, base)
        problem_run(tmp_path, "hadw", seed, arm)
    return tmp_path


def test_the_split_of_a_sweep_by_hand(problem_out):
    # differences 0.25, 0, 1: variance 0.270833; per seed var(a_i − b_i) / 4 = 0.0625, 0, 0 -> eval 0.0208333
    result = cmp.aggregate(cmp.collect_runs(problem_out, ["grpo", "hadw"], [0, 1, 2]))
    split = result.metrics["val/all/greedy"].splits["hadw"]
    assert (split.n, split.problems, split.paired_by_problem) == (3, 4.0, True)
    assert (split.total, split.eval, split.train) == pytest.approx((0.2708333, 0.0208333, 0.25), abs=1e-7)
    assert split.half_width == pytest.approx(result.metrics["val/all/greedy"].diffs["hadw"].diff.half_width)
    # 4.302653 √(0.2604167 / 3) and 2.570582 √(0.2708333 / 6)
    assert (split.half_width_2x_problems, split.half_width_2x_seeds) == pytest.approx((1.267678, 0.546144), abs=1e-5)

    # one seed's arm scored other problems: that seed is split unpaired, var(a)/4 + var(b)/4
    for name in ("grpo", "hadw"):
        for f in (problem_out / name / "seed0").iterdir():
            f.unlink() if f.is_file() else f.rmdir()
        (problem_out / name / "seed0").rmdir()
    problem_run(problem_out, "grpo", 0, SCORES[0][0], uids=["x0", "x1", "x2", "x3"])
    problem_run(problem_out, "hadw", 0, SCORES[0][1])
    split = cmp.aggregate(cmp.collect_runs(problem_out, ["grpo", "hadw"], [0, 1, 2])).metrics["val/all/greedy"]
    split = split.splits["hadw"]
    # seed 0 unpaired: var([1,1,1,0]) / 4 + var([1,0,1,0]) / 4 = 0.0625 + 0.0833333
    assert not split.paired_by_problem and split.eval == pytest.approx((0.0625 + 0.0833333) / 3, abs=1e-7)


def test_avg_at_k_is_split_from_the_sampled_scores(problem_out):
    """data.eval_samples=2: each problem's two sampled scores give avg@2 its split; a run without them says so."""
    sampled = {0: ([[1, 1], [1, 0], [0, 0], [1, 1]], [[1, 1], [1, 1], [0, 1], [1, 1]]),
               1: ([[0, 0], [1, 1], [1, 0], [0, 1]], [[0, 1], [1, 1], [1, 0], [0, 1]]),
               2: ([[0, 0], [0, 0], [1, 0], [0, 0]], [[1, 1], [1, 0], [1, 1], [1, 1]])}  # fmt: skip
    for seed, pair in sampled.items():
        for arm, scores in zip(("grpo", "hadw"), pair, strict=True):
            run_dir = problem_out / arm / f"seed{seed}"
            rows = [json.loads(line) for line in (run_dir / M.FINAL_EVAL_PROBLEMS_FILE).read_text().splitlines()]
            for row, two in zip(rows, scores, strict=True):
                row["sampled"] = two
            (run_dir / M.FINAL_EVAL_PROBLEMS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
            final = json.loads((run_dir / M.FINAL_EVAL_FILE).read_text())
            final["all"]["avg@2"] = sum(map(sum, scores)) / 8
            (run_dir / M.FINAL_EVAL_FILE).write_text(json.dumps(final))
    result = cmp.aggregate(cmp.collect_runs(problem_out, ["grpo", "hadw"], [0, 1, 2]), metric_names=("avg@2",))
    split = result.metrics["val/all/avg@2"].splits["hadw"]
    # per-problem means a_i − b_i: seed 0 (0, .5, .5, 0), seed 1 (.5, 0, 0, 0), seed 2 (1, .5, .5, 1); var / 4 each
    evals = [
        np.var([0, 0.5, 0.5, 0], ddof=1) / 4,
        np.var([0.5, 0, 0, 0], ddof=1) / 4,
        np.var([1, 0.5, 0.5, 1], ddof=1) / 4,
    ]
    assert split.eval == pytest.approx(np.mean(evals), abs=1e-12)
    assert split.total == pytest.approx(np.var([0.25, 0.125, 0.75], ddof=1), abs=1e-12)

    run_dir = problem_out / "grpo" / "seed1"  # a run evaluated without data.eval_samples
    rows = [json.loads(line) for line in (run_dir / M.FINAL_EVAL_PROBLEMS_FILE).read_text().splitlines()]
    kept = [{k: v for k, v in r.items() if k != "sampled"} for r in rows]
    (run_dir / M.FINAL_EVAL_PROBLEMS_FILE).write_text("".join(json.dumps(r) + "\n" for r in kept))
    result = cmp.aggregate(cmp.collect_runs(problem_out, ["grpo", "hadw"], [0, 1, 2]), metric_names=("avg@2",))
    assert result.metrics["val/all/avg@2"].splits["hadw"] == (
        "grpo seed 1: its per-problem results have no sampled scores (data.eval_samples=0)"
    )


def test_compare_prints_the_split_and_names_runs_without_per_problem_results(problem_out):
    result = CliRunner().invoke(build_app(), ["compare", "--out", str(problem_out), "--collect-only", "--smooth", "1"])
    assert result.exit_code == 0, result.output
    md = (problem_out / "compare.md").read_text()
    assert "## Where the variance is: val/all/greedy" in md
    assert "| hadw − grpo | 3 | 4 | 0.5204 | 0.1443 | 0.5000 | 8% | 1.2928 | 1.2677 | 0.5461 |" in md
    assert "variance of the paired difference" in result.output
    data = json.loads((problem_out / "compare.json").read_text())
    assert data["metrics"]["val/all/greedy"]["variance_split"]["hadw"]["train"] == pytest.approx(0.25)

    (problem_out / "grpo" / "seed1" / M.FINAL_EVAL_PROBLEMS_FILE).unlink()  # a run made before the file existed
    again = CliRunner().invoke(build_app(), ["compare", "--out", str(problem_out), "--collect-only", "--smooth", "1",
                                             "--overwrite"])  # fmt: skip
    assert again.exit_code == 0, again.output
    assert "no split: grpo seed 1 has no final_eval_problems.jsonl" in (problem_out / "compare.md").read_text()


# ------------------------------------------------------------------------------------------- path-free config hash
def recipe_yaml(root: Path, out: Path, sets: tuple[str, ...] = (), model: str = "tiny-start") -> tuple[str, Path]:
    """config.yaml of arm 'hadw' seed 0 of a sweep in `out`, whose model and data file lie under `root`."""
    from hadw.train.config import config_to_yaml, load_config

    (root / "models" / model).mkdir(parents=True, exist_ok=True)
    (root / "data.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    base = [f"model.path={root / 'models' / model}", f"data.source=file:{root / 'data.jsonl'}", *sets]
    (spec,) = cmp.plan_runs(None, [cmp.Arm("hadw", ("hadw.enabled=true",))], [0], out, base)
    return config_to_yaml(load_config(None, list(spec.overrides))), spec.run_dir


def test_one_recipe_in_two_folders_hashes_alike_and_a_setting_change_does_not(tmp_path):
    import hashlib

    here, _ = recipe_yaml(tmp_path / "machine_a", tmp_path / "machine_a" / "cmp")
    there, _ = recipe_yaml(tmp_path / "elsewhere" / "b", tmp_path / "scratch" / "sweep")
    assert str(tmp_path / "machine_a") in here  # the absolute paths are in config.yaml, so its bytes differ:
    assert hashlib.sha256(here.encode()).digest() != hashlib.sha256(there.encode()).digest()  # the old hash
    assert cmp.config_hash(here, tmp_path / "machine_a" / "cmp") == cmp.config_hash(
        there, tmp_path / "scratch" / "sweep"
    )
    # a real change of the recipe still changes it: a setting, the seed, another model (by its folder's name)
    changed = [
        recipe_yaml(tmp_path / "machine_a", tmp_path / "machine_a" / "cmp", ("hadw.lam=2.0",))[0],
        recipe_yaml(tmp_path / "machine_a", tmp_path / "machine_a" / "cmp", model="other-start")[0],
        here.replace("seed: 0", "seed: 1"),
    ]
    hashes = {cmp.config_hash(text, tmp_path / "machine_a" / "cmp") for text in [here, *changed]}
    assert len(hashes) == 4
    # speed only: another --cpus-per-run is the same recipe (as compare's reuse check treats it)
    assert cmp.config_hash(here.replace("num_threads: 1", "num_threads: 4")) == cmp.config_hash(here)


def test_path_free_forms():
    assert cmp.path_free("/models/SmolLM2-135M") == "SmolLM2-135M"
    assert cmp.path_free("file:/data/x.jsonl") == "file:x.jsonl"
    assert cmp.path_free("/sweep/warm/final_model", "/sweep") == "warm/final_model"  # inside the sweep folder
    for kept in ("", "task:addition", "benchmark:math500", "hf:openai/gsm8k:main", "Qwen/Qwen2.5-0.5B-Instruct"):
        assert cmp.path_free(kept) == kept
    with pytest.raises(ValueError, match="mapping"):
        cmp.config_hash("- a list\n")


def test_an_existing_sweep_is_still_reused_and_its_runs_get_the_path_free_hash(tmp_path):
    """A sweep made before the hash existed (its run folders hold config.yaml, nothing hashed): a re-run reuses its
    finished run (the reuse check compares config.yaml itself, as before), and the report hashes each run's stored
    config.yaml afresh, path-free: nothing stored needs migrating."""
    out = tmp_path / "old_sweep"
    text, run_dir = recipe_yaml(tmp_path, out)
    problem_run(out, "hadw", 0, [1, 0, 1, 1])
    (run_dir / "config.yaml").write_text(text)
    (spec,) = cmp.plan_runs(None, [cmp.Arm("hadw", ("hadw.enabled=true",))], [0], out,
                            [f"model.path={tmp_path / 'models' / 'tiny-start'}",
                             f"data.source=file:{tmp_path / 'data.jsonl'}"])  # fmt: skip
    assert cmp.execute_run(spec)["status"] == "reused"
    result = cmp.aggregate(cmp.collect_runs(out, ["hadw"], [0]))
    elsewhere, _ = recipe_yaml(tmp_path / "b", tmp_path / "b" / "sweep")
    assert result.config_hashes == {"hadw": {0: cmp.config_hash(elsewhere, tmp_path / "b" / "sweep")}}
    assert result.to_dict()["config_hashes"]["hadw"]["0"] == result.config_hashes["hadw"][0]


# ------------------------------------------------------------------------------------------- --robust wilcoxon
def test_wilcoxon_signed_rank_by_hand_beside_the_t_interval():
    from hadw.experiments.stats import paired_difference, wilcoxon_p

    # |d| ranks 5, 1, 2, 3, 4; W− = 2 (the one negative); exact two-sided P(min W ≤ 2) = 2 · 3/32 = 0.1875
    assert wilcoxon_p([0.05, 0.01, -0.02, 0.03, 0.04]) == pytest.approx(0.1875)
    assert np.isnan(wilcoxon_p([0.0, 0.0, 0.3]))  # one non-zero difference: no test
    base = {s: 0.5 for s in range(8)}
    arm = {s: 0.5 - 0.01 * (s + 1) for s in range(7)} | {7: 0.9}  # seven small harms, one far-out gain
    plain = paired_difference(arm, base)
    robust = paired_difference(arm, base, robust="wilcoxon")
    assert robust.diff == plain.diff and robust.p_value == plain.p_value  # beside the t interval, never instead
    assert plain.wilcoxon_p is None and "wilcoxon_p" not in plain.to_dict()
    # the t test sees no harm (the outlier widens it); the ranks see seven of eight below 0: W+ = 8 of 36
    assert plain.p_value > 0.5 and robust.wilcoxon_p == pytest.approx(2 * 25 / 256)  # P(W ≤ 8) = 25/256, exact
    with pytest.raises(ValueError, match="allowed: none, wilcoxon"):
        paired_difference(arm, base, robust="sign")


def test_compare_robust_flag(problem_out):
    args = ["compare", "--out", str(problem_out), "--collect-only", "--smooth", "1"]
    result = CliRunner().invoke(build_app(), [*args, "--robust", "wilcoxon"])
    assert result.exit_code == 0, result.output
    md = (problem_out / "compare.md").read_text()
    # differences 0.25, 0, 1: the zero dropped, W− = 0 of n = 2, exact two-sided p = 0.5; t p beside it
    assert "| p (hadw) | Wilcoxon p (hadw) |" in md and "| +0.417 [-0.876, +1.709] | 0.300 | 0.500 |" in md
    data = json.loads((problem_out / "compare.json").read_text())
    assert data["robust"] == "wilcoxon" and data["metrics"]["val/all/greedy"]["diffs"]["hadw"]["wilcoxon_p"] == 0.5
    bad = CliRunner().invoke(build_app(), [*args, "--robust", "sign"])
    assert bad.exit_code == 2 and "'--robust'" in bad.output and "allowed: none, wilcoxon" in bad.output
    assert "Traceback" not in bad.output


# ------------------------------------------------------------------------------------------- --sequential
def test_the_confidence_sequence_is_where_the_mixture_martingale_crosses_one_over_alpha():
    from hadw.experiments.stats import cs_half_width

    d = np.random.default_rng(3).normal(0.02, 0.015, 12)
    n, mean, ss = d.size, d.mean(), ((d - d.mean()) ** 2).sum()
    half = float(cs_half_width(n, ss))
    for mu in (mean - half, mean + half):  # M_n(μ) = (1 + n)^(-1/2) (A / (A − S² / (1 + n)))^(n/2) with τ = 1
        s, a = (d - mu).sum(), ((d - mu) ** 2).sum()
        assert (1 + n) ** -0.5 * (a / (a - s**2 / (1 + n))) ** (n / 2) == pytest.approx(1 / 0.05, rel=1e-9)
    assert np.isinf(cs_half_width(4, 1.0)) and np.isfinite(cs_half_width(5, 1.0))  # too few pairs: no bound
    # wider than the fixed-n t interval, the price of looking at every round
    assert half > stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / np.sqrt(n)


def coverage(n_seq: int, seeds: int, looks: np.ndarray, effect: float, sd: float, seed: int) -> tuple[float, float]:
    """Share of n_seq simulated studies (i.i.d. normal paired differences, mean `effect`) whose interval covers the
    effect at every look (looks: 1-based seed counts): (the confidence sequence's, the fixed-n t interval's)."""
    from hadw.experiments.stats import confidence_sequence

    d = np.random.default_rng(seed).normal(effect, sd, (n_seq, seeds))
    cs_ok = np.ones(n_seq, bool)
    for i, row in enumerate(d):
        low, high = confidence_sequence(row)
        cs_ok[i] = np.all((low[looks - 1] <= effect) & (effect <= high[looks - 1]))
    n = np.arange(1, seeds + 1)
    mean = np.cumsum(d, axis=1) / n
    sem = np.sqrt(np.maximum(np.cumsum(d**2, axis=1) - n * mean**2, 0) / np.maximum(n - 1, 1) / n)
    half = stats.t.ppf(0.975, np.maximum(n - 1, 1)) * sem
    t_ok = np.all(np.abs(mean - effect)[:, looks - 1] <= half[:, looks - 1], axis=1)
    return float(cs_ok.mean()), float(t_ok.mean())


def test_the_confidence_sequence_covers_a_known_effect_under_peeking_and_the_t_interval_does_not():
    mc = 3 * np.sqrt(0.95 * 0.05 / 2000)  # 3 Monte Carlo standard errors at the nominal rate: 0.0146
    # --sequential's grain: a first round of 5 seeds, rounds of 5, looked at after each, up to 40
    cs_rounds, t_rounds = coverage(2000, 40, np.arange(5, 41, 5), effect=0.004, sd=0.013, seed=0)
    assert cs_rounds >= 0.95 - mc
    assert t_rounds < 0.90 and t_rounds < cs_rounds - 0.05  # the naive interval, looked at 8 times
    # looking after every seed from the second: the sequence still covers; the t interval much less
    cs_every, t_every = coverage(2000, 40, np.arange(2, 41), effect=-0.01, sd=0.02, seed=1)
    assert cs_every >= 0.95 - mc and t_every < 0.80
    print(f"coverage: CS {cs_rounds:.4f} / t {t_rounds:.4f} (8 looks); CS {cs_every:.4f} / t {t_every:.4f} (39 looks)")


def test_sequential_decisions():
    from hadw.experiments.stats import sequential_verdict

    rng = np.random.default_rng(5)
    harm = rng.normal(-0.05, 0.02, 10)
    v = sequential_verdict(harm)
    assert v.decision == "effect" and v.high < 0 and v.n == 10 and v.t_low > v.low  # the sequence is the wider
    small = rng.normal(0.0, 0.005, 20) - 0.001
    assert sequential_verdict(small, margin=0.01).decision == "equivalent"
    assert sequential_verdict(small).decision == "continue"  # no margin: only an effect or the cap stops it
    assert sequential_verdict(small, max_n=20).decision == "cap"
    assert sequential_verdict(small[:4], margin=1.0).decision == "continue"  # 4 pairs: the sequence is infinite


def planted_execute(effect: float, sd: float, log: list):
    """A stand-in for the runs (cli._execute): each arm/seed folder gets a final evaluation, the arm's value
    baseline + effect + N(0, sd²) drawn from the seed; a folder already finished is reused, as a real re-run does."""

    def execute(specs, launcher, options, out, workers):
        statuses = []
        for spec in specs:
            if cmp.is_finished(spec.run_dir):
                statuses.append({"arm": spec.arm, "seed": spec.seed, "status": "reused", "error": None})
                continue
            noise = np.random.default_rng(spec.seed).normal(0.0, sd)
            value = 0.5 + (effect + noise if spec.arm == "hadw" else 0.0)
            (spec.run_dir / "final_model").mkdir(parents=True)
            final = {"all": {"count": 300.0, "greedy": value}}
            (spec.run_dir / M.FINAL_EVAL_FILE).write_text(json.dumps(final))
            (spec.run_dir / M.METRICS_FILE).write_text(json.dumps({"step": 1, M.SCORE_MEAN: value}) + "\n")
            log.append((spec.arm, spec.seed))
            statuses.append({"arm": spec.arm, "seed": spec.seed, "status": "trained", "error": None})
        return statuses

    return execute


def test_compare_sequential_adds_rounds_until_the_sequence_decides_and_resumes(tmp_path, monkeypatch):
    from hadw.experiments import cli as compare_cli
    from hadw.experiments.stats import confidence_sequence

    trained: list = []
    monkeypatch.setattr(compare_cli, "_execute", planted_execute(0.05, 0.02, trained))
    out = tmp_path / "seq"
    args = ["compare", "--out", str(out), "--arm", "grpo:", "--arm", "hadw:hadw.enabled=true", "--seeds", "0-4",
            "--sequential", "--smooth", "1"]  # fmt: skip
    capped = CliRunner().invoke(build_app(), [*args, "--max-seeds", "5"])  # stopped by the cap after round 1
    assert capped.exit_code == 0, capped.output
    assert "round 1: 5 seeds" in capped.output and ": cap" in capped.output and len(trained) == 10
    result = CliRunner().invoke(build_app(), [*args, "--max-seeds", "30"])  # the same study, a larger cap: goes on
    assert result.exit_code == 0, result.output
    # round 1 is reused (no run twice), round 2 (seeds 5-9) trained; its sequence excludes 0: the study stops
    assert len(trained) == 20 and sorted({s for _, s in trained}) == list(range(10))
    assert "round 2: 10 seeds" in result.output and "round 3" not in result.output
    d = [0.05 + np.random.default_rng(s).normal(0.0, 0.02) for s in range(10)]
    low, high = confidence_sequence(d)
    assert low[-1] > 0  # the planted effect, found at 10 seeds
    data = json.loads((out / "compare.json").read_text())
    verdict = data["sequential"]["verdicts"]["hadw"]
    assert verdict["decision"] == "effect" and verdict["n"] == 10
    assert (verdict["low"], verdict["high"]) == pytest.approx((low[-1], high[-1]), abs=1e-12)
    assert json.loads((out / cmp.MANIFEST).read_text())["seeds"] == list(range(10))  # --collect-only finds them
    assert "## Sequential: val/all/greedy" in (out / "compare.md").read_text()
    again = CliRunner().invoke(build_app(), [*args, "--max-seeds", "30"])  # replayed: nothing trained
    assert again.exit_code == 0 and len(trained) == 20 and "0 trained" in again.output, again.output


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--max-seeds", "10"], "--max-seeds is for --sequential"),
        (["--equivalence-margin", "0.01"], "--equivalence-margin is for --sequential"),
        (["--sequential", "--equivalence-margin", "-1"], "allowed: a number > 0"),
        (["--sequential", "--max-seeds", "1"], "--max-seeds"),
        (["--sequential", "--seeds", "0-9", "--max-seeds", "5"], "more than --max-seeds 5"),
    ],
)
def test_sequential_flags_refused_in_one_line(tmp_path, extra, needle):
    result = CliRunner().invoke(build_app(), ["compare", "--out", str(tmp_path / "x"), "--arm", "g:", *extra])
    assert result.exit_code == 2 and needle in flat_output(result.output) and "Traceback" not in result.output


def flat_output(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_a_split_with_no_paired_variance_reads_a_dash_not_nan(problem_out):
    for seed in SCORES:  # the arm equals the baseline on every problem: all differences 0
        (problem_out / "hadw" / f"seed{seed}" / M.FINAL_EVAL_PROBLEMS_FILE).write_text(
            (problem_out / "grpo" / f"seed{seed}" / M.FINAL_EVAL_PROBLEMS_FILE).read_text()
        )
        final = json.loads((problem_out / "grpo" / f"seed{seed}" / M.FINAL_EVAL_FILE).read_text())
        (problem_out / "hadw" / f"seed{seed}" / M.FINAL_EVAL_FILE).write_text(json.dumps(final))
    result = cmp.aggregate(cmp.collect_runs(problem_out, ["grpo", "hadw"], [0, 1, 2]))
    _, rows = cmp.variance_rows(result, "val/all/greedy")
    assert rows[0][6] == "—" and "nan" not in " ".join(rows[0])
