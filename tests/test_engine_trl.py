"""engine=trl: hadw's config, run folder and commands over TRL's GRPOTrainer (hadw.train.engines).

The config side is fast (no TRL run). The end-to-end tests train for real, as a user does: `hadw train ... engine=trl
trl.num_processes=2` (2 gloo ranks on the CPU) with a reward that names its own column, then `hadw eval RUN_DIR`,
`hadw plot`, `--resume`, a stop signal, and `hadw compare --set engine=trl`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hadw import metrics as M
from hadw.train.config import ConfigError, config_to_yaml, load_config

ROOT = Path(__file__).resolve().parents[1]
HADW = [str(Path(sys.executable).parent / "hadw")]  # the installed command, as a user runs it


def test_native_config_yaml_is_as_before_the_engine_key():
    """A native run's config.yaml has neither `engine` nor `trl` (its config hash, and every sweep resumed across
    versions, stay the same); an engine=trl run's records both."""
    native = config_to_yaml(load_config(None, []))
    assert "engine" not in native and "trl:" not in native
    trl = config_to_yaml(load_config(None, ["engine=trl", "trl.num_processes=2"]))
    assert "engine: trl" in trl and "num_processes: 2" in trl


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["engine=vllm"], "engine='vllm' is not allowed; allowed values: native, trl"),
        (["engine=trl", "rollout.decoder=fused"], "rollout.decoder='fused' is not supported with engine=trl"),
        (["engine=trl", "algorithm.dynamic_sampling=true"], "algorithm.dynamic_sampling=True is not supported"),
        (["engine=trl", "optim.name=sgd"], "optim.name='sgd' is not supported with engine=trl"),
        (["engine=trl", "algorithm.overlong=penalty"], "algorithm.overlong='penalty' is not supported"),
        (["engine=trl", "trl.vllm=remote"], "trl.vllm='remote' is not allowed; allowed values: none, colocate, server"),
        (["engine=trl", "trl.num_processes=0"], "trl.num_processes=0"),
        (["engine=trl", "train.steps=0"], "train.steps=0 with engine=trl: TRL trains at least one step"),
        (["engine=trl", "trl.accelerate_config=zero3", "train.eval_every=5"], "allowed: train.eval_every=0"),
        (["engine=trl", "trl.num_processes=3"], "must split evenly over trl.num_processes=3"),
        (["engine=trl", "trl.extra={vllm_server_hots: x}"], "did you mean 'vllm_server_host'?"),
        (["engine=trl", "trl.extra={learning_rate: 0.1}"], "trl.extra.learning_rate is set by hadw from its own key"),
    ],
)
def test_a_key_trl_cannot_honour_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        cfg = load_config(None, overrides)
        from hadw.train.engines.trl_args import grpo_kwargs

        grpo_kwargs(cfg, Path("/tmp/run"))  # the trl.extra overlap is found when the GRPOConfig is assembled
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_parent_validates_and_plans_the_launch_without_transformers():
    """The parent only validates, claims the folder and launches the workers (which load transformers and TRL):
    before, config validation's look-up of the decoder names imported transformers (~3 s of each launch here)."""
    code = (
        "import sys; from hadw.train.config import load_config; from hadw.train.config_checks import validate; "
        "from hadw.train.engines import trl_launch; validate(load_config(None, ['engine=trl'])); "
        "print(sorted(m for m in ('transformers', 'trl', 'accelerate') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]


def test_a_worker_that_crashes_is_one_line_after_its_own_traceback(tmp_path, monkeypatch):
    """The worker's Python error is printed by the worker (its traceback is the one to read); the parent then says
    one line and exits 1, without a second traceback of its own launch code (before: a 40-line rich traceback)."""
    from typer.testing import CliRunner

    from hadw.cli import build_app
    from hadw.train import engines
    from hadw.train.engines.trl_launch import TRLWorkerError

    def crashed(*args, **kwargs):
        raise TRLWorkerError("engine=trl: the training process exited with code 1 (its output is above)")

    monkeypatch.setattr(engines, "train_run", crashed)
    out = CliRunner().invoke(build_app(), ["train", "engine=trl", f"train.output_dir={tmp_path / 'run'}"])
    assert out.exit_code == 1, out.output
    assert out.output.strip().splitlines()[-1] == (
        "error: engine=trl: the training process exited with code 1 (its output is above)"
    )
    assert "Traceback" not in out.output and not isinstance(out.exception, TRLWorkerError)


def test_the_batch_arithmetic_keeps_the_native_batch():
    """16 prompts x G=8 a rollout batch, 4 prompts an optimiser step, on 2 processes: 16 completions a process a
    micro-step, 1 accumulation step, 4 micro-steps a generation = 4 optimiser steps a rollout batch."""
    from hadw.train.engines.trl_args import batch_layout, grpo_kwargs

    cfg = load_config(None, ["engine=trl", "trl.num_processes=2", "train.steps=10", "train.ppo_epochs=2"])
    layout = batch_layout(cfg)
    assert layout == {
        "per_device_train_batch_size": 16,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": 4,
        "num_iterations": 2,
        "updates_per_step": 8,
        "max_steps": 80,
    }
    n = 2
    assert layout["per_device_train_batch_size"] * n * layout["steps_per_generation"] == 16 * 8  # P·G
    kwargs = grpo_kwargs(load_config(None, ["engine=trl", "algorithm.preset=gspo", "hadw.enabled=true"]), Path("r"))
    assert kwargs["importance_sampling_level"] == "sequence" and (kwargs["epsilon"], kwargs["epsilon_high"]) == (
        3e-4,
        4e-4,
    )
    assert kwargs["hadw_enabled"] and kwargs["hadw_advantage"] == "grpo" and kwargs["shuffle_dataset"] is False
    dapo = grpo_kwargs(load_config(None, ["engine=trl", "algorithm.preset=dapo"]), Path("r"))
    assert dapo["loss_type"] == "dapo" and dapo["epsilon_high"] == 0.28


def test_show_config_prints_the_grpo_config(tmp_path):
    out = subprocess.run(
        [*HADW, "train", "engine=trl", "trl.num_processes=2", "--show-config"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "# engine=trl: TRL's GRPOConfig" in out.stdout and "steps_per_generation: 4" in out.stdout


def test_hadw_advantage_recomputes_the_group_advantage_with_hadws_estimator():
    """HADWGRPOConfig.hadw_advantage='grpo' with population std: Â is hadw.core's (what the native trainer uses),
    not TRL's sample-std one; the two differ by exactly the ddof factor on a group with both outcomes."""
    import torch

    from hadw.core import compute_advantages

    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    groups = torch.zeros(4, dtype=torch.long)
    population = compute_advantages(rewards, groups, "grpo", std="population").advantages
    sample = compute_advantages(rewards, groups, "grpo", std="sample").advantages
    assert population[0] == pytest.approx(1.7320508, rel=1e-6)  # 0.75 / sqrt(0.1875)
    assert population[0] / sample[0] == pytest.approx((4 / 3) ** 0.5, rel=1e-6)


# ----------------------------------------------------------------------------------------- end to end (slow)


def _own_data(folder: Path) -> Path:
    """A JSONL of the shipped warm start's task (sums, levels 2-4) in a user's own columns: q, gold, lvl."""
    from hadw.data import load_problems

    stream = load_problems("task:sums", levels=[2, 3, 4], seed=5)
    rows = [{"q": stream[i].question, "gold": int(stream[i].answer), "lvl": stream[i].level} for i in range(400)]
    path = folder / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "my_rewards.py").write_text((ROOT / "examples/own_data/my_rewards.py").read_text())
    return path


def _recipe(folder: Path, *extra: str) -> list[str]:
    from hadw.train import warm_starts as W

    model, _ = W.resolve("sums234-s0")
    data = _own_data(folder)
    return [
        "engine=trl", f"model.path={model}", f"data.source={data}", "data.fields.prompt=q", "data.fields.answer=gold",
        "data.fields.level=lvl", "data.template=plain", "data.eval_size=40",
        "reward.functions=[my_rewards:gold_last_number]", "rollout.max_new_tokens=6", "train.prompts_per_step=4",
        "train.mini_batch_prompts=2", "train.steps=3", "checkpoint.every=1", "logging.progress=off",
        "train.num_threads=1", *extra,
    ]  # fmt: skip


def _hadw(*args: str, cwd: Path, check: bool = True, timeout: float = 240) -> subprocess.CompletedProcess:
    out = subprocess.run([*HADW, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)
    if check:
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


@pytest.mark.slow
def test_two_gloo_ranks_give_a_run_folder_every_command_reads(tmp_path):
    run = tmp_path / "run"
    _hadw("train", *_recipe(tmp_path, "trl.num_processes=2", f"train.output_dir={run}"), cwd=tmp_path)
    records = M.read_run(run)
    assert [r["step"] for r in records.steps] == [1, 2, 3]
    keys = {k for r in records.steps for k in r}
    assert {M.PG_LOSS, M.SCORE_MEAN, M.REWARDS_MEAN, M.ANCHOR, M.GRAD_NORM, M.LR, M.DEGENERATE_FRAC} <= keys
    from tests.test_metrics_contract import _declared

    assert sorted(k for k in keys if not _declared(k)) == []  # hadw's metric contract, not TRL's names
    assert any(k.startswith("critic/score/L") for k in keys)  # per level, from the user's own level column
    final = records.final_eval
    assert final["all"][M.COUNT] == 40 and 0 < final["all"][M.GREEDY] < 1  # the warm start answers some
    assert len(M.read_eval_problems(run)) == 40
    assert not (run / "README.md").exists()  # TRL's model card is not left in the run folder
    assert not {"training_args.bin", "README.md"} & {p.name for p in (run / "final_model").iterdir()}  # no pickle

    # hadw eval RUN_DIR reproduces the trainer's final greedy accuracy (the run's own data, template and reward)
    ev = _hadw("eval", str(run), "--json", str(tmp_path / "eval.json"), cwd=tmp_path)
    again = json.loads((tmp_path / "eval.json").read_text())
    assert again["buckets"]["all"]["greedy"] == pytest.approx(final["all"][M.GREEDY], abs=1e-12), ev.stdout
    _hadw("plot", str(run), "--out", str(tmp_path / "curves.png"), cwd=tmp_path)
    assert (tmp_path / "curves.png").stat().st_size > 1000

    # --resume train.steps=4 continues from the last checkpoint: one more row, the earlier ones kept
    before = (run / "metrics.jsonl").read_text().splitlines()
    _hadw("train", str(run / "config.yaml"), "--resume", "train.steps=4", cwd=tmp_path)
    after = (run / "metrics.jsonl").read_text().splitlines()
    assert after[:3] == before and json.loads(after[3])["step"] == 4
    anchor = json.loads((run / "checkpoint-8" / "hadw_anchor.json").read_text())
    assert anchor["kind"] == "window" and len(anchor["history"]) == 4  # the anchor went on from its 3 batches


@pytest.mark.slow
def test_a_stop_signal_ends_in_a_checkpoint_and_the_resume_line(tmp_path):
    run = tmp_path / "run"
    args = _recipe(tmp_path, f"train.output_dir={run}", "train.steps=400", "checkpoint.every=0")
    proc = subprocess.Popen([*HADW, "train", *args], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not ((run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").read_text()):
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()[-2000:]
    line = err.decode().strip().splitlines()[-1]
    assert line.startswith("SIGTERM: stopped; last checkpoint ") and line.endswith("--resume"), line
    from hadw.train.engines.trl_launch import trl_checkpoints

    (checkpoint,) = trl_checkpoints(run)
    steps = len(M.read_run(run).steps)
    assert int(checkpoint.name.split("-")[1]) == 2 * steps  # at a rollout-batch boundary (2 optimiser steps each)
    assert not (run / "final_eval.json").exists()


@pytest.mark.slow
def test_a_reward_error_in_the_worker_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "bad_rewards.py").write_text("def broken(prompts, completions, **kw):\n    raise RuntimeError('x')\n")
    run = tmp_path / "run"
    args = _recipe(tmp_path, f"train.output_dir={run}", "reward.functions=[bad_rewards:broken]", "train.steps=5")
    out = _hadw("train", *[a for a in args if not a.startswith("reward.functions=[my")], cwd=tmp_path, check=False)
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "bad_rewards:broken" in last and "Traceback" not in out.stderr
    assert (run / "reward_errors.jsonl").is_file()


@pytest.mark.slow
def test_compare_sweeps_seeds_and_arms_on_the_trl_engine(tmp_path):
    out = tmp_path / "cmp"
    # One process per run: the sweep's machinery is under test here; two gloo ranks are the run-folder test's
    # (each 2-rank launch costs ~10 s more on 2 cores), and a task's slots the cluster dry runs'.
    sets = [x for o in _recipe(tmp_path, "train.steps=2") for x in ("--set", o)]
    args = ["compare", "--out", str(out), "--arm", "grpo:", "--arm", "hadw:hadw.enabled=true", "--seeds", "0-1"]
    done = _hadw(*args, *sets, "--smooth", "1", cwd=tmp_path, timeout=400)
    assert "runs: 4 trained, 0 resumed, 0 reused, 0 failed" in done.stderr, done.stderr[-2000:]
    assert "hadw − grpo [paired]" in done.stdout, done.stdout
    table = json.loads((out / "compare.json").read_text())
    assert sorted(table["config_hashes"]) == ["grpo", "hadw"]
    for arm in ("grpo", "hadw"):
        for seed in (0, 1):
            assert (out / arm / f"seed{seed}" / "final_eval.json").is_file()
            assert "engine: trl" in (out / arm / f"seed{seed}" / "config.yaml").read_text()
    again = _hadw(*args, *sets, "--collect-only", cwd=tmp_path)
    assert "grpo" in again.stdout and "hadw" in again.stdout


def test_a_cluster_task_gets_one_slot_a_trl_process(tmp_path):
    """hadw compare on Slurm / Ray: an engine=trl run of 2 processes is one task of 2 CPUs (gloo), or of >= 2 GPUs
    when GPUs are asked for (fewer refused in one line)."""
    from typer.testing import CliRunner

    from hadw.cli import build_app

    def dry(*extra: str):
        args = ["compare", "--launcher", "slurm", "--dry-run", "--arm", "a:", "--seeds", "0", "--out", str(tmp_path)]
        return CliRunner().invoke(build_app(), [*args, *extra])

    trl = ["--set", "engine=trl", "--set", "trl.num_processes=2"]
    assert "#SBATCH --cpus-per-task=1" in dry().output  # native: as before
    assert "#SBATCH --cpus-per-task=2" in dry(*trl).output
    refused = dry(*trl, "--gpus-per-run", "1")
    assert refused.exit_code == 2 and "allowed: --gpus-per-run >= 2" in refused.output
    assert "#SBATCH --gpus-per-node=2" in dry(*trl, "--gpus-per-run", "2").output


def test_a_run_that_cannot_start_says_so_before_anything_is_written(tmp_path):
    """A missing model folder or accelerate config is one line (exit 2), and the run folder is not created."""
    run = tmp_path / "run"
    for bad, expected in [
        (["model.path=no/such/model_folder"], "model.path=no/such/model_folder: no such folder"),
        (["trl.accelerate_config=zero9.yaml"], "trl.accelerate_config='zero9.yaml': no such file; allowed: a YAML"),
    ]:
        out = _hadw("train", "engine=trl", *bad, f"train.output_dir={run}", cwd=tmp_path, check=False)
        assert out.returncode == 2 and expected in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert not run.exists()


def test_the_readme_quotes_the_engine_agreement_as_its_rebuilt_table_says():
    """The README's figure is the results table's (which tests/test_raw_tables.py rebuilds from the raw file)."""
    import re

    results = (ROOT / "benchmarks/studies/engine_agreement/results.md").read_text()
    row = next(line for line in results.splitlines() if line.startswith("| tiny_engine |"))
    mean, low, high = (float(x) for x in re.findall(r"[-+]\d\.\d{4}", row.split("|")[5]))
    quoted = f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]".replace("-", "−")  # the README writes a minus sign
    readme = (ROOT / "README.md").read_text()
    assert quoted.lstrip("+") in readme or quoted in readme, quoted
    assert "equivalent within ±0.03" in row and "equivalent within ±0.03" in readme


@pytest.mark.slow
def test_lora_on_the_trl_engine_saves_the_adapter_with_its_base_record(tmp_path):
    """model.lora.enabled under engine=trl: hadw's adapters (peft), final_model/ is the adapter with the base's
    fingerprint record, and `hadw eval RUN_DIR` (which refuses an adapter without one) reproduces the final score."""
    run = tmp_path / "run"
    _hadw("train", *_recipe(tmp_path, f"train.output_dir={run}", "model.lora.enabled=true", "train.steps=2"),
          cwd=tmp_path)  # fmt: skip
    names = {p.name for p in (run / "final_model").iterdir()}
    assert {"adapter_model.safetensors", "hadw_base_model.json"} <= names and "model.safetensors" not in names
    _hadw("eval", str(run), "--json", str(tmp_path / "eval.json"), cwd=tmp_path)
    again = json.loads((tmp_path / "eval.json").read_text())["buckets"]["all"]["greedy"]
    assert again == pytest.approx(M.read_run(run).final_eval["all"][M.GREEDY], abs=1e-12)
