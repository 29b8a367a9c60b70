"""Issue 23, items 1, 3, 4: a resume never deletes a checkpoint it did not write, `latest` never points
outside the run, loaded state is checked before use, and no write follows a planted symbolic link."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hadw.errors import UserError
from hadw.safe_files import LinkError
from hadw.train.checkpoint import CheckpointError, latest_checkpoint
from hadw.train.config import load_config
from hadw.train.run_dir import RunDirError
from hadw.train.trainer import Trainer


def _trainer(tiny_path, run: Path, *extra: str, **kwargs) -> Trainer:
    overrides = [
        f"model.path={tiny_path}",
        "data.chat_template=never",
        "data.eval_size=0",
        "rollout.group_size=2",
        "rollout.max_new_tokens=2",
        "train.prompts_per_step=2",
        "train.mini_batch_prompts=1",
        "train.steps=2",
        f"train.output_dir={run}",
        "logging.progress=false",
        "train.num_threads=1",
        "checkpoint.every=1",
        "checkpoint.keep_last=3",
        *extra,
    ]
    return Trainer(load_config(None, overrides), **kwargs)


@pytest.fixture(scope="module")
def trained(tiny_path, tmp_path_factory) -> Path:
    """A finished 2-step run with checkpoint-000001 and checkpoint-000002; each test copies it."""
    run = tmp_path_factory.mktemp("trained") / "run"
    _trainer(tiny_path, run).train()
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(trained, copy, symlinks=True)
    return copy


def _checkpoints(run: Path) -> list[str]:
    return sorted(p.name for p in run.glob("checkpoint-*"))


# ---------------------------------------------------------------------------------------- 1. resume keeps data
@pytest.mark.parametrize("damage", ["missing", "empty", "dangling", "garbage", "not_utf8"])
def test_an_unusable_latest_falls_back_to_the_newest_complete_checkpoint(tiny_path, run, damage, capsys):
    latest = run / "latest"
    latest.unlink()
    if damage == "empty":
        latest.write_text("")
    elif damage == "dangling":
        latest.write_text("checkpoint-000009\n")
    elif damage == "garbage":
        latest.write_text("\x00\x01 not a name")
    elif damage == "not_utf8":
        latest.write_bytes(b"\xff\xfe")
    trainer = _trainer(tiny_path, run, "train.steps=3", resume=True)
    assert trainer.start_step == 2  # not 0: nothing is retrained, nothing deleted
    assert "newest complete checkpoint" in capsys.readouterr().err
    trainer.train()
    assert _checkpoints(run) == ["checkpoint-000001", "checkpoint-000002", "checkpoint-000003"]


def test_the_reproduction_a_missing_latest_and_a_changed_lr_is_refused_and_deletes_nothing(tiny_path, run):
    (run / "latest").unlink()
    with pytest.raises(RunDirError, match=r"optim.lr: 0.0001 -> 0.5"):
        _trainer(tiny_path, run, "optim.lr=0.5", resume=True)
    assert _checkpoints(run) == ["checkpoint-000001", "checkpoint-000002"]


def test_checkpoints_that_are_all_incomplete_are_refused_not_restarted(tiny_path, run):
    (run / "latest").unlink()
    for path in run.glob("checkpoint-*"):
        (path / "trainer_state.pt").unlink()
    with pytest.raises(CheckpointError, match="no checkpoint folder .* is complete"):
        _trainer(tiny_path, run, resume=True)
    assert _checkpoints(run) == ["checkpoint-000001", "checkpoint-000002"]


def test_the_settings_check_runs_when_a_resume_restarts_from_step_0(tiny_path, tmp_path):
    run = tmp_path / "run"
    _trainer(tiny_path, run, "checkpoint.every=0", "train.steps=0").train()  # no checkpoint, a config.yaml
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RunDirError, match=r"config.yaml .*optim.lr"):
        _trainer(tiny_path, run, "optim.lr=0.5", resume=True)


def test_a_checkpoint_newer_than_latest_is_not_deleted_by_a_resume(tiny_path, run):
    (run / "latest").write_text("checkpoint-000001\n")  # e.g. killed between the rename and `latest`
    trainer = _trainer(tiny_path, run, resume=True)
    assert trainer.start_step == 1 and _checkpoints(run) == ["checkpoint-000001", "checkpoint-000002"]
    trainer._lock.release()


@pytest.mark.parametrize("pointer", ["/etc", "../../x", "checkpoint-000002/../checkpoint-000001", "link"])
def test_latest_outside_the_run_folder_is_never_loaded(run, tmp_path, pointer):
    outside = tmp_path / "outside"
    outside.mkdir()
    if pointer == "link":
        (run / "checkpoint-000007").symlink_to(run / "checkpoint-000002")
        pointer = "checkpoint-000007"
    (run / "latest").write_text(pointer + "\n")
    assert latest_checkpoint(run) is None


# ---------------------------------------------------------------------------------------- 3. checked state
def _tamper(run: Path, edit) -> None:
    path = run / "checkpoint-000002" / "trainer_state.pt"
    state = torch.load(path, weights_only=True)
    edit(state)
    torch.save(state, path)


def _first_state(state):
    return next(iter(state["optimizer"]["state"].values()))


TAMPERED = {
    "exp_avg_shape": (lambda s: _first_state(s).update(exp_avg=torch.zeros(3)), "exp_avg has shape [3]"),
    "exp_avg_int": (lambda s: _first_state(s).update(exp_avg_sq=_first_state(s)["exp_avg_sq"].long()), "dtype"),
    "exp_avg_not_tensor": (lambda s: _first_state(s).update(exp_avg=[1, 2]), "exp_avg is a list"),
    "step_negative": (lambda s: _first_state(s).update(step=torch.tensor(-5.0)), "step is"),
    "unknown_param": (lambda s: s["optimizer"]["state"].update({999: {}}), "optimizer.state[999]"),
    "groups": (lambda s: s["optimizer"]["param_groups"].append({"params": []}), "param_groups has 2 groups"),
    "lr_string": (lambda s: s["optimizer"]["param_groups"][0].update(lr="fast"), "param_groups[0].lr"),
    "scheduler": (lambda s: s.update(scheduler={"last_epoch": "x"}), "scheduler.last_epoch"),
    "base_lrs": (lambda s: s["scheduler"].update(base_lrs=[1.0, 2.0, 3.0]), "scheduler.base_lrs"),
    "rng_python": (lambda s: s["rng"].update(python=[3, torch.zeros(5, dtype=torch.int64), None]), "rng.python"),
    "rng_numpy": (lambda s: s["rng"]["numpy"].__setitem__(0, "PCG64"), "rng.numpy"),
    "rng_torch": (lambda s: s["rng"].update(torch=torch.zeros(3)), "rng.torch"),
    "no_rng": (lambda s: s.pop("rng"), "lacks one of"),
}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_a_tampered_trainer_state_is_refused_naming_the_field(tiny_path, run, case):
    edit, needle = TAMPERED[case]
    _tamper(run, edit)
    with pytest.raises(CheckpointError, match="trainer_state.pt") as info:
        _trainer(tiny_path, run, "train.steps=3", resume=True)
    assert needle in str(info.value)


STATE_JSON = {
    "negative_position": ({"data_position": -4}, "'data_position' is -4"),
    "step_string": ({"step": "2"}, "'step' is '2'"),
    "step_mismatch": ({"step": 7}, "folder is checkpoint-000002"),
    "anchor_list": ({"anchor": []}, "'anchor'"),
    "anchor_garbage": ({"anchor": {"kind": "window", "history": "x", "k": "y"}}, "'anchor' cannot be loaded"),
}


@pytest.mark.parametrize("case", list(STATE_JSON))
def test_a_bad_state_json_is_refused_naming_the_field(tiny_path, run, case):
    change, needle = STATE_JSON[case]
    path = run / "checkpoint-000002" / "state.json"
    state = json.loads(path.read_text())
    path.write_text(json.dumps(state | change))
    with pytest.raises(CheckpointError, match="state.json") as info:
        _trainer(tiny_path, run, "train.steps=3", resume=True)
    assert needle in str(info.value)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "state_json"])
def test_a_damaged_checkpoint_file_is_one_clear_error(tiny_path, run, damage):
    ckpt = run / "checkpoint-000002"
    if damage == "truncated":
        data = (ckpt / "model" / "model.safetensors").read_bytes()
        (ckpt / "model" / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        (ckpt / "trainer_state.pt").write_bytes(b"garbage" * 10)
    else:
        (ckpt / "state.json").write_bytes(b"\xff{")
    with pytest.raises(CheckpointError, match=str(ckpt)):
        _trainer(tiny_path, run, "train.steps=3", resume=True)


# ---------------------------------------------------------------------------------------- 4. no write via links
@pytest.mark.parametrize(
    "name",
    [
        ".lock",
        "config.yaml",
        "metrics.jsonl",
        "latest",
        "checkpoint-000003",
        ".tmp-checkpoint-000003",
        "final_eval.json",
    ],
)
def test_a_planted_link_in_the_run_folder_is_refused_and_its_target_untouched(tiny_path, run, tmp_path, name):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = run / name
    if link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to(victim)
    if name.startswith(".tmp-"):  # a leftover temporary name: the link itself is removed, never followed
        _trainer(tiny_path, run, "train.steps=3", resume=True).train()
        assert not link.is_symlink()
    else:
        with pytest.raises(UserError, match="symbolic link") as info:
            _trainer(tiny_path, run, "train.steps=3", resume=True).train()
        assert isinstance(info.value, LinkError | CheckpointError)
    assert victim.read_text() == "precious\n"


def test_a_checkpoint_past_train_steps_is_one_line_not_done(tiny_path, run):
    """Issue 39, finding 8: a checkpoint at step 2 resumed with train.steps=1 ended "done" (rc 0) without a step:
    one line naming the step and what train.steps must be."""
    with pytest.raises(
        RunDirError, match=r"checkpoint-000002 is at step 2, past train.steps=1; allowed: train.steps >= 2"
    ):
        _trainer(tiny_path, run, "train.steps=1", resume=True)
    assert _checkpoints(run) == ["checkpoint-000001", "checkpoint-000002"]


def test_accept_changes_that_turn_lora_on_names_the_setting_not_the_checkpoint(tiny_path, run):
    """Issue 39, finding 10: `--resume --accept-changes model.lora.enabled=true` failed saying the checkpoint's
    optimizer state "does not list the run's" parameters, as if it were damaged; the setting is named now."""
    pytest.importorskip("peft")
    with pytest.raises(RunDirError, match=r"model.lora.enabled: False -> True changes which parameters the run trains"):
        _trainer(tiny_path, run, "model.lora.enabled=true", resume=True, accept_changes=True)
    assert _checkpoints(run) == ["checkpoint-000001", "checkpoint-000002"]
