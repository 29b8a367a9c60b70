"""Shipped warm starts (hadw.train.warm_starts): the files are what the manifest says, on any kernels; an altered,
unknown or too-weak start is refused in one line; a cached start is reused only for the request it was built for; the
demo never removes a folder it did not make."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hadw.train import warm_starts as W

EVAL_SCRIPT = """
import json, sys, torch
torch.set_num_threads(1)
from hadw.data import load_problems
from hadw.eval.evaluate import evaluate
from hadw.rollout import load_model
from hadw.train import warm_starts as W
folder, start = W.resolve(sys.argv[1])
model, tokenizer = load_model(folder)
spec = f"task:{start.task}"
problems = list(load_problems(spec, levels=list(start.levels), seed=start.sft_seed, held_out=True, limit=200))
report = evaluate(model, tokenizer, problems, "plain", "exact", use_chat_template=False)
print(json.dumps({"accuracy": report.accuracy, "levels": {k.split("/")[-1]: v
      for k, v in report.level_accuracy().items()}, "capability": torch.backends.cpu.get_cpu_capability()}))
"""


def _evaluate(name: str, **env: str) -> dict:
    """Greedy accuracy of shipped start `name` on SFT's held-out problems, in a fresh process with `env`."""
    full = {**os.environ, **env}
    cmd = [sys.executable, "-c", EVAL_SCRIPT, name]
    out = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_demo_start_ships_with_its_manifest_and_passes_the_floor():
    starts = W.shipped()
    assert W.DEMO_WARM_START in starts and len(starts) >= 3
    for name, start in starts.items():
        folder, _ = W.resolve(name)  # every file's sha256 checked
        assert folder.is_dir() and (folder / W.WEIGHTS).stat().st_size < 5_000_000  # "a few MB"
        assert min(start.level_accuracy.values()) >= start.level_floor, name
        assert start.accuracy >= start.target, name


@pytest.mark.parametrize("kernels", [{}, {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}])
def test_shipped_start_evaluates_to_its_manifest_on_other_kernels(kernels):
    """The file is the warm start: its greedy accuracy is the manifest's, with this CPU's kernels and with the
    plainest ones (what another CPU would run). Before the shipped starts, other kernels gave another start."""
    start = W.get(W.DEMO_WARM_START)
    result = _evaluate(W.DEMO_WARM_START, **kernels)
    if kernels:
        assert result["capability"] == "DEFAULT"
    assert result["accuracy"] == pytest.approx(start.accuracy, abs=1e-9)
    assert result["levels"] == pytest.approx(start.level_accuracy, abs=1e-9)


def test_an_altered_or_extra_file_is_refused_in_one_line(tmp_path):
    start = W.get(W.DEMO_WARM_START)
    copy = tmp_path / "start"
    shutil.copytree(W.SHIPPED_DIR / start.name, copy)
    W.verify(copy, start.files, "copy")  # intact: accepted
    data = bytearray((copy / W.WEIGHTS).read_bytes())
    data[-1] ^= 1  # one bit of one weight
    (copy / W.WEIGHTS).write_bytes(bytes(data))
    with pytest.raises(W.WarmStartError) as err:
        W.verify(copy, start.files, "copy")
    assert "model.safetensors" in str(err.value) and "\n" not in str(err.value)
    (copy / W.WEIGHTS).write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 1]))
    (copy / "pytorch_model.bin").write_bytes(b"not ours")
    with pytest.raises(W.WarmStartError, match="pytorch_model.bin"):
        W.verify(copy, start.files, "copy")


def test_unknown_start_is_one_line_exit_2():
    out = subprocess.run(
        [sys.executable, "-m", "hadw.cli", "demo", "--warm-start", "nope"], capture_output=True, text=True, timeout=120
    )
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "'nope'" in lines[0] and W.DEMO_WARM_START in lines[0]


def test_a_start_below_the_floor_is_refused():
    with pytest.raises(W.WarmStartError) as err:
        W.check_floor({"L2": 0.84, "L3": 0.086, "L4": 0.082}, 0.15, "warm start x")
    assert "L3 0.086" in str(err.value) and "L4 0.082" in str(err.value) and "L2" not in str(err.value)
    W.check_floor({"L2": 0.79, "L3": 0.46, "L4": 0.26}, 0.15, "warm start x")


def test_sft_goes_on_until_every_level_reaches_the_floor():
    """The SFT stop rule: the target overall is not enough while a level is under the floor."""
    from hadw.train.sft import below_floor

    entry = {"sft/accuracy": 0.33, "sft/acc_L2": 0.84, "sft/acc_L3": 0.09, "sft/acc_L4": 0.15}
    assert below_floor(entry, 0.15) == {"L3": 0.09}
    assert below_floor(entry, 0.0) == {}


def test_a_cached_start_is_reused_only_for_its_request(tmp_path):
    folder = tmp_path / "warm_start"
    shutil.copytree(W.SHIPPED_DIR / W.DEMO_WARM_START, folder)
    request = {"task": "sums", "seed": 0, "target": 0.3}
    W.write_record(folder, request, {"level_accuracy": {"L2": 0.8}})
    assert W.reusable(folder, request) is not None
    assert W.reusable(folder, {**request, "seed": 1}) is None  # another seed: not this start
    assert W.reusable(folder, {**request, "target": 0.45}) is None
    (folder / "config.json").write_text((folder / "config.json").read_text() + " ")
    assert W.reusable(folder, request) is None  # changed since it was built


def test_demo_refuses_a_warm_start_folder_it_did_not_build(tmp_path):
    from hadw.experiments.demo import warm_start

    mine = tmp_path / "warm_start"
    mine.mkdir()
    (mine / "config.json").write_text("{}")  # a folder that exists: before, it was reused as the warm start
    with pytest.raises(W.WarmStartError, match="did not build it"):
        warm_start(tmp_path, None, 0.3, max_steps=1)
    assert (mine / "config.json").read_text() == "{}"


def test_demo_never_removes_a_run_folder_it_did_not_make(tmp_path):
    """`hadw demo --out-dir DIR` used to rmtree DIR/grpo whenever it held a metrics.jsonl: a user's own run."""
    from hadw.errors import UserError
    from hadw.experiments.demo import DEMO_MARKER, claim_demo_run

    users = tmp_path / "grpo"
    users.mkdir()
    (users / "metrics.jsonl").write_text('{"step": 1}\n')
    (users / "notes.md").write_text("my notes")
    with pytest.raises(UserError, match="not made by hadw demo"):
        claim_demo_run(users)
    assert (users / "notes.md").read_text() == "my notes"

    ours = tmp_path / "grpo_hadw"
    claim_demo_run(ours)
    assert (ours / DEMO_MARKER).is_file()
    (ours / "metrics.jsonl").write_text('{"step": 1}\n')
    claim_demo_run(ours)  # an earlier demo's arm: replaced
    assert sorted(p.name for p in ours.iterdir()) == [DEMO_MARKER]


def test_package_data_lists_the_shipped_files():
    """A wheel carries the starts: pyproject's package-data globs match every shipped file."""
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[1]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["hadw.train"]
    train = root / "src" / "hadw" / "train"
    for path in (train / "warm_starts").rglob("*"):
        if path.is_file():
            rel = str(path.relative_to(train))
            assert any(fnmatch.fnmatch(rel, g) for g in globs), rel


def test_demo_rebuild_never_writes_into_a_users_random_init(tmp_path):
    """Issue 39, finding 6: `hadw demo --warm-start rebuild` saved its random init into OUT/random_init, replacing a
    folder of the user's there (weights and config) without a word; it builds it in a scratch folder now."""
    from hadw.experiments.demo import warm_start

    users = tmp_path / "random_init"
    users.mkdir()
    (users / "config.json").write_text('{"mine": 1}')
    with pytest.raises(W.WarmStartError, match="below the floor"):  # 1 step reaches no floor: refused after it
        warm_start(tmp_path, None, target=2.0, max_steps=1, log=lambda line: None)
    assert [p.name for p in users.iterdir()] == ["config.json"] and (users / "config.json").read_text() == '{"mine": 1}'


@pytest.mark.parametrize("added", ["notes.md", "subfolder", "link"])
def test_demo_never_removes_a_warm_start_folder_holding_more_than_its_record_lists(tmp_path, added):
    """A warm_start/ folder with a record (copied in, or hadw's own with the user's files added) was rmtree'd after
    SFT whatever else it held; now only exactly what hadw built is replaced, checked before SFT."""
    from hadw.experiments.demo import warm_start

    folder = tmp_path / "warm_start"
    shutil.copytree(W.SHIPPED_DIR / W.DEMO_WARM_START, folder)
    W.write_record(folder, {"built": "for another request"}, {"level_accuracy": {}})  # as hadw leaves a start
    if added == "notes.md":
        (folder / "notes.md").write_text("mine")
    elif added == "subfolder":
        (folder / "old").mkdir()
    else:
        (folder / "extra.json").symlink_to(tmp_path / "elsewhere.json")
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(W.WarmStartError, match="hadw did not build it"):
        warm_start(tmp_path, None, target=2.0, max_steps=1, log=lambda line: None)
    assert sorted(p.name for p in folder.iterdir()) == before


def test_built_here_is_exactly_what_the_record_lists(tmp_path):
    folder = tmp_path / "warm_start"
    shutil.copytree(W.SHIPPED_DIR / W.DEMO_WARM_START, folder)
    assert not W.built_here(folder)  # no record
    W.write_record(folder, {"built": "here"}, {})
    assert W.built_here(folder)
    (folder / "notes.md").write_text("mine")
    assert not W.built_here(folder)


@pytest.mark.parametrize("planted", ["linked_added_tokens", "subfolder", "record"])
def test_a_shipped_start_with_a_link_a_subfolder_or_any_other_entry_is_refused(tmp_path, monkeypatch, planted):
    """Issue 39, finding 7: the check hashed regular files only, so a symlinked extra added_tokens.json (which changed
    the tokenizer) or a subfolder passed."""
    shipped = tmp_path / "warm_starts"
    shutil.copytree(W.SHIPPED_DIR, shipped)
    monkeypatch.setattr(W, "SHIPPED_DIR", shipped)
    folder = shipped / W.DEMO_WARM_START
    if planted == "linked_added_tokens":
        (tmp_path / "tokens.json").write_text('{"<extra>": 9999}')
        (folder / "added_tokens.json").symlink_to(tmp_path / "tokens.json")
    elif planted == "subfolder":
        (folder / "sub").mkdir()
    else:
        (folder / W.RECORD).write_text("{}")
    with pytest.raises(W.WarmStartError, match="should not"):
        W.resolve(W.DEMO_WARM_START)


@pytest.mark.parametrize(
    "manifest",
    [
        "{not json",
        '{"warm_starts": [{"name": "x", "levels": [1], "unknown_key": 1}]}',
        '{"starts": []}',
        '{"warm_starts": [7]}',
    ],
    ids=["not_json", "unknown_key", "no_list", "entry_not_an_object"],
)
def test_a_malformed_manifest_is_one_line_naming_it(tmp_path, monkeypatch, manifest):
    path = tmp_path / "manifest.json"
    path.write_text(manifest)
    monkeypatch.setattr(W, "MANIFEST", path)
    with pytest.raises(W.WarmStartError, match="manifest.json: not a usable warm-start manifest"):
        W.get(W.DEMO_WARM_START)


def test_a_shipped_start_that_is_a_link_is_refused_naming_the_link(tmp_path, monkeypatch):
    """Issue 49, finding 8: a start folder that is a symlink was reported as missing."""
    shipped = tmp_path / "warm_starts"
    shutil.copytree(W.SHIPPED_DIR, shipped)
    monkeypatch.setattr(W, "SHIPPED_DIR", shipped)
    folder = shipped / W.DEMO_WARM_START
    folder.rename(tmp_path / "elsewhere")
    folder.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(W.WarmStartError, match=rf"{folder} is a link \(to {tmp_path / 'elsewhere'}\), not a folder"):
        W.resolve(W.DEMO_WARM_START)
    folder.unlink()
    with pytest.raises(W.WarmStartError, match=rf"{folder} is missing"):  # really missing: still said so
        W.resolve(W.DEMO_WARM_START)
