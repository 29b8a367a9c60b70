"""Issue 31: every file hadw writes is its own. Output files of `hadw eval` (--samples / --json / --markdown) and
the reports of `hadw compare --out` never follow a link, are written to a temporary name and renamed, and
replace an existing file only when hadw wrote it (or with --overwrite); a run folder's own files are never an
eval output. Each case runs the real `hadw` entry point (the bad-input matrix's runner) and is counted in the
matrix summary line; every case also checks that the user's file is intact."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hadw.rollout import build_tiny_model
from hadw.safe_files import atomic_write_bytes, owned_json, owned_markdown
from tests.test_bad_inputs import _invoke_bounded, classify

PRECIOUS = "my own notes\n"
EVAL = ["--data", "task:sums", "--limit", "1", "--max-new-tokens", "2", "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """A tiny model, a run folder (as `hadw train` leaves it: lock, config, metrics, samples) and the user's files."""
    d = tmp_path_factory.mktemp("own")
    w = {"dir": d}
    w["model"] = build_tiny_model(
        d / "tiny", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64, seed=0
    )
    run = d / "run"
    run.mkdir()
    (run / ".lock").write_text("")
    (run / "metrics.jsonl").write_text('{"step": 0, "reward/mean": 0.5}\n')
    (run / "samples.jsonl").write_text('{"step": 0, "prompt": "1+1", "completion": "2"}\n')
    w["run"] = run
    return w


def _victim(d: Path) -> Path:
    victim = d / "victim.txt"
    victim.write_text(PRECIOUS)
    return victim


def _case(world, tmp_path, monkeypatch, record_outcome, request, args, expect, needles=(), cwd=None):
    monkeypatch.chdir(cwd or tmp_path)
    result = _invoke_bounded([str(a) for a in args])
    outcome = classify(result, expect)
    calls = getattr(request.node, "hadw_calls", 0) + 1  # a test with several commands: one matrix case each
    request.node.hadw_calls = calls
    record_outcome(request.node.name + (f"#{calls}" if calls > 1 else ""), outcome)
    detail = None if result is None else (result.exit_code, result.stdout[-1500:], result.stderr[-1500:])
    assert outcome == expect, (outcome, detail)
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)
    return result


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["plain", "overwrite"])
@pytest.mark.parametrize("name", ["samples.jsonl", "metrics.jsonl"])
def test_eval_never_replaces_a_run_folders_own_files(world, tmp_path, monkeypatch, record_outcome, request, name,
                                                     overwrite):  # fmt: skip
    """The trainer's hint `hadw eval RUN --samples samples.jsonl`, run inside the run folder."""
    run = world["run"]
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    option = "--samples" if name == "samples.jsonl" else "--json"
    args = ["eval", world["model"], *EVAL, option, name, *overwrite]
    _case(world, tmp_path, monkeypatch, record_outcome, request, args, "one-line", [option, name, "hadw train"], run)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


@pytest.mark.parametrize("option", ["--samples", "--json", "--markdown"])
def test_eval_refuses_a_file_it_did_not_write(world, tmp_path, monkeypatch, record_outcome, request, option):
    mine = _victim(tmp_path)
    args = ["eval", world["model"], *EVAL, option, mine]
    _case(world, tmp_path, monkeypatch, record_outcome, request, args, "one-line", [option, "--overwrite"])
    assert mine.read_text() == PRECIOUS


@pytest.mark.parametrize("option", ["--samples", "--json", "--markdown"])
def test_eval_never_writes_through_a_link(world, tmp_path, monkeypatch, record_outcome, request, option):
    victim = _victim(tmp_path)
    link = tmp_path / "out.file"
    link.symlink_to(victim)
    args = ["eval", world["model"], *EVAL, option, link, "--overwrite"]
    _case(world, tmp_path, monkeypatch, record_outcome, request, args, "one-line", [option, "symbolic link"])
    assert victim.read_text() == PRECIOUS and link.is_symlink()


def test_eval_replaces_its_own_outputs_and_overwrite_replaces_others(world, tmp_path, monkeypatch, record_outcome,
                                                                     request):  # fmt: skip
    outputs = {"--samples": tmp_path / "s.jsonl", "--json": tmp_path / "r.json", "--markdown": tmp_path / "r.md"}
    args = ["eval", world["model"], *EVAL, *[str(x) for pair in outputs.items() for x in pair]]
    _case(world, tmp_path, monkeypatch, record_outcome, request, args, "accepted")
    _case(world, tmp_path, monkeypatch, record_outcome, request, args, "accepted")  # its own files: replaced
    assert json.loads(outputs["--json"].read_text())["written_by"] == "hadw eval"
    assert outputs["--markdown"].read_text().startswith("<!-- written by hadw eval -->\n# ")
    assert json.loads(outputs["--samples"].read_text().splitlines()[0])["source"] == "sums"
    outputs["--json"].write_text(PRECIOUS)  # now the user's: refused, then replaced with --overwrite
    _case(world, tmp_path, monkeypatch, record_outcome, request, args, "one-line", ["--json"])
    assert outputs["--json"].read_text() == PRECIOUS
    _case(world, tmp_path, monkeypatch, record_outcome, request, [*args, "--overwrite"], "accepted")
    assert json.loads(outputs["--json"].read_text())["written_by"] == "hadw eval"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _finished_runs(out: Path) -> None:
    """Two finished runs of arm g (reused by `hadw compare`, nothing trains), so compare writes every report."""
    for seed, accuracy in ((0, 0.5), (1, 0.7)):
        run_dir = out / "g" / f"seed{seed}"
        (run_dir / "final_model").mkdir(parents=True)
        (run_dir / "final_eval.json").write_text(json.dumps({"all": {"count": 4.0, "greedy": accuracy}}))
        (run_dir / "metrics.jsonl").write_text('{"step": 1, "critic/score/mean": 0.5, "hadw/anchor": 0.5}\n')


COMPARE = ["compare", "-a", "g:", "--seeds", "0,1", "--curve", "critic/score/mean"]


@pytest.mark.parametrize("name", ["compare_manifest.json", "compare.md", "compare.json"])
@pytest.mark.parametrize("kind", ["link", "user_file"])
def test_compare_reports_are_its_own(world, tmp_path, monkeypatch, record_outcome, request, name, kind):
    out = tmp_path / "cmp"
    _finished_runs(out)
    victim = _victim(tmp_path)
    if kind == "link":
        (out / name).symlink_to(victim)
    else:
        (out / name).write_text(PRECIOUS)
    needles = [name, "symbolic link" if kind == "link" else "--overwrite"]
    _case(world, tmp_path, monkeypatch, record_outcome, request, [*COMPARE, "-o", out], "one-line", needles)
    assert victim.read_text() == PRECIOUS
    assert (out / name).is_symlink() if kind == "link" else (out / name).read_text() == PRECIOUS
    if kind == "user_file":  # --overwrite replaces the user's file (a link stays refused)
        _case(world, tmp_path, monkeypatch, record_outcome, request, [*COMPARE, "-o", out, "--overwrite"], "accepted")
        assert (out / name).read_text() != PRECIOUS


def test_compare_replaces_its_own_reports(world, tmp_path, monkeypatch, record_outcome, request):
    out = tmp_path / "cmp"
    _finished_runs(out)
    for _ in range(2):
        _case(world, tmp_path, monkeypatch, record_outcome, request, [*COMPARE, "-o", out], "accepted")
    for name in ("compare_manifest.json", "compare.json"):
        assert json.loads((out / name).read_text())["written_by"] == "hadw compare"
    assert (out / "compare.md").read_text().startswith("<!-- written by hadw compare -->\n# Comparison")


def test_compare_recognises_its_reports_old_and_new():
    from hadw.experiments.compare import COMPARE_JSON, COMPARE_MD, MANIFEST, owned_report

    assert owned_report(MANIFEST)(b'{\n "config": null,\n "overrides": []')  # before the marker
    assert owned_report(MANIFEST)(b'{\n "written_by": "hadw compare",\n "config": null')
    assert owned_report(COMPARE_MD)(b"# Comparison over seeds [0, 1]")
    assert owned_report(COMPARE_JSON)(b'{\n "baseline": "grpo"')
    assert not owned_report(COMPARE_JSON)(b'{\n "written_by": "hadw eval"')
    assert not owned_report(COMPARE_MD)(PRECIOUS.encode())
    assert owned_json("eval")(b'{\n "written_by": "hadw eval", "model": "x"}')
    assert not owned_json("eval")(b'{"note": "written_by": "hadw eval"}')
    assert owned_markdown("eval")(b"<!-- written by hadw eval -->\n# x")


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    target.write_text(PRECIOUS)

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        atomic_write_bytes(target, b"new")
    assert target.read_text() == PRECIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


@pytest.mark.parametrize("kind", ["model", "link"])
def test_sft_never_writes_over_an_existing_model(world, tmp_path, monkeypatch, record_outcome, request, kind):
    """Issue 35: `hadw sft OUT` saved its model over whatever OUT held."""
    out = tmp_path / "out"
    if kind == "model":
        out.mkdir()
        (out / "config.json").write_text('{"model_type": "mine"}')
        (out / "notes.txt").write_text(PRECIOUS)
    else:
        (tmp_path / "elsewhere").mkdir()
        out.symlink_to(tmp_path / "elsewhere")
    needles = ["symbolic link"] if kind == "link" else ["already holds files", "--overwrite"]
    _case(world, tmp_path, monkeypatch, record_outcome, request, ["sft", out, "--max-steps", "1"], "one-line", needles)
    if kind == "model":
        assert sorted(p.name for p in out.iterdir()) == ["config.json", "notes.txt"]
        assert (out / "config.json").read_text() == '{"model_type": "mine"}'
    else:
        assert not list((tmp_path / "elsewhere").iterdir())


def test_a_figure_is_never_written_through_a_link(world, tmp_path, monkeypatch, record_outcome, request):
    run = tmp_path / "g" / "seed0"
    _finished_runs(tmp_path)
    victim = _victim(tmp_path)
    (tmp_path / "curves.png").symlink_to(victim)
    args = ["plot", run, "--out", tmp_path / "curves.png"]
    _case(world, tmp_path, monkeypatch, record_outcome, request, args, "one-line", ["curves.png", "symbolic link"])
    assert victim.read_text() == PRECIOUS
    (tmp_path / "curves.png").unlink()
    _case(world, tmp_path, monkeypatch, record_outcome, request, args, "accepted")  # the same plot, no link: drawn
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")


# Issue 39, finding 2: every figure hadw writes follows the rules above (no link, no special file, no user's file
# without --overwrite), checked before the work; a figure it drew is recognised by its mark and replaced.
PAPER = b"%PDF-1.5\n% my paper, not a figure hadw drew\n"


def _figure_commands(world, tmp_path: Path, target: Path) -> dict[str, list]:
    """Each command that writes a figure, writing one at `target` (bias and compare: the name they give it)."""
    return {
        "plot": ["plot", tmp_path / "g" / "seed0", "--out", target],
        "sim": ["sim", "--steps", "2", "--seeds", "0", "--plot", target],
        "bias": ["bias", "plot", "--out-dir", target.parent, "--points", "2", "-G", "2"],
        "probe": ["probe", world["model"], "--data", "task:sums", "--limit", "1", "--png", target],
        "compare": [*COMPARE, "-o", tmp_path],
    }


FIGURE_NAMES = {"bias": "bias_binary.png", "compare": "compare.png"}


@pytest.mark.parametrize("command", ["plot", "sim", "bias", "probe", "compare"])
@pytest.mark.parametrize("kind", ["fifo", "device", "user_file", "folder"])
def test_a_figure_never_replaces_a_special_file_or_a_users_file(world, tmp_path, monkeypatch, record_outcome,
                                                                 request, command, kind):  # fmt: skip
    _finished_runs(tmp_path)
    target = tmp_path / FIGURE_NAMES.get(command, "paper.png")
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "device":  # a null device of our own (never the machine's /dev/null), where we may make one
        try:
            os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("making a device node needs CAP_MKNOD")
    elif kind == "folder":
        target.mkdir()
    else:
        target.write_bytes(PAPER)
    needles = [target.name, "special file" if kind != "user_file" else "--overwrite"]
    args = _figure_commands(world, tmp_path, target)[command]
    _case(world, tmp_path, monkeypatch, record_outcome, request, args, "one-line", needles)
    if kind == "fifo":
        assert target.is_fifo()
    elif kind == "device":
        assert target.is_char_device()
    elif kind == "folder":
        assert target.is_dir() and not any(target.iterdir())
    else:
        assert target.read_bytes() == PAPER


@pytest.mark.parametrize("suffix", [".png", ".pdf", ".svg"])
def test_hadw_plot_replaces_its_own_figure_and_a_users_file_only_with_overwrite(
    world, tmp_path, monkeypatch, record_outcome, request, suffix
):
    _finished_runs(tmp_path)
    out = tmp_path / f"paper{suffix}"
    out.write_bytes(PAPER)
    args = ["plot", tmp_path / "g" / "seed0", "--out", out]
    _case(world, tmp_path, monkeypatch, record_outcome, request, [*args, "--overwrite"], "accepted")
    assert out.read_bytes() != PAPER
    _case(world, tmp_path, monkeypatch, record_outcome, request, args, "accepted")  # its own figure: replaced


@pytest.mark.parametrize("out", ["curves.jsonl", "curves"])
def test_hadw_plot_refuses_a_file_that_is_not_a_figure_format(world, tmp_path, monkeypatch, record_outcome, request,
                                                               out):  # fmt: skip
    """`--out x.jsonl` was matplotlib's traceback. (A device such as /dev/null is refused as a special file: the FIFO
    case above; never tried on the real /dev/null, which a regression run as root would replace.)"""
    _finished_runs(tmp_path)
    args = ["plot", tmp_path / "g" / "seed0", "--out", out]
    _case(world, tmp_path, monkeypatch, record_outcome, request, args, "one-line", ["--out", "allowed: .png"])


# Issue 39, finding 3: `hadw demo --out-dir D` checks each result file before the warm start and the training.
@pytest.mark.parametrize("name", ["demo_results.json", "demo_results.md", "demo_curves.png"])
@pytest.mark.parametrize("kind", ["link", "user_file"])
def test_demo_checks_its_result_files_before_training(world, tmp_path, monkeypatch, record_outcome, request, name,
                                                      kind):  # fmt: skip
    out = tmp_path / "demo"
    out.mkdir()
    victim = _victim(tmp_path)
    if kind == "link":
        (out / name).symlink_to(victim)
    else:
        (out / name).write_text(PRECIOUS)
    needles = [name, "symbolic link" if kind == "link" else "--overwrite"]
    _case(world, tmp_path, monkeypatch, record_outcome, request, ["demo", "--out-dir", out], "one-line", needles)
    assert victim.read_text() == PRECIOUS
    assert sorted(p.name for p in out.iterdir()) == [name]  # nothing trained, nothing else written


def test_demo_recognises_its_result_files_old_and_new(tmp_path):
    from hadw.experiments.demo import check_demo_outputs

    (tmp_path / "demo_results.json").write_text('{\n "initial": {}}')  # as a version before the marker wrote it
    (tmp_path / "demo_results.md").write_text("<!-- written by hadw demo -->\n| level | n | warm start |\n")
    check_demo_outputs(tmp_path, overwrite=False)
