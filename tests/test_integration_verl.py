"""The `grpo_hadw` verl estimator against verl's own code (verl from scripts/setup_verl.sh, CPU, offline).

verl is not installed in the project venv; scripts/setup_verl.sh puts verl and the light packages that
core_algos, ray_trainer, v1/utils and utils.tracking import into .venv-verl, which is appended to sys.path
here (the main venv's packages win). Without it, the whole module is skipped with the reason.

Every grpo_hadw call goes through verl's own trainer code: ray_trainer.compute_advantage on a DataProto, or
the v1 trainer's compute_advantage_for_multi_trajectories; the references are verl's built-in `grpo` through
the same functions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
VERL_LIB = Path(os.environ.get("HADW_VERL_LIB", REPO_ROOT / ".venv-verl"))


def _import_verl():
    if VERL_LIB.is_dir() and str(VERL_LIB) not in sys.path:
        sys.path.append(str(VERL_LIB))
    estimator_loaded_before = "hadw.integrations.verl.estimator" in sys.modules
    try:
        import verl.trainer.ppo.core_algos as core_algos
        import verl.trainer.ppo.ray_trainer as ray_trainer
    except Exception as e:  # ImportError, or a broken partial install (an old .venv-verl: rerun the script)
        pytest.skip(
            f"verl not importable ({type(e).__name__}: {e}); run scripts/setup_verl.sh", allow_module_level=True
        )
    return core_algos, ray_trainer, estimator_loaded_before


def _import_verl_v1_utils():
    """verl.trainer.ppo.v1.utils (the v1 trainer's compute_advantage_for_multi_trajectories), run as shipped.

    Its package's __init__ imports the whole v1 trainer, whose agent loop imports hydra; hydra-core 1.3.8's
    generated grammar needs antlr4-python3-runtime 4.9 and this venv has 4.13 (an ATN version error on import).
    So the package `verl.trainer.ppo.v1` is registered as a plain package of its real folder, without running
    that __init__; utils.py and what it imports (replay_buffer, ray_trainer, transfer_queue) are verl's own."""
    import importlib
    import types

    name = "verl.trainer.ppo.v1"
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(Path(core_algos.__file__).parent / "v1")]
        sys.modules[name] = package
    return importlib.import_module(f"{name}.utils")


core_algos, ray_trainer, ESTIMATOR_PRELOADED = _import_verl()
v1_utils = _import_verl_v1_utils()
REGISTERED_BY_VERL_ITSELF = "grpo_hadw" in core_algos.ADV_ESTIMATOR_REGISTRY

from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import AdvantageEstimator  # noqa: E402

from hadw.core import (  # noqa: E402
    HADWOptions,
    apply_hadw,
    compute_advantages,
    make_anchor,
)
from hadw.integrations.verl import check_registered  # noqa: E402
from hadw.integrations.verl.checkpoint import ANCHOR_STATE_NAME, HADWCheckpointCallback  # noqa: E402
from hadw.integrations.verl.estimator import (  # noqa: E402
    STORE,
    VerlHADWConfig,
    compute_grpo_hadw_outcome_advantage,
)

G = 8
VERL_EPS = 1e-6  # verl's GRPO default epsilon


@pytest.fixture(autouse=True)
def fresh_anchor():
    STORE.reset()
    yield
    STORE.reset()


def rollout_batch(correct: torch.Tensor, seed: int, shaped: bool = False, T: int = 12):
    """verl-shaped inputs for a [bs] 0/1 correctness: outcome reward on the last response token, random
    response lengths, prompt uids as strings in a shuffled (non-contiguous) order."""
    gen = torch.Generator().manual_seed(seed)
    bs = correct.numel()
    lengths = torch.randint(1, T + 1, (bs,), generator=gen)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    score = correct.float() - (0.3 * lengths / T if shaped else 0.0)  # a length penalty when shaped
    rewards = torch.zeros(bs, T)
    rewards[torch.arange(bs), lengths - 1] = score
    uids = np.array([f"prompt-{i // G}" for i in range(bs)], dtype=object)
    perm = torch.randperm(bs, generator=gen).numpy()
    return rewards[perm], mask[perm], uids[perm], correct[perm].float(), score[perm]


def algorithm(**hadw) -> OmegaConf:
    """The `algorithm` node verl hands to estimators (a DictConfig, not the AlgoConfig dataclass)."""
    return OmegaConf.create({"adv_estimator": "grpo_hadw", "norm_adv_by_std_in_grpo": True, "hadw": hadw})


def data_proto(rewards, mask, uids) -> DataProto:
    """The batch verl's trainer hands compute_advantage: tensors plus the per-response prompt `uid`."""
    tensors = {"token_level_rewards": rewards.clone(), "response_mask": mask.clone()}
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids.copy()})


def verl_compute_advantage(config, rewards, mask, uids, estimator="grpo_hadw"):
    """verl's own ray_trainer.compute_advantage, called as its trainers call it (config = the algorithm node;
    norm_adv_by_std_in_grpo reaches built-in GRPO as an argument, grpo_hadw through the config)."""
    data = ray_trainer.compute_advantage(
        data_proto(rewards, mask, uids),
        adv_estimator=estimator,
        norm_adv_by_std_in_grpo=config.get("norm_adv_by_std_in_grpo", True),
        config=config,
    )
    return data.batch["advantages"], data.batch["returns"]


def verl_compute_advantage_v1(config, rewards, mask, uids, estimator="grpo_hadw", batch_keys=None):
    """The v1 trainer's path (PPOTrainer._compute_advantage): compute_advantage_for_multi_trajectories, with
    its batch keys "{uid}_{session_id}_{output index}" (one output per session unless given)."""
    keys = batch_keys if batch_keys is not None else [f"{uid}_{i}_0" for i, uid in enumerate(uids)]
    data = v1_utils.compute_advantage_for_multi_trajectories(
        data_proto(rewards, mask, uids),
        batch_keys=keys,
        adv_estimator=estimator,
        norm_adv_by_std_in_grpo=config.get("norm_adv_by_std_in_grpo", True),
        config=config,
    )
    return data.batch["advantages"], data.batch["returns"]


def verl_grpo(rewards, mask, uids, norm=True):
    """verl's built-in `grpo` through the same compute_advantage (its AdvantageEstimator.GRPO branch)."""
    config = OmegaConf.create({"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": norm})
    return verl_compute_advantage(config, rewards, mask, uids, estimator=AdvantageEstimator.GRPO)


def test_plugin_registered_by_verl_entry_point():
    assert core_algos.get_adv_estimator_fn("grpo_hadw") is compute_grpo_hadw_outcome_advantage
    if not ESTIMATOR_PRELOADED:  # importing verl alone (its verl.plugins discovery) registered it
        assert REGISTERED_BY_VERL_ITSELF
    assert check_registered().startswith("grpo_hadw is registered in verl ")


@pytest.mark.slow
def test_external_modules_route_for_older_verl():
    """Entry-point discovery off (VERL_USE_EXTERNAL_PLUGINS=none): VERL_USE_EXTERNAL_MODULES registers it."""
    code = (
        f"import sys; sys.path.append({str(VERL_LIB)!r}); import verl.trainer.ppo.core_algos as c; "
        "print('grpo_hadw' in c.ADV_ESTIMATOR_REGISTRY, 'hadw.integrations.verl.estimator' in sys.modules)"
    )
    env = {
        **os.environ,
        "VERL_USE_EXTERNAL_PLUGINS": "none",
        "VERL_USE_EXTERNAL_MODULES": "hadw.integrations.verl.estimator",
    }
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    assert out.stdout.strip().splitlines()[-1] == "True True", out.stderr[-2000:]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lambda_one_zero_margin_equals_verl_grpo(seed):
    # every group has 3 of 8 correct, so p̂ = 3/8 = C everywhere: M = 0 and, with λ = 1, Φ = 1
    gen = torch.Generator().manual_seed(100 + seed)
    correct = torch.cat([torch.randperm(G, generator=gen) < 3 for _ in range(6)])
    rewards, mask, uids, _, _ = rollout_batch(correct, seed)
    config = algorithm(lam=1.0, anchor="fixed", anchor_options={"value": 3 / 8})
    adv, returns = verl_compute_advantage(config, rewards, mask, uids)
    ref_adv, ref_returns = verl_grpo(rewards, mask, uids)
    assert torch.equal(adv, ref_adv) and torch.equal(returns, ref_returns)
    assert adv.abs().sum() > 0


@pytest.mark.parametrize("norm", [True, False])
def test_disabled_equals_verl_grpo_on_random_rewards(norm):
    correct = torch.rand(5 * G, generator=torch.Generator().manual_seed(7)) < 0.4
    rewards, mask, uids, _, _ = rollout_batch(correct, 7, shaped=True)
    config = algorithm(enable=False)
    config.norm_adv_by_std_in_grpo = norm  # Dr. GRPO when False: verl passes it only through the config
    adv, _ = verl_compute_advantage(config, rewards, mask, uids)
    assert torch.equal(adv, verl_grpo(rewards, mask, uids, norm=norm)[0])
    assert STORE.anchor.state_dict()["history"] == pytest.approx([float(correct.float().mean())])


@pytest.mark.parametrize(("anchor", "options"), [("window", {"k": 2}), ("kalman", {"eta": 2.0, "m": 2})])
def test_enabled_equals_hadw_core(anchor, options, tmp_path):
    metrics_file = tmp_path / "logs" / "hadw.jsonl"
    config = algorithm(lam=1.3, anchor=anchor, anchor_options=options, metrics_file=str(metrics_file))
    reference = make_anchor(anchor, **options)
    anchors = []
    for step in range(3):
        p = [0.2, 0.5, 0.8][step]
        correct = torch.rand(6 * G, generator=torch.Generator().manual_seed(step)) < p
        rewards, mask, uids, correct_f, score = rollout_batch(correct, step, shaped=True)
        adv, _ = verl_compute_advantage(config, rewards, mask, uids)

        ids = torch.as_tensor(np.unique(uids.astype(str), return_inverse=True)[1])
        base = compute_advantages(score, ids, std="sample", std_floor=0.0, eps=VERL_EPS).advantages
        want = apply_hadw(base, correct_f, ids, reference, lam=1.3)
        torch.testing.assert_close(adv, want.advantages.unsqueeze(-1) * mask, rtol=1e-5, atol=1e-6)
        assert want.weights[base != 0].max() > 1.3 > want.weights[base != 0].min()  # Φ really varies
        assert STORE.last_metrics["hadw/anchor"] == pytest.approx(want.metrics["hadw/anchor"])
        anchors.append(want.metrics["hadw/anchor"])
    assert STORE.anchor.state_dict() == reference.state_dict()
    logged = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    assert [m["hadw/anchor"] for m in logged] == pytest.approx(anchors)


def test_normalize_batch_equals_hadw_core_and_cancels_lambda():
    """algorithm.hadw.normalize=batch: Φ rescaled to mean 1 over the informative responses (hadw.core's
    normalize_weights), so λ no longer changes the advantages; normalize=none keeps λ as a factor."""
    correct = torch.rand(6 * G, generator=torch.Generator().manual_seed(3)) < 0.4
    rewards, mask, uids, correct_f, score = rollout_batch(correct, 3)
    ids = torch.as_tensor(np.unique(uids.astype(str), return_inverse=True)[1])
    base = compute_advantages(score, ids, std="sample", std_floor=0.0, eps=VERL_EPS).advantages
    got = {}
    for lam in (1.0, 2.0):
        STORE.reset()
        got[lam], _ = verl_compute_advantage(algorithm(lam=lam, normalize="batch"), rewards, mask, uids)
    want = apply_hadw(base, correct_f, ids, make_anchor("window"), lam=2.0, normalize="batch")
    torch.testing.assert_close(got[2.0], want.advantages.unsqueeze(-1) * mask, rtol=1e-5, atol=1e-6)
    assert float(want.weights[base != 0].mean()) == pytest.approx(1.0, abs=1e-6)
    torch.testing.assert_close(got[1.0], got[2.0], rtol=1e-5, atol=1e-6)
    STORE.reset()
    plain, _ = verl_compute_advantage(algorithm(lam=2.0), rewards, mask, uids)
    assert not torch.allclose(plain, got[2.0], rtol=1e-3)  # without normalize, λ = 2 doubles the advantages
    with pytest.raises(ValueError, match="normalize='mean' is not allowed; allowed: none, batch"):
        verl_compute_advantage(algorithm(normalize="mean"), rewards, mask, uids)


def test_options_are_validated():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['lambda'\]"):
        VerlHADWConfig.from_config(algorithm(**{"lambda": 1.3}))
    with pytest.raises(ValueError, match="algorithm.hadw: HA-DW anchor 'mean' is not allowed"):
        VerlHADWConfig.from_config(algorithm(anchor="mean"))
    with pytest.raises(ValueError, match=r"window anchor: unknown option\(s\) \['kk'\]"):
        VerlHADWConfig.from_config(algorithm(anchor_options={"kk": 3}))
    assert VerlHADWConfig.from_config(OmegaConf.create({})) == VerlHADWConfig()  # no algorithm.hadw: defaults
    for keyed in ("per_level", "per_source", "per_prompt"):  # verl gives estimators no level/source/stable id
        with pytest.raises(ValueError, match=f"anchor={keyed} is not available in verl"):
            VerlHADWConfig.from_config(algorithm(anchor=keyed))


def test_checkpoint_callback_saves_and_restores_anchor(tmp_path):
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback

    config = OmegaConf.create(
        {
            "algorithm": {"hadw": {"anchor": "window", "anchor_options": {"k": 10}}},
            "trainer": {
                "default_local_dir": str(tmp_path),
                "resume_mode": "auto",
                "resume_from_path": None,
                "checkpoint_callback_class": "hadw.integrations.verl.checkpoint.HADWCheckpointCallback",
            },
        }
    )
    callback = build_checkpoint_callback(config)  # verl's own loader; nothing to resume from yet
    assert isinstance(callback, HADWCheckpointCallback) and STORE.state_dict() is None
    batches = [rollout_batch(torch.rand(4 * G, generator=torch.Generator().manual_seed(s)) < 0.5, s) for s in range(3)]
    for rewards, mask, uids, _, _ in batches[:2]:
        verl_compute_advantage(config.algorithm, rewards, mask, uids)
    step_dir = tmp_path / "global_step_2"
    callback.on_save(trainer=None, global_step=2, checkpoint_dir=str(step_dir))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")  # what verl writes after a save
    saved = json.loads((step_dir / ANCHOR_STATE_NAME).read_text())
    assert len(saved["history"]) == 2

    STORE.reset()  # a new driver process
    build_checkpoint_callback(config)
    rewards, mask, uids, correct, _ = batches[2]
    verl_compute_advantage(config.algorithm, rewards, mask, uids)
    assert STORE.anchor.state_dict()["history"] == pytest.approx([*saved["history"], float(correct.mean())])

    STORE.reset()
    config.trainer.resume_mode = "disable"
    build_checkpoint_callback(config)
    assert STORE.state_dict() is None


@pytest.mark.parametrize("algo", ["grpo", "gspo", "dapo"])
def test_example_launch_scripts_use_keys_verl_knows(algo):
    """Every override in examples/verl/run_<algo>_hadw.sh names a key of verl's generated trainer config
    (new keys only under algorithm.hadw, with '+'), and algorithm.hadw parses into valid HADWOptions."""
    import verl

    script = REPO_ROOT / "examples" / "verl" / f"run_{algo}_hadw.sh"
    # run the script with `python3` stubbed to print its arguments instead of launching anything
    stub = 'python3() { [ "$2" = hadw.integrations.verl ] && return 0; shift 2; printf "%s\\n" "$@"; }'
    env = {**os.environ, "MODEL_PATH": "/models/m", "DATA_DIR": "/data/math", "CKPT_DIR": "/tmp/hadw-example-ckpt"}
    out = subprocess.run(["bash", "-c", f"{stub}; source {script}"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    overrides = [line for line in out.stdout.splitlines() if "=" in line]
    schema = OmegaConf.load(Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml")
    added = {}
    for override in overrides:
        key, value = override.split("=", 1)
        if key.startswith("+"):
            assert key.startswith("+algorithm.hadw."), key
            added[key[1:]] = value
        else:
            parent, _, leaf = key.rpartition(".")
            node = OmegaConf.select(schema, parent, default=None) if parent else schema
            assert node is not None and leaf in list(node.keys()), f"{script.name}: verl has no key {key}"
    config = OmegaConf.from_dotlist([f"{k}={v}" for k, v in added.items()])
    options = VerlHADWConfig.from_config(config.algorithm).options()
    assert (options.lam, options.anchor, options.anchor_options) == (1.3, "window", {"k": 10})
    assert dict(line.split("=", 1) for line in overrides)["algorithm.adv_estimator"] == "grpo_hadw"


def test_a_changed_anchor_setting_on_resume_warns_loudly_and_uses_the_configured_one(caplog):
    saved = make_anchor("window", k=10)
    saved.observe(0.25)
    STORE.load_state_dict(saved.state_dict())  # what the checkpoint callback restores on resume
    anchor = STORE.get(HADWOptions(anchor="window", anchor_options={"k": 3}))
    assert anchor.k == 3 and anchor.history == []  # the saved k=10 did not silently win
    assert "THE ANCHOR STARTS EMPTY" in caplog.text
    caplog.clear()
    STORE.get(HADWOptions(anchor="ema", anchor_options={"alpha": 0.5}))  # changed mid-run
    assert "THE ANCHOR STARTS EMPTY" in caplog.text
    STORE.reset()
    STORE.load_state_dict(saved.state_dict())
    assert STORE.get(HADWOptions(anchor="window", anchor_options={"k": 10})).history == [0.25]


def test_multi_output_sessions_are_refused():
    """verl's v1 trainer runs built-in GRPO on each agent session's final output; grpo_hadw sees no session
    keys, so unequal group sizes (a multi-output session) are refused instead of mis-counted."""
    rewards, mask = torch.zeros(5, 3), torch.ones(5, 3)
    rewards[0, -1] = 1.0
    uids = np.array(["a", "a", "a", "b", "b"], dtype=object)
    with pytest.raises(ValueError, match=r"groups of unequal size \(2\.\.3 rows per uid\)"):
        verl_compute_advantage(algorithm(), rewards, mask, uids)
    # verl's v1 path: uid a = one 2-output session + one 1-output session; v1 hands grpo_hadw every row
    keys = ["a_0_0", "a_0_1", "a_1_0", "b_0_0", "b_1_0"]
    with pytest.raises(ValueError, match=r"groups of unequal size \(2\.\.3 rows per uid\)"):
        verl_compute_advantage_v1(algorithm(), rewards, mask, uids, batch_keys=keys)
    verl_grpo_v1, _ = verl_compute_advantage_v1(algorithm(), rewards, mask, uids, AdvantageEstimator.GRPO, keys)
    assert torch.equal(verl_grpo_v1[0], verl_grpo_v1[1])  # built-in grpo: the session's final output, broadcast
    STORE.reset()


@pytest.mark.parametrize("norm", [True, False])
def test_v1_multi_trajectory_path_disabled_equals_verl_grpo(norm):
    """verl 0.9.1's v1 trainer (trainer.use_v1) computes advantages with compute_advantage_for_multi_trajectories:
    built-in GRPO on each session's final output, broadcast; any other estimator through compute_advantage.
    With one output per session (single-turn) grpo_hadw with HA-DW off equals its `grpo` bit for bit."""
    correct = torch.rand(6 * G, generator=torch.Generator().manual_seed(11)) < 0.45
    rewards, mask, uids, correct_f, _ = rollout_batch(correct, 11, shaped=True)
    config = algorithm(enable=False)
    config.norm_adv_by_std_in_grpo = norm
    adv, returns = verl_compute_advantage_v1(config, rewards, mask, uids)
    ref_adv, ref_returns = verl_compute_advantage_v1(config, rewards, mask, uids, AdvantageEstimator.GRPO)
    assert torch.equal(adv, ref_adv) and torch.equal(returns, ref_returns)
    assert ref_adv.abs().sum() > 0
    assert STORE.anchor.state_dict()["history"] == pytest.approx([float(correct_f.mean())])  # grpo_hadw ran
    STORE.reset()
    on, _ = verl_compute_advantage_v1(algorithm(lam=1.3), rewards, mask, uids)
    STORE.reset()
    torch.testing.assert_close(on, verl_compute_advantage(algorithm(lam=1.3), rewards, mask, uids)[0])
    assert not torch.allclose(on, ref_adv, rtol=1e-3)  # HA-DW on: Φ really changed them


def test_hadw_metrics_reach_verls_tracking_with_the_step(tmp_path, monkeypatch):
    """verl's trainer fills its step dict itself and logs it with Tracking.log(data=metrics, step=global_steps);
    the estimator is never given that dict. Called in fit()'s order (a validation log before any step, then per
    step: the real compute_advantage, verl's own reduce_metrics of verl's own keys, Tracking.log through its `file`
    backend as trainer.logger=[file]), the hadw/* scalars of each step arrive with that step, equal to the
    estimator's; none before the first step, none with algorithm.hadw.log_to_tracker=false."""
    from verl.utils.metric import reduce_metrics
    from verl.utils.tracking import Tracking

    path = tmp_path / "verl_metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    from hadw.integrations.verl import tracking as hadw_tracking

    STORE.reset()
    hadw_tracking.take()  # what earlier tests' estimator calls left pending (no fit() logged them)
    tracking = Tracking(project_name="hadw", experiment_name="metrics", default_backend=["file"])
    tracking.log(data={"val-core/acc": 0.25}, step=0)  # fit(): val_before_train, no advantage computed yet
    sent = {}
    for step in (1, 2, 3):
        correct = torch.rand(4 * G, generator=torch.Generator().manual_seed(step)) < [0.2, 0.5, 0.8][step - 1]
        rewards, mask, uids, correct_f, _ = rollout_batch(correct, step)
        verl_compute_advantage(algorithm(lam=1.3, log_to_tracker=step < 3), rewards, mask, uids)
        assert STORE.last_metrics["hadw/batch_accuracy"] == pytest.approx(float(correct_f.mean()))
        sent[step] = dict(STORE.last_metrics)
        tracking.log(data=reduce_metrics({"critic/score/mean": [float(correct_f.mean())]}), step=step)
    tracking.logger["file"].finish()
    logged = {entry["step"]: entry["data"] for entry in map(json.loads, path.read_text().splitlines())}
    assert sorted(logged) == [0, 1, 2, 3]
    assert not [k for k in logged[0] if k.startswith("hadw/")]
    for step in (1, 2):
        hadw = {k: v for k, v in logged[step].items() if k.startswith("hadw/")}
        assert set(hadw) >= {"hadw/anchor", "hadw/batch_accuracy", "hadw/phi_mean", "hadw/phi_min", "hadw/phi_max"}
        assert hadw == pytest.approx(sent[step]) and "critic/score/mean" in logged[step]
    assert logged[1]["hadw/anchor"] != logged[2]["hadw/anchor"]  # a per-step value, not a constant
    assert not [k for k in logged[3] if k.startswith("hadw/")]  # log_to_tracker=false: verl's dict as verl made it


def test_start_up_refuses_multi_turn_and_warns_on_filter_groups(caplog, tmp_path):
    from hadw.integrations.verl.estimator import check_setup

    # verl's own ppo_trainer.yaml defaults: single-turn, no filter_groups -> nothing to say.
    defaults = OmegaConf.load(VERL_LIB / "verl" / "trainer" / "config" / "_generated_ppo_trainer.yaml")
    assert check_setup(defaults) == []
    multi = OmegaConf.create({"actor_rollout_ref": {"rollout": {"multi_turn": {"enable": True}}}})
    with pytest.raises(ValueError, match="multi_turn.enable=true: grpo_hadw supports single-turn"):
        check_setup(multi)
    trainer = {"resume_mode": "disable", "default_local_dir": str(tmp_path)}
    with pytest.raises(ValueError, match="single-turn"):  # the callback is built at trainer start-up
        HADWCheckpointCallback(OmegaConf.create({**multi, "trainer": trainer}))
    dapo = OmegaConf.create({"algorithm": {"filter_groups": {"enable": True}}, "trainer": trainer})
    with caplog.at_level("WARNING"):
        HADWCheckpointCallback(dapo)
    assert "filter_groups.enable=true" in caplog.text
    # The estimator alone sees only `algorithm`: it warns once, on its first call.
    STORE.reset()
    caplog.clear()
    rewards = torch.zeros(G, 3)
    rewards[:3, -1] = 1.0
    config = OmegaConf.create({"filter_groups": {"enable": True}, "hadw": {"enable": True}})
    with caplog.at_level("WARNING"):
        for _ in range(2):
            compute_grpo_hadw_outcome_advantage(rewards, torch.ones(G, 3), np.array(["a"] * G), config=config)
    assert caplog.text.count("filter_groups.enable=true") == 1


def test_docs_model_merger_command_parses_with_verls_own_parser(monkeypatch):
    """docs/verl.md's `python -m verl.model_merger merge ...` line is accepted by verl 0.9.1's argument parser."""
    from verl.model_merger.base_model_merger import parse_args

    text = (REPO_ROOT / "docs" / "verl.md").read_text()
    start = text.index("python -m verl.model_merger merge")
    command = text[start : text.index("\n", text.index("--target_dir", start))].replace("\\\n", " ").split()
    assert command[:3] == ["python", "-m", "verl.model_merger"]
    monkeypatch.setattr(sys, "argv", ["verl.model_merger", *command[3:]])
    args = parse_args()
    assert (args.operation, args.backend) == ("merge", "fsdp")
    assert args.local_dir == "$CKPT_DIR/global_step_300/actor" and args.target_dir.endswith("hadw-step300")
