"""Bad input through the `hadw train` command: every case exits 2 with one line that names the file / key /
value, and no traceback. Most cases fail in config or data validation, before any model is loaded
(in-process, typer's CliRunner); a few run the real `python -m hadw.cli` to check the exit-code and
traceback contract end to end (HADW_DEBUG=1 brings the traceback back)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import click.testing
import pytest
from typer.testing import CliRunner

from hadw.cli import build_app
from hadw.rollout import build_tiny_model
from hadw.train import trainer as trainer_module
from hadw.train.run_dir import RunLock

runner = CliRunner()
REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Every bad file of the table, written once."""
    d = tmp_path_factory.mktemp("bad")
    f: dict[str, Path] = {"dir": d}
    f["model"] = build_tiny_model(
        d / "tiny", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64, seed=0
    )

    def write(name: str, data: str | bytes) -> None:
        path = d / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        f[name] = path

    write("bad_syntax.yaml", "train:\n  steps: [1, 2\nmodel: {}\n")
    write("list.yaml", "- train\n- steps\n")
    write("string.yaml", "just a sentence\n")
    write("latin1.yaml", "train:\n  output_dir: caf\xe9\n".encode("latin-1"))
    write("typo.yaml", "hadw:\n  anchr: window\n")
    write("section.yaml", "trainer:\n  steps: 3\n")
    write("bad_value.yaml", "optim:\n  lr: -1\n")
    write("latin1.jsonl", b'{"problem": "1+1", "answer": "2"}\n{"problem": "caf\xe9", "answer": "3"}\n')
    write("bad_json.jsonl", '{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": "4"}\n{"problem": \n')
    write("array_row.jsonl", "[1, 2, 3]\n")
    write("no_fields.jsonl", '{"problem": "1+1", "answer": "2"}\n{"colour": "blue"}\n')
    write("empty.jsonl", "")
    write("fake.parquet", "this is not parquet\n")
    write("data.txt", "1+1=2\n")
    write("model_file", "not a model\n")
    (d / "empty_dir").mkdir()
    f["empty_dir"] = d / "empty_dir"
    (d / "no_config_model").mkdir()
    (d / "no_config_model" / "weights.bin").write_bytes(b"\0" * 16)
    f["no_config_model"] = d / "no_config_model"
    (d / "broken_model").mkdir()
    (d / "broken_model" / "config.json").write_text("{ not json")
    f["broken_model"] = d / "broken_model"
    return f


def _run(args: list[str]):
    return runner.invoke(build_app(), args)


def _assert_one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# (id, args with {placeholders} for the files fixture, expected substrings of the one line)
CONFIG_CASES = [
    ("yaml_syntax", ["{bad_syntax.yaml}"], ["bad_syntax.yaml:3:", "not valid YAML"]),
    ("yaml_list", ["{list.yaml}"], ["list.yaml", "expected a mapping", "list"]),
    ("yaml_string", ["{string.yaml}"], ["string.yaml", "expected a mapping", "str"]),
    ("yaml_not_utf8", ["{latin1.yaml}"], ["latin1.yaml:2", "not UTF-8"]),
    ("yaml_missing", ["{dir}/nope.yaml"], ["config file not found", "nope.yaml"]),
    ("yaml_is_dir", ["{empty_dir}", "train.steps=1"], ["empty_dir", "directory"]),
    ("yaml_typo", ["{typo.yaml}"], ["hadw.anchr", "did you mean 'hadw.anchor'"]),
    ("yaml_section", ["{section.yaml}"], ["trainer"]),
    ("yaml_bad_value", ["{bad_value.yaml}"], ["optim.lr=-1"]),
    ("override_typo", ["hadw.lamda=1.0"], ["hadw.lamda", "hadw.lam"]),
    ("override_not_number", ["train.steps=many"], ["train.steps"]),
    ("override_bool", ["hadw.enabled=maybe"], ["hadw.enabled"]),
    ("lr_zero", ["optim.lr=0"], ["optim.lr=0"]),
    ("lr_negative", ["optim.lr=-0.001"], ["optim.lr=-0.001"]),
    ("clip_low_negative", ["algorithm.clip_low=-0.1"], ["algorithm.clip_low=-0.1"]),
    ("clip_high_negative", ["algorithm.clip_high=-1"], ["algorithm.clip_high=-1"]),
    ("grad_clip_negative", ["optim.grad_clip=-1"], ["optim.grad_clip=-1"]),
    ("kl_negative", ["algorithm.kl_coef=-0.5"], ["algorithm.kl_coef=-0.5"]),
    ("checkpoint_every_negative", ["checkpoint.every=-1"], ["checkpoint.every=-1"]),
    ("keep_last_zero", ["checkpoint.keep_last=0"], ["checkpoint.keep_last=0"]),
    ("kalman_m_zero", ["hadw.kalman_m=0"], ["hadw.kalman_m=0"]),
    ("weight_decay_negative", ["optim.weight_decay=-0.1"], ["optim.weight_decay=-0.1"]),
    ("beta_one", ["optim.betas=[0.9,1.0]"], ["optim.betas", "[0, 1)"]),
    ("beta_negative", ["optim.betas=[-0.1,0.9]"], ["optim.betas", "[0, 1)"]),
    ("betas_one_value", ["optim.betas=[0.9]"], ["optim.betas"]),
    ("top_k_negative", ["rollout.top_k=-1"], ["rollout.top_k=-1"]),
    ("unknown_decoder", ["rollout.decoder=vllm"], ["rollout.decoder='vllm'", "fused"]),
    ("timeout_zero", ["reward.timeout_s=0"], ["reward.timeout_s=0"]),
    ("timeout_negative", ["reward.timeout_s=-3"], ["reward.timeout_s=-3"]),
    ("unknown_task", ["data.source=task:calculus"], ["data.source='task:calculus'", "task:addition"]),
    ("unknown_template", ["data.template=fancy"], ["data.template='fancy'", "plain"]),
    ("unknown_level", ["data.levels=[9]"], ["data.levels=[9]", "task 'sums'", "[1, 2, 3, 4, 5]"]),
    ("unknown_layout", ["data.layout=csv"], ["data.layout='csv'"]),
    ("unknown_preset", ["algorithm.preset=ppo"], ["algorithm.preset='ppo'", "grpo"]),
    ("unknown_anchor", ["hadw.anchor=kalmann"], ["hadw.anchor='kalmann'"]),
    ("unknown_reward", ["reward.functions=[nope]", "reward.correctness=nope"], ["reward.functions[0]='nope'"]),
    ("correctness_not_a_function", ["reward.correctness=math"], ["reward.correctness='math'"]),
    ("weights_length", ["reward.weights=[1,2]"], ["reward.weights"]),
    ("group_size_one", ["rollout.group_size=1"], ["rollout.group_size=1"]),
    ("temperature_negative", ["rollout.temperature=-1"], ["rollout.temperature=-1"]),
    ("mini_batch_too_big", ["train.mini_batch_prompts=100"], ["train.mini_batch_prompts=100"]),
    ("eval_size_negative", ["data.eval_size=-1"], ["data.eval_size=-1"]),
    ("max_prompt_tokens_negative", ["data.max_prompt_tokens=-5"], ["data.max_prompt_tokens=-5"]),
    ("eval_every_negative", ["train.eval_every=-1"], ["train.eval_every=-1"]),
    ("sample_every_negative", ["logging.sample_every=-1"], ["logging.sample_every=-1"]),
    ("lambda_zero", ["hadw.lam=0"], ["hadw.lam=0"]),
    ("window_zero", ["hadw.window_k=0"], ["hadw.window_k=0"]),
    ("anchor_base_unknown", ["hadw.anchor=per_level", "hadw.anchor_base=median"], ["hadw.anchor_base='median'"]),
    ("prompt_visits_zero", ["hadw.anchor=per_prompt", "hadw.prompt_visits=0"], ["hadw.prompt_visits=0"]),
    ("warmup_negative", ["optim.warmup_steps=-1"], ["optim.warmup_steps=-1"]),
    ("dtype", ["model.dtype=float64"], ["model.dtype='float64'"]),
    ("limit_zero", ["data.limit=0"], ["data.limit=0"]),
    ("empty_output_dir", ["train.output_dir= "], ["train.output_dir"]),
    ("empty_source", ["data.source= "], ["data.source"]),
]

MODEL_CASES = [
    ("model_missing", ["model.path={dir}/no_model"], ["model.path=", "no_model", "no such folder"]),
    ("model_empty_dir", ["model.path={empty_dir}"], ["model.path=", "empty_dir", "not a model folder"]),
    ("model_is_file", ["model.path={model_file}"], ["model.path=", "model_file", "not a model folder"]),
    ("model_no_config", ["model.path={no_config_model}"], ["model.path=", "no_config_model"]),
    ("model_broken_config", ["model.path={broken_model}"], ["model.path=", "broken_model", "cannot load"]),
]

DATA_CASES = [
    ("data_missing", ["data.source={dir}/missing.jsonl"], ["missing.jsonl", "nor an existing file or folder"]),
    ("data_not_utf8", ["data.source={latin1.jsonl}"], ["latin1.jsonl:2", "not UTF-8"]),
    ("data_bad_json", ["data.source={bad_json.jsonl}"], ["bad_json.jsonl:3", "bad JSON"]),
    ("data_array_row", ["data.source={array_row.jsonl}"], ["array_row.jsonl:1", "JSON object"]),
    ("data_row_without_fields", ["data.source={no_fields.jsonl}"], ["no_fields.jsonl:2"]),
    ("data_empty_file", ["data.source={empty.jsonl}"], ["empty.jsonl", "has no rows"]),
    ("data_fake_parquet", ["data.source={fake.parquet}"], ["fake.parquet", "not a parquet file"]),
    ("data_empty_folder", ["data.source={empty_dir}"], ["empty_dir", "empty folder"]),
    ("data_unknown_type", ["data.source={data.txt}"], ["data.txt", "unknown file type"]),
    ("data_unknown_benchmark", ["data.source=benchmark:mmlu"], ["mmlu", "unknown benchmark"]),
]


def _fill(args: list[str], files: dict[str, Path]) -> list[str]:
    out = []
    for arg in args:
        for name, path in files.items():
            arg = arg.replace("{" + name + "}", str(path))
        out.append(arg)
    return out


def _base(files, run: Path) -> list[str]:
    return [
        f"model.path={files['model']}",
        f"train.output_dir={run}",
        "train.steps=1",
        "train.prompts_per_step=2",
        "train.mini_batch_prompts=1",
        "rollout.group_size=2",
        "rollout.max_new_tokens=2",
        "data.chat_template=never",
        "data.eval_size=0",
        "logging.progress=false",
        "train.num_threads=1",
    ]


@pytest.mark.parametrize(("args", "needles"), [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_config_errors_are_one_line_exit_2(files, args, needles):
    _assert_one_line_error(_run(["train", *_fill(args, files)]), *needles)


@pytest.mark.parametrize(
    ("args", "needles"), [c[1:] for c in MODEL_CASES + DATA_CASES], ids=[c[0] for c in MODEL_CASES + DATA_CASES]
)
def test_path_and_data_errors_are_one_line_exit_2(files, tmp_path, args, needles):
    result = _run(["train", *_base(files, tmp_path / "run"), *_fill(args, files)])
    _assert_one_line_error(result, *needles)


def test_resume_without_checkpoint(files, tmp_path):
    result = _run(["train", *_base(files, tmp_path / "run"), "--resume"])
    _assert_one_line_error(result, "--resume", "no checkpoint", str(tmp_path / "run"))


def test_resume_and_overwrite_together(files, tmp_path):
    result = _run(["train", *_base(files, tmp_path / "run"), "--resume", "--overwrite"])
    _assert_one_line_error(result, "--resume", "--overwrite")


def test_output_dir_below_a_file(files, tmp_path):
    (tmp_path / "a_file").write_text("x")
    result = _run(["train", *_base(files, tmp_path / "a_file" / "run")])
    _assert_one_line_error(result, "train.output_dir=", "a_file")


def test_output_dir_in_use_by_another_process(files, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    lock = RunLock(run)  # this process holds it, as a running `hadw train` would
    try:
        result = _run(["train", *_base(files, run)])
    finally:
        lock.release()
    _assert_one_line_error(result, f"train.output_dir={run}", f"in use by pid {os.getpid()}")


def test_a_folder_with_a_run_is_not_reused_silently(files, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    _assert_one_line_error(
        _run(["train", *_base(files, run)]), f"train.output_dir={run}", "already holds a run", "--resume", "--overwrite"
    )


@pytest.mark.parametrize(
    ("code", "needle"), [(errno.ENOSPC, "No space left on device"), (errno.EACCES, "Permission denied")]
)
def test_full_disk_and_permission_denied_are_one_line(files, tmp_path, monkeypatch, code, needle):
    def failing(*args, **kwargs):
        raise OSError(code, os.strerror(code), str(tmp_path / "run" / "final_model" / "model.safetensors"))

    monkeypatch.setattr(trainer_module.Trainer, "_save_final_model", failing)
    result = _run(["train", *_base(files, tmp_path / "run")])
    _assert_one_line_error(result, needle, "final_model")


class SafetensorError(Exception):
    """What safetensors raises (not an OSError)."""


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/0: "
                     "file write failed"),  # torch.save
        SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left '
                        'on device" })'),  # safetensors
        # issue 39: what torch 2.13's torch.save raised on a real full file system (a 64 KiB tmpfs): a short write
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"),
    ],
    ids=["torch_save", "safetensors", "torch_save_short_write"],
)  # fmt: skip
def test_a_full_disk_while_checkpointing_is_one_line(files, tmp_path, monkeypatch, error):
    """Issue 35: a full disk during a checkpoint printed an 85-109-line traceback (the writers do not raise OSError)."""

    def full(*args, **kwargs):
        raise error

    monkeypatch.setattr(trainer_module, "save_checkpoint", full)
    result = _run(["train", *_base(files, tmp_path / "run")])
    _assert_one_line_error(result, "the disk is full", "checkpoint-000001", "resume with --resume")


def test_the_real_command_exits_2_with_one_line_and_hadw_debug_brings_the_traceback_back(files):
    environ = os.environ | {"PYTHONPATH": str(REPO_ROOT / "src")}
    command = [sys.executable, "-m", "hadw.cli", "train"]
    plain = subprocess.Popen(
        [*command, str(files["bad_syntax.yaml"])],
        env=environ,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    debug = subprocess.Popen(
        [*command, "optim.lr=0"],
        env=environ | {"HADW_DEBUG": "1"},
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )  # both at once: start-up dominates
    _, err = plain.communicate(timeout=180)
    assert plain.returncode == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "bad_syntax.yaml:" in lines[0], err
    _, err = debug.communicate(timeout=180)
    assert debug.returncode != 0
    assert "Traceback" in err and "ConfigError" in err


def test_a_bom_is_accepted_in_yaml_and_jsonl(files, tmp_path):
    config = tmp_path / "bom.yaml"
    config.write_bytes("\ufefftrain:\n  steps: 1\n".encode())
    data = tmp_path / "bom.jsonl"
    data.write_bytes(("\ufeff" + json.dumps({"problem": "1+1", "answer": "2"}) + "\n").encode() * 1)
    result = _run(["train", str(config), *_base(files, tmp_path / "run"), f"data.source={data}"])
    assert result.exit_code == 0, result.output


def test_an_option_value_with_a_newline_is_kept_exactly(files, tmp_path):
    """Issue 35: a control character in a command-line value is never changed silently. Typer keeps an option's
    value as given (a `key=value` override, parsed as YAML, is refused instead: the matrix's override_newline)."""
    out = tmp_path / "a\nb.json"
    result = _run(["eval", str(files["model"]), "-d", "task:sums", "--limit", "2", "--json", str(out)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert out.is_file() and json.loads(out.read_text())["model"] == str(files["model"])
    assert [p.name for p in tmp_path.iterdir()] == ["a\nb.json"]


def test_the_table_has_at_least_sixty_cases():
    assert len(CONFIG_CASES) + len(MODEL_CASES) + len(DATA_CASES) + 12 >= 60


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["eval", "{dir}/no_model", "--data", "task:addition"], ["MODEL", "no_model"]),
        (["eval", "{model}", "--data", "{dir}/missing.jsonl"], ["--data", "missing.jsonl"]),
        (["eval", "{model}", "--data", "{latin1.jsonl}"], ["latin1.jsonl:2", "not UTF-8"]),
        (["plot", "{dir}/no_run", "--out", "{dir}/curves.png"], ["no_run", "metrics.jsonl", "hadw train"]),
        (["plot", "{empty_dir}", "--out", "{dir}/curves.png"], ["empty_dir", "no training step"]),
    ],
    ids=["eval_model_missing", "eval_data_missing", "eval_data_not_utf8", "plot_run_missing", "plot_run_empty"],
)
def test_eval_path_errors_are_one_line_exit_2(files, args, needles):
    _assert_one_line_error(_run(_fill(args, files)), *needles)


# ==================================================================================================================
# Issue 23: the bad-input matrix. Every command, every family (config, overrides, data, model folders,
# checkpoints, rewards, eval / probe / compare / sim / bias / sft / plot / data arguments). Each case runs
# in-process under a 60 s alarm (a hang is an outcome, not a stuck suite) and is classified: one-line (exit 2,
# one line on stderr, no traceback), accepted (a case that must work: exit 0), traceback, silent (exit 0 where
# an error was due), hang, other. The session ends with a summary line counting cases by outcome (conftest.py).
# ==================================================================================================================
class _Hang(BaseException):
    """Raised by the alarm: the case ran past its time limit."""


HANG_S = float(os.environ.get("HADW_MATRIX_HANG_S", 60))


class _RealMain:
    """What the `hadw` console script runs (hadw.cli.main: usage errors as one line, not click's usage box),
    in a form CliRunner can invoke (it captures the output and the exit code)."""

    name = "hadw"

    def main(self, args=None, prog_name=None, **extra):
        from hadw.cli import main

        sys.argv = ["hadw", *(args or [])]
        main()


def _release_fifos(folder: Path) -> None:
    """Open every FIFO in folder for writing and close it: a reader blocked in open() (in C code, where no
    Python signal handler runs) gets end-of-file instead of waiting forever."""
    import contextlib

    for fifo in folder.glob("fifo.*"):
        with contextlib.suppress(OSError):  # ENXIO: no reader waiting, nothing to release
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _invoke_bounded(args: list[str], fifo_dir: Path | None = None):
    """CliRunner result of the real `hadw` entry point, or None when it ran past HANG_S seconds (an alarm
    interrupts Python code; a timer releases readers blocked on the matrix's FIFOs)."""
    import signal
    import threading
    import time

    def alarm(signum, frame):
        raise _Hang

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    releaser = threading.Timer(HANG_S, _release_fifos, [fifo_dir]) if fifo_dir else None
    if releaser:
        releaser.start()
    start = time.monotonic()
    try:
        result = click.testing.CliRunner().invoke(_RealMain(), args)  # type: ignore[arg-type]
        return None if time.monotonic() - start >= HANG_S else result
    except _Hang:
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if releaser:
            releaser.cancel()


def classify(result, expect: str) -> str:
    """The outcome of one case (see the section comment)."""
    if result is None or isinstance(result.exception, _Hang):
        return "hang"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return "traceback"
    if "Traceback" in result.output:
        return "traceback"
    if result.exit_code == 0:
        return "accepted" if expect == "accepted" else "silent"
    # warnings said before the error (a reward's first failure) are not part of it; the error is one line
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("warning:")]
    if result.exit_code == 2 and len(lines) == 1:
        return "one-line"
    return "other"


def _write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def _parquet(path: Path, columns: dict[str, list], rename: bool = False) -> None:
    """A parquet file of these columns; rename: strip the names, so "answer " becomes a second "answer" (pyarrow
    writes a table with a column name twice)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(columns)
    pq.write_table(table.rename_columns([n.strip() for n in table.column_names]) if rename else table, path)


def _model_variant(src: Path, dst: Path, edit) -> Path:
    import shutil

    shutil.copytree(src, dst)
    edit(dst)
    return dst


def _edit_config(**changes):
    def edit(d: Path) -> None:
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps(cfg | changes))

    return edit


def _no_tokenizer(d: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"):
        (d / name).unlink(missing_ok=True)


def _pickle_weights(d: Path) -> None:
    import pickle

    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(pickle.dumps({"weights": os.getcwd}))  # a pickled callable: code


@pytest.fixture(scope="module")
def mx(files, tmp_path_factory) -> dict[str, Path | str]:
    """The files, model folders and run folders of the matrix (placeholders {name} in the cases)."""
    import shutil

    import torch

    d = tmp_path_factory.mktemp("matrix")
    m: dict[str, Path | str] = dict(files)
    bomb = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i, name in enumerate("bcdefgh"):
        prev = "abcdefgh"[i]
        bomb.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    bomb.append("i: [" + ",".join(["*h"] * 9) + "]")
    m["bomb.yaml"] = _write(d / "bomb.yaml", "\n".join(bomb) + "\n")
    m["dup.yaml"] = _write(d / "dup.yaml", "train:\n  steps: 5\n  steps: 50\n")
    m["dup_section.yaml"] = _write(d / "dup_section.yaml", "optim:\n  lr: 0.1\nmodel: {}\noptim:\n  lr: 0.2\n")
    m["tabs.yaml"] = _write(d / "tabs.yaml", "train:\n\tsteps: 5\n")
    m["section_scalar.yaml"] = _write(d / "section_scalar.yaml", "model: 5\n")
    m["section_list.yaml"] = _write(d / "section_list.yaml", "train: [1, 2]\n")
    m["int_key.yaml"] = _write(d / "int_key.yaml", "1: 2\n")
    m["python_tag.yaml"] = _write(d / "python_tag.yaml", f"train: !!python/object/apply:os.system ['touch {d}/pwn']\n")
    m["deep.yaml"] = _write(d / "deep.yaml", "train: " + "[" * 20000 + "]" * 20000 + "\n")
    m["huge.yaml"] = _write(d / "huge.yaml", "# " + "x" * (2 << 20) + "\n")
    m["env.yaml"] = _write(d / "env.yaml", "train:\n  output_dir: 'runs/${oc.env:HOME}'\n")
    m["null_section.yaml"] = _write(d / "null_section.yaml", "train:\n")
    row = {"problem": "1+1", "answer": "2"}
    m["deep.jsonl"] = _write(d / "deep.jsonl", '{"problem": ' + "[" * 100_000 + "]" * 100_000 + ', "answer": "1"}\n')
    m["empty_prompts.jsonl"] = _write(
        d / "empty_prompts.jsonl", "".join(json.dumps({"problem": " ", "answer": str(i)}) + "\n" for i in range(8))
    )
    # issue 39: a lone surrogate (a traceback of the tokenizer) and an answer of more digits than a float holds
    # (changed without a word: 12345678901234567890.5 became 1.2345678901234567e+19)
    m["surrogate.jsonl"] = _write(d / "surrogate.jsonl", '{"problem": "1+1 \\ud800", "answer": "2"}\n' * 4)
    m["big_float.jsonl"] = _write(d / "big_float.jsonl", '{"problem": "1+1", "answer": 12345678901234567890.5}\n' * 4)
    m["script_dataset"] = d / "script_dataset"  # issue 39: a loading script was datasets' RuntimeError traceback
    _write(d / "script_dataset" / "script_dataset.py", f"open({str(d / 'pwned')!r}, 'w').write('ran')\n")
    _write(d / "script_dataset" / "train.jsonl", '{"problem": "1+1", "answer": "2"}\n')
    m["nan_level.jsonl"] = _write(d / "nan_level.jsonl", '{"problem": "1+1", "answer": "2", "level": NaN}\n' * 4)
    m["null_answer.jsonl"] = _write(d / "null_answer.jsonl", json.dumps({"problem": "1+1", "answer": None}) + "\n")
    m["two_answers.jsonl"] = _write(d / "two_answers.jsonl", json.dumps({"problem": "1+1", "answer": [1, 2]}) + "\n")
    m["data.csv"] = _write(d / "data.csv", "problem,answer\n1+1,2\n")
    # issue 49: rows sharing an id (per-problem pairing across runs went wrong), and chat turns before the question
    # that no chat template renders (the system turn vanished)
    ids = ["a", "b", "a", "c"]
    dup_rows = [json.dumps({"problem": f"{i}+1", "answer": "2", "id": u}) + "\n" for i, u in enumerate(ids)]
    m["dup_ids.jsonl"] = _write(d / "dup_ids.jsonl", "".join(dup_rows))
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1"}]
    m["compare_small"] = (
        f"model.path={files['model']},train.steps=1,train.prompts_per_step=2,train.mini_batch_prompts=1"
    )
    m["chat_rows.jsonl"] = _write(d / "chat_rows.jsonl", json.dumps({"prompt": chat, "answer": "2"}) + "\n")
    # issue 35: NaN / Infinity answers (JSON literals, a parquet float column), keys given twice, empty answers
    m["nan_answer.jsonl"] = _write(d / "nan_answer.jsonl", '{"problem": "1+1", "answer": NaN}\n' * 4)
    m["inf_answer.jsonl"] = _write(d / "inf_answer.jsonl", '{"q": "1+1", "a": [-Infinity]}\n' * 4)
    m["dup_key.jsonl"] = _write(d / "dup_key.jsonl", '{"problem": "1+1", "answer": "2", "answer": "3"}\n' * 4)
    m["empty_answers.jsonl"] = _write(
        d / "empty_answers.jsonl",
        "".join(json.dumps({"problem": f"{i}+1", "answer": " " * i}) + "\n" for i in range(8)),
    )
    some_empty = [json.dumps({"problem": f"{i}+1", "answer": "" if i == 2 else str(i + 1)}) + "\n" for i in range(8)]
    m["some_empty_answers.jsonl"] = _write(d / "some_empty_answers.jsonl", "".join(some_empty))
    # issue 35: one 20 MB prompt row took eval 150 s and 10.4 GB; 3 MB is far over the tiny model's 512 tokens
    long_rows = [{"problem": "1+1", "answer": "2"}, {"problem": "7" * (3 << 20), "answer": "7"}]
    m["long_prompt.jsonl"] = _write(d / "long_prompt.jsonl", "".join(json.dumps(r) + "\n" for r in long_rows))
    _parquet(d / "nan_answer.parquet", {"problem": ["1+1", "2+2", "3+3"], "answer": [2.0, float("nan"), 6.0]})
    _parquet(d / "dup_column.parquet", {"problem": ["1+1"], "answer": ["2"], "answer ": ["3"]}, rename=True)
    m["nan_answer.parquet"], m["dup_column.parquet"] = d / "nan_answer.parquet", d / "dup_column.parquet"
    m["array.json"] = _write(d / "array.json", json.dumps([row, row]) + "\n")
    m["binary.jsonl"] = _write(d / "binary.jsonl", bytes(range(256)) * 4)
    m["bad_hf_dir"] = d / "bad_hf_dir"
    _write(d / "bad_hf_dir" / "dataset_info.json", "{ not json")
    for name in ("fifo.jsonl", "fifo.yaml", "fifo.parquet"):
        os.mkfifo(d / name)
        m[name] = d / name
    tiny = files["model"]
    data = json.loads((tiny / "config.json").read_text())
    m["m_truncated"] = _model_variant(
        tiny,
        d / "m_truncated",
        lambda p: (p / "model.safetensors").write_bytes((p / "model.safetensors").read_bytes()[:200]),
    )
    m["m_garbage"] = _model_variant(
        tiny,
        d / "m_garbage",
        lambda p: (p / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage" + b"\0" * 64),
    )
    m["m_empty_weights"] = _model_variant(
        tiny, d / "m_empty_weights", lambda p: (p / "model.safetensors").write_bytes(b"")
    )
    m["m_mismatch"] = _model_variant(tiny, d / "m_mismatch", _edit_config(hidden_size=data["hidden_size"] * 2))
    m["m_vocab"] = _model_variant(tiny, d / "m_vocab", _edit_config(vocab_size=1_000_000_000))
    m["m_layers"] = _model_variant(tiny, d / "m_layers", _edit_config(num_hidden_layers=-1))
    m["m_type"] = _model_variant(tiny, d / "m_type", _edit_config(model_type="nonexistent_arch"))
    m["m_array"] = _model_variant(tiny, d / "m_array", lambda p: (p / "config.json").write_text("[1, 2]"))
    auto_map = {"AutoConfig": "modeling_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilModel"}
    remote_config = _edit_config(auto_map=auto_map, model_type="evil_remote")

    def remote_code(p: Path) -> None:
        # real remote code with a visible side effect: trusting it would import this file, which leaves `pwned`
        remote_config(p)
        (p / "modeling_evil.py").write_text(
            f"import pathlib\npathlib.Path({str(d / 'pwned')!r}).touch()\n"
            "from transformers import PretrainedConfig, PreTrainedModel\n\n\n"
            "class EvilConfig(PretrainedConfig):\n    model_type = 'evil_remote'\n\n\n"
            "class EvilModel(PreTrainedModel):\n    config_class = EvilConfig\n"
        )

    m["m_remote"] = _model_variant(tiny, d / "m_remote", remote_code)
    m["m_no_tokenizer"] = _model_variant(tiny, d / "m_no_tokenizer", _no_tokenizer)
    # issue 35: a chat template that never finishes (10^10 loop turns), and one that raises (a range over the sandbox's)
    loops = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    m["m_loop_template"] = _model_variant(
        tiny, d / "m_loop_template", lambda p: (p / "chat_template.jinja").write_text(loops)
    )
    m["m_raise_template"] = _model_variant(
        tiny, d / "m_raise_template", lambda p: (p / "chat_template.jinja").write_text("{{ range(10**6) }}")
    )
    m["m_pickle"] = _model_variant(tiny, d / "m_pickle", _pickle_weights)
    # a finished 1-step run with a checkpoint, copied and damaged once per case
    base_run = d / "base_run"
    m["base_run"] = base_run
    result = runner.invoke(build_app(), ["train", *_base(files, base_run)])
    assert result.exit_code == 0, result.output
    ckpt = "checkpoint-000001"

    def run_variant(name: str, edit) -> None:
        shutil.copytree(base_run, d / name, symlinks=True)
        edit(d / name)
        m[name] = d / name

    def tamper(edit):
        def apply(run: Path) -> None:
            path = run / ckpt / "trainer_state.pt"
            state = torch.load(path, weights_only=True)
            edit(state)
            torch.save(state, path)

        return apply

    def state_json(**changes):
        def apply(run: Path) -> None:
            path = run / ckpt / "state.json"
            path.write_text(json.dumps(json.loads(path.read_text()) | changes))

        return apply

    def truncate(run: Path) -> None:
        path = run / ckpt / "model" / "model.safetensors"
        path.write_bytes(path.read_bytes()[:300])

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {d}/pwned",))

    run_variant("r_truncated", truncate)
    run_variant("r_latest_latin1", lambda r: (r / "latest").write_bytes(b"checkpoint-00000\xe9"))
    # `latest` naming a checkpoint outside the run: a damaged one (r_truncated's), so a resume that followed it would
    # fail where the refused pointer falls back to the run's own complete checkpoint
    run_variant("r_latest_abs", lambda r: (r / "latest").write_text(str(d / "r_truncated" / ckpt)))
    run_variant("r_latest_up", lambda r: (r / "latest").write_text(f"../r_truncated/{ckpt}"))
    run_variant("r_state_garbage", lambda r: (r / ckpt / "state.json").write_text("{ nope"))
    run_variant("r_position", state_json(data_position=-1))
    run_variant("r_step", state_json(step="one"))
    run_variant("r_rng", tamper(lambda s: s["rng"].update(torch=torch.zeros(7))))
    run_variant(
        "r_exp_avg", tamper(lambda s: next(iter(s["optimizer"]["state"].values())).update(exp_avg=torch.zeros(3)))
    )
    run_variant("r_pickle", lambda r: torch.save({"optimizer": Payload()}, r / ckpt / "trainer_state.pt"))
    run_variant(
        "r_lock_link", lambda r: ((r / ".lock").unlink(missing_ok=True), (r / ".lock").symlink_to(d / "victim"))
    )
    run_variant("r_config_link", lambda r: ((r / "config.yaml").unlink(), (r / "config.yaml").symlink_to(d / "victim")))
    run_variant("r_no_latest_lr", lambda r: (r / "latest").unlink())
    run_variant("r_all_incomplete", lambda r: ((r / "latest").unlink(), (r / ckpt / "state.json").unlink()))
    _write(d / "victim", "precious\n")
    # runs for hadw plot
    m["p_no_step"] = d / "p_no_step"
    _write(d / "p_no_step" / "metrics.jsonl", '{"reward": 1}\n{"loss": "x"}\n')
    m["p_strings"] = d / "p_strings"
    _write(d / "p_strings" / "metrics.jsonl", '{"step": "one", "val/all/greedy": "high"}\n')
    m["p_huge_step"] = d / "p_huge_step"  # issue 39: a 400-digit step was a traceback of the figure
    _write(d / "p_huge_step" / "metrics.jsonl", '{"step": ' + "9" * 400 + ', "critic/score/mean": 0.5}\n')
    m["p_array"] = d / "p_array"
    _write(d / "p_array" / "metrics.jsonl", "[1, 2]\n[3]\n")
    m["p_binary"] = d / "p_binary"
    _write(d / "p_binary" / "metrics.jsonl", b"\xff\xfe\x00garbage\n\x00\x01\n")
    m["reward_mod_dir"] = d
    _write(d / "matrix_rewards.py", MATRIX_REWARDS)
    m["matrix"] = d
    return m


MATRIX_REWARDS = """
import math, os, sys, time
NOT_CALLABLE = 3
def ok(prompts, completions, **kw): return [1.0] * len(completions)
def nan(prompts, completions, **kw): return [math.nan] * len(completions)
def nones(prompts, completions, **kw): return [None] * len(completions)
def short(prompts, completions, **kw): return [1.0]
def half(prompts, completions, **kw): return [0.5] * len(completions)
def exits(prompts, completions, **kw): sys.exit(3)
def hard_exit(prompts, completions, **kw): os._exit(4)
def sleeps(prompts, completions, **kw):
    time.sleep(2)
    return [1.0] * len(completions)
def odd_rows(prompts, completions, **kw):
    if len(completions) > 1: raise ValueError("one at a time")
    return [1.0] if len(prompts[0]) % 2 else [math.inf]
"""


def T(*args: str) -> list[str]:
    """`hadw train` with the small valid base (a tiny model, one step) and these arguments."""
    return ["train", "{BASE}", *args]


# (id, argv with {placeholders}, substrings of the one line, expected outcome). Cases marked W come from the
# review in issue 23 (its "Why" list); the rest are new.
MATRIX: list[tuple[str, list[str], list[str], str]] = [
    # --- W: config and overrides
    ("W_train_section_scalar", ["train", "train=5"], ["'train=5'", "train is a section"], "one-line"),
    (
        "W_dollar_template_literal",
        ["train", "data.template=Q: ${question} A:", "--show-config"],
        ["${question}"],
        "accepted",
    ),
    (
        "W_env_interpolation_literal",
        ["train", "train.output_dir=runs/${oc.env:HOME}", "--show-config"],
        ["${oc.env:HOME}"],
        "accepted",
    ),
    ("W_env_in_yaml_literal", ["train", "{env.yaml}", "--show-config"], ["${oc.env:HOME}"], "accepted"),
    ("W_yaml_alias_bomb", ["train", "{bomb.yaml}"], ["bomb.yaml", "alias bomb"], "one-line"),
    ("W_yaml_duplicate_key", ["train", "{dup.yaml}"], ["dup.yaml:3", "duplicate key 'steps'", "line 2"], "one-line"),
    (
        "W_levels_unclosed_list",
        ["train", "data.levels=[2,3"],
        ["data.levels=[2,3", "not a valid YAML list"],
        "one-line",
    ),
    ("W_fifo_data_source", T("data.source={fifo.jsonl}"), ["fifo.jsonl", "not a regular file"], "one-line"),
    ("W_deep_json_row", T("data.source={deep.jsonl}"), ["deep.jsonl:1", "nested too deeply"], "one-line"),
    ("train_data_loading_script", T("data.source={script_dataset}"), ["script_dataset.py", "code"], "one-line"),
    (
        "eval_data_loading_script",
        ["eval", "{model}", "-d", "{script_dataset}", "--max-new-tokens", "2"],
        ["script_dataset.py", "never runs one"],
        "one-line",
    ),
    (
        "train_prompt_lone_surrogate",
        T("data.source={surrogate.jsonl}"),
        ["surrogate.jsonl:1", "lone surrogate"],
        "one-line",
    ),
    ("train_answer_20_digits", T("data.source={big_float.jsonl}"), ["big_float.jsonl:1", "more digits"], "one-line"),
    (
        "eval_prompt_lone_surrogate",
        ["eval", "{model}", "-d", "{surrogate.jsonl}", "--max-new-tokens", "2"],
        ["surrogate.jsonl:1", "lone surrogate"],
        "one-line",
    ),
    (
        "eval_answer_20_digits",
        ["eval", "{model}", "-d", "{big_float.jsonl}", "--max-new-tokens", "2"],
        ["big_float.jsonl:1", "more digits", "as a JSON string"],
        "one-line",
    ),
    ("W_all_prompts_empty", T("data.source={empty_prompts.jsonl}"), ["empty_prompts.jsonl", "empty"], "one-line"),
    (
        "W_nan_level",
        T(
            "data.source={nan_level.jsonl}",
            "data.fields.prompt=problem",
            "data.fields.answer=answer",
            "data.fields.level=level",
        ),
        ["nan_level.jsonl:1", "level nan"],
        "one-line",
    ),
    # --- W: model folders
    ("W_model_truncated_weights", T("model.path={m_truncated}"), ["model.path=", "m_truncated"], "one-line"),
    ("W_model_garbage_weights", T("model.path={m_garbage}"), ["model.path=", "m_garbage"], "one-line"),
    ("W_model_config_mismatch", T("model.path={m_mismatch}"), ["model.path=", "m_mismatch"], "one-line"),
    ("W_model_vocab_1e9", T("model.path={m_vocab}"), ["model.path=", "vocab_size"], "one-line"),
    ("W_model_no_tokenizer", T("model.path={m_no_tokenizer}"), ["model.path=", "tokenizer"], "one-line"),
    ("W_model_pickle_bin", T("model.path={m_pickle}"), ["model.path=", "m_pickle"], "one-line"),
    # --- W: checkpoints and run folders
    (
        "W_resume_truncated_checkpoint",
        T("train.output_dir={r_truncated}", "train.steps=2", "--resume"),
        ["model.safetensors"],
        "one-line",
    ),
    ("W_resume_latest_not_utf8", T("train.output_dir={r_latest_latin1}", "train.steps=2", "--resume"), [], "accepted"),
    (
        "W_resume_latest_absolute",
        T("train.output_dir={r_latest_abs}", "train.steps=2", "--resume"),
        ["resuming from the newest complete checkpoint"],
        "accepted",
    ),
    (
        "W_resume_latest_dotdot",
        T("train.output_dir={r_latest_up}", "train.steps=2", "--resume"),
        ["resuming from the newest complete checkpoint"],
        "accepted",
    ),
    (
        "W_resume_bad_state_json",
        T("train.output_dir={r_state_garbage}", "train.steps=2", "--resume"),
        ["state.json", "not JSON"],
        "one-line",
    ),
    (
        "W_resume_negative_position",
        T("train.output_dir={r_position}", "train.steps=2", "--resume"),
        ["state.json", "'data_position' is -1"],
        "one-line",
    ),
    (
        "W_resume_rng_state",
        T("train.output_dir={r_rng}", "train.steps=2", "--resume"),
        ["trainer_state.pt", "rng.torch"],
        "one-line",
    ),
    (
        "W_resume_exp_avg_shape",
        T("train.output_dir={r_exp_avg}", "train.steps=2", "--resume"),
        ["trainer_state.pt", "exp_avg has shape [3]"],
        "one-line",
    ),
    (
        "W_resume_lock_symlink",
        T("train.output_dir={r_lock_link}", "train.steps=2", "--resume"),
        [".lock", "symbolic link"],
        "one-line",
    ),
    (
        "W_resume_config_symlink",
        T("train.output_dir={r_config_link}", "train.steps=2", "--resume"),
        ["config.yaml", "symbolic link"],
        "one-line",
    ),
    (
        "W_resume_no_latest_changed_lr",
        T("train.output_dir={r_no_latest_lr}", "optim.lr=0.5", "--resume"),
        ["optim.lr", "checkpoint-000001"],
        "one-line",
    ),
    # --- W: commands
    ("W_eval_negative_temperature", ["eval", "{model}", "-d", "task:sums", "-t", "-1"], ["--temperature"], "one-line"),
    ("W_eval_top_p_2", ["eval", "{model}", "-d", "task:sums", "--top-p", "2"], ["--top-p"], "one-line"),
    ("W_eval_batch_size_0", ["eval", "{model}", "-d", "task:sums", "--batch-size", "0"], ["--batch-size"], "one-line"),
    ("W_eval_device_tpu", ["eval", "{model}", "-d", "task:sums", "--device", "tpu"], ["--device", "tpu"], "one-line"),
    (
        "W_eval_reward_missing_module",
        ["eval", "{model}", "-d", "task:sums", "--reward", "nosuchmod:fn"],
        ["--reward", "nosuchmod"],
        "one-line",
    ),
    ("W_eval_limit_negative", ["eval", "{model}", "-d", "task:sums", "--limit", "-1"], ["--limit"], "one-line"),
    ("W_sft_level_9", ["sft", "{dir}/sft_out", "--levels", "9"], ["--levels", "9"], "one-line"),
    ("W_sft_unknown_task", ["sft", "{dir}/sft_out", "--task", "calculus"], ["--task", "calculus"], "one-line"),
    ("W_sft_target_accuracy_2", ["sft", "{dir}/sft_out", "--target-accuracy", "2"], ["--target-accuracy"], "one-line"),
    ("W_sim_lam_nan", ["sim", "--lam", "nan"], ["--lam"], "one-line"),
    (
        "W_compare_jobs_0",
        ["compare", "-a", "g:", "--seeds", "0", "--jobs", "0", "-o", "{dir}/cmp0"],
        ["--jobs"],
        "one-line",
    ),
    (
        "W_compare_bad_set",
        ["compare", "-a", "g:", "--seeds", "0", "-s", "hadw.lamda=1", "-o", "{dir}/cmp1"],
        ["hadw.lamda", "did you mean"],
        "one-line",
    ),
    (
        "W_compare_seeds_descending",
        ["compare", "-a", "g:", "--seeds", "3-1", "-o", "{dir}/cmp2"],
        ["--seeds", "3-1"],
        "one-line",
    ),
    ("W_bias_empty_rates", ["bias", "table", "-p", ""], ["--success-rate"], "one-line"),
    ("W_plot_hand_edited_metrics", ["plot", "{p_no_step}", "--out", "{dir}/p.png"], ["metrics.jsonl"], "one-line"),
    # --- config: overrides
    ("steps_negative", ["train", "train.steps=-1"], ["train.steps=-1"], "one-line"),
    # issue 39: a greedy rollout gives G identical responses; a short run ended "done" without a word
    (
        "rollout_temperature_zero",
        ["train", "{BASE}", "rollout.temperature=0"],
        ["rollout.temperature=0", "no learning signal"],
        "one-line",
    ),
    ("prompts_per_step_zero", ["train", "train.prompts_per_step=0"], ["train.prompts_per_step=0"], "one-line"),
    ("top_p_zero", ["train", "rollout.top_p=0"], ["rollout.top_p=0"], "one-line"),
    ("top_p_nan", ["train", "rollout.top_p=nan"], ["rollout.top_p=nan"], "one-line"),
    ("lr_nan", ["train", "optim.lr=nan"], ["optim.lr=nan"], "one-line"),
    ("lam_inf", ["train", "hadw.lam=inf"], ["hadw.lam=inf"], "one-line"),
    ("temperature_nan", ["train", "rollout.temperature=nan"], ["rollout.temperature=nan"], "one-line"),
    ("timeout_nan", ["train", "reward.timeout_s=nan"], ["reward.timeout_s=nan"], "one-line"),
    ("timeout_inf", ["train", "reward.timeout_s=inf"], ["reward.timeout_s=inf"], "one-line"),
    ("weights_nan", ["train", "reward.weights=[nan]"], ["reward.weights"], "one-line"),
    ("max_failed_negative", ["train", "reward.max_failed_steps=-1"], ["reward.max_failed_steps=-1"], "one-line"),
    ("enabled_number", ["train", "hadw.enabled=1.5"], ["hadw.enabled"], "one-line"),
    ("levels_empty", ["train", "data.levels=[]"], ["data.levels=[]"], "one-line"),
    ("levels_float", ["train", "data.levels=[1,1e9]"], ["data.levels"], "one-line"),
    ("levels_text", ["train", "data.levels=abc"], ["data.levels"], "one-line"),
    ("device_tpu", ["train", "model.device=tpu"], ["model.device='tpu'"], "one-line"),
    ("compute_dtype_fp16", ["train", "model.compute_dtype=float16"], ["model.compute_dtype"], "one-line"),
    ("functions_twice", ["train", "reward.functions=[exact,exact]"], ["reward.functions", "twice"], "one-line"),
    ("isolated_registered", ["train", "reward.isolated=[exact]"], ["reward.isolated"], "one-line"),
    ("reward_not_callable", ["train", "reward.functions=[exact,hadw:__version__]"], ["hadw:__version__"], "one-line"),
    ("reward_missing_module", ["train", "reward.functions=[exact,nosuchmod:fn]"], ["nosuchmod"], "one-line"),
    ("empty_key", ["train", "=5"], ["'=5'", "dotted key"], "one-line"),
    ("double_dot_key", ["train", "train..steps=5"], ["train..steps"], "one-line"),
    ("no_equals_not_a_file", ["train", "train.steps"], ["train.steps"], "one-line"),
    ("logging_scalar", ["train", "logging=5"], ["logging is a section"], "one-line"),
    ("betas_scalar", ["train", "optim.betas=0.9"], ["optim.betas"], "one-line"),
    ("betas_words", ["train", "optim.betas=[a,b]"], ["optim.betas"], "one-line"),
    ("fields_prompt_only", ["train", "data.fields.prompt=q"], ["data.fields"], "one-line"),
    ("template_unknown_field", ["train", "data.template={question} {oops}"], ["data.template"], "one-line"),
    ("limit_negative", ["train", "data.limit=-5"], ["data.limit=-5"], "one-line"),
    ("keep_last_negative", ["train", "checkpoint.keep_last=-1"], ["checkpoint.keep_last=-1"], "one-line"),
    ("micro_batch_negative", ["train", "train.micro_batch_size=-1"], ["train.micro_batch_size=-1"], "one-line"),
    ("norm_length_zero", ["train", "algorithm.norm_length=0"], ["algorithm.norm_length=0"], "one-line"),
    ("fixed_value_2", ["train", "hadw.fixed_value=2"], ["hadw.fixed_value=2"], "one-line"),
    ("max_new_tokens_zero", ["train", "rollout.max_new_tokens=0"], ["rollout.max_new_tokens=0"], "one-line"),
    ("seed_text", ["train", "train.seed=abc"], ["train.seed"], "one-line"),
    ("group_size_float", ["train", "rollout.group_size=1e10"], ["rollout.group_size"], "one-line"),
    ("eval_source_unknown_task", ["train", "data.eval_source=task:nope"], ["data.eval_source"], "one-line"),
    ("output_dir_in_proc", T("train.output_dir=/proc/hadw_run"), ["/proc/hadw_run"], "one-line"),
    # issue 35: YAML folded a newline in an override into a space (and strips or rejects a tab)
    (
        "override_newline",
        ["train", "train.output_dir=a\nb", "--show-config"],
        ["override 'train.output_dir=a\\nb'", "control character '\\n' at column 19", "allowed: printable"],
        "one-line",
    ),
    (
        "override_tab",
        ["train", "data.template=Q: {question}\tA:", "--show-config"],
        ["data.template", "control character '\\t'"],
        "one-line",
    ),
    (
        "compare_set_newline",
        ["compare", "-a", "g:", "--seeds", "0", "-s", "train.output_dir=x\ry", "-o", "{dir}/c10"],
        ["train.output_dir=x\\ry", "control character"],
        "one-line",
    ),
    (
        "override_escaped_newline_kept",
        ["train", 'data.template="Q: {question}\\nA:"', "--show-config"],
        ['template: "Q: {question}\\nA:"'],
        "accepted",
    ),
    (
        "interpolate_missing_key",
        ["train", "--interpolate", "train.output_dir=${nope.key}", "--show-config"],
        ["nope"],
        "one-line",
    ),
    # --- config: YAML files
    ("yaml_tabs", ["train", "{tabs.yaml}"], ["tabs.yaml:2", "not valid YAML"], "one-line"),
    (
        "yaml_duplicate_section",
        ["train", "{dup_section.yaml}"],
        ["dup_section.yaml:4", "duplicate key 'optim'"],
        "one-line",
    ),
    ("yaml_section_scalar", ["train", "{section_scalar.yaml}"], ["model is a section"], "one-line"),
    ("yaml_section_list", ["train", "{section_list.yaml}"], ["train is a section"], "one-line"),
    ("yaml_int_key", ["train", "{int_key.yaml}"], ["int_key.yaml"], "one-line"),
    ("yaml_python_tag", ["train", "{python_tag.yaml}"], ["python_tag.yaml", "not valid YAML"], "one-line"),
    ("yaml_deep", ["train", "{deep.yaml}"], ["deep.yaml", "nested too deeply"], "one-line"),
    ("yaml_huge", ["train", "{huge.yaml}"], ["huge.yaml", "bytes"], "one-line"),
    ("yaml_fifo", ["train", "{fifo.yaml}"], ["fifo.yaml", "not a regular file"], "one-line"),
    ("yaml_null_section", ["train", "{null_section.yaml}", "--show-config"], [], "accepted"),
    # --- data files
    ("data_null_answer", T("data.source={null_answer.jsonl}"), ["null_answer.jsonl:1"], "one-line"),
    ("data_two_answers", T("data.source={two_answers.jsonl}"), ["two_answers.jsonl:1"], "one-line"),
    ("data_csv", T("data.source={data.csv}"), ["data.csv", "unknown file type"], "one-line"),
    ("data_json_array", T("data.source={array.json}"), ["array.json:1"], "one-line"),
    ("data_binary", T("data.source={binary.jsonl}"), ["binary.jsonl:1"], "one-line"),
    ("data_bad_hf_dir", T("data.source={bad_hf_dir}"), ["bad_hf_dir"], "one-line"),
    ("data_fifo_parquet", T("data.source={fifo.parquet}"), ["fifo.parquet", "not a regular file"], "one-line"),
    ("data_dev_null", T("data.source=/dev/null"), ["/dev/null"], "one-line"),
    # issue 35: a non-finite answer became the gold answer "nan" / "inf"; a key given twice kept its last value;
    # answers empty on every row were accepted
    (
        "data_nan_answer",
        T("data.source={nan_answer.jsonl}"),
        ["nan_answer.jsonl:1", "answer nan in field 'answer'", "finite"],
        "one-line",
    ),
    (
        "data_infinity_answer_user_fields",
        T("data.source={inf_answer.jsonl}", "data.fields.prompt=q", "data.fields.answer=a"),
        ["inf_answer.jsonl:1", "answer -inf in field 'a'", "finite"],
        "one-line",
    ),
    (
        "data_nan_answer_parquet",
        T("data.source={nan_answer.parquet}"),
        ["nan_answer.parquet: row 1 (0-based)", "answer nan in field 'answer'"],
        "one-line",
    ),
    (
        "eval_nan_answer",
        ["eval", "{model}", "-d", "{nan_answer.jsonl}"],
        ["nan_answer.jsonl:1", "answer nan in field 'answer'"],
        "one-line",
    ),
    ("data_duplicate_key", T("data.source={dup_key.jsonl}"), ["dup_key.jsonl:1", "duplicate key 'answer'"], "one-line"),
    (
        "data_duplicate_parquet_column",
        T("data.source={dup_column.parquet}"),
        ["dup_column.parquet", "duplicate column 'answer'"],
        "one-line",
    ),
    (
        "data_all_answers_empty",
        T("data.source={empty_answers.jsonl}"),
        ["empty_answers.jsonl:1", "field 'answer' is empty on every row (8)"],
        "one-line",
    ),
    (
        "eval_all_answers_empty",
        ["eval", "{model}", "-d", "{empty_answers.jsonl}"],
        ["empty_answers.jsonl:1", "empty on every row"],
        "one-line",
    ),
    (
        "data_some_answers_empty_warns",
        T("data.source={some_empty_answers.jsonl}"),
        ["warning:", "1 of 8 rows have an empty answer in field 'answer'", "some_empty_answers.jsonl:3"],
        "accepted",
    ),
    ("eval_source_fifo", T("data.eval_source={fifo.jsonl}"), ["fifo.jsonl", "not a regular file"], "one-line"),
    # --- model folders
    ("model_empty_weights", T("model.path={m_empty_weights}"), ["model.path=", "m_empty_weights"], "one-line"),
    ("model_negative_layers", T("model.path={m_layers}"), ["model.path=", "m_layers"], "one-line"),
    ("model_unknown_type", T("model.path={m_type}"), ["model.path=", "m_type"], "one-line"),
    ("model_config_array", T("model.path={m_array}"), ["model.path=", "m_array"], "one-line"),
    ("model_remote_code_untrusted", T("model.path={m_remote}"), ["model.path=", "m_remote"], "one-line"),
    ("eval_model_pickle", ["eval", "{m_pickle}", "-d", "task:sums"], ["m_pickle"], "one-line"),
    (
        "chat_template_never_finishes",
        T("model.path={m_loop_template}", "data.chat_template=always"),
        ["m_loop_template: the model's chat template did not finish rendering one prompt in", "chat_template=never"],
        "one-line",
    ),
    (
        "eval_chat_template_never_finishes",
        ["eval", "{m_loop_template}", "-d", "task:sums", "--chat-template", "always", "--limit", "2"],
        ["m_loop_template: the model's chat template did not finish", "--chat-template never"],
        "one-line",
    ),
    (
        "chat_template_raises",
        T("model.path={m_raise_template}", "data.chat_template=always"),
        ["m_raise_template: the model's chat template failed: OverflowError"],
        "one-line",
    ),
    ("eval_model_no_tokenizer", ["eval", "{m_no_tokenizer}", "-d", "task:sums"], ["tokenizer"], "one-line"),
    ("eval_model_vocab", ["eval", "{m_vocab}", "-d", "task:sums"], ["vocab_size"], "one-line"),
    # --- checkpoints
    (
        "resume_pickled_trainer_state",
        T("train.output_dir={r_pickle}", "train.steps=2", "--resume"),
        ["trainer_state.pt", "refused to load"],
        "one-line",
    ),
    (
        "resume_step_not_int",
        T("train.output_dir={r_step}", "train.steps=2", "--resume"),
        ["'step' is 'one'"],
        "one-line",
    ),
    (
        "resume_all_incomplete",
        T("train.output_dir={r_all_incomplete}", "--resume"),
        ["no checkpoint folder"],
        "one-line",
    ),
    # --- rewards through train (configuration side)
    (
        "reward_weights_inf",
        ["train", "reward.weights=[1,inf]", "reward.functions=[exact,format]"],
        ["reward.weights"],
        "one-line",
    ),
    ("reward_isolated_not_listed", ["train", "reward.isolated=[a:b]"], ["reward.isolated"], "one-line"),
    (
        "reward_module_attribute_missing",
        ["train", "reward.functions=[exact,matrix_rewards:nope]"],
        ["matrix_rewards:nope"],
        "one-line",
    ),
    (
        "reward_module_not_callable",
        ["train", "reward.functions=[exact,matrix_rewards:NOT_CALLABLE]"],
        ["NOT_CALLABLE"],
        "one-line",
    ),
    # --- rewards at run time: a reward that fails on every item stops the run in one line naming it
    (
        "reward_nan_stops",
        T("reward.functions=[exact,matrix_rewards:nan]", "reward.max_failed_steps=1"),
        ["'matrix_rewards:nan' failed on every item", "nan/inf"],
        "one-line",
    ),
    (
        "reward_sys_exit_stops",
        T("reward.functions=[exact,matrix_rewards:exits]", "reward.max_failed_steps=1"),
        ["'matrix_rewards:exits'", "sys.exit(3)"],
        "one-line",
    ),
    (
        "reward_os_exit_stops",
        T("reward.functions=[exact,matrix_rewards:hard_exit]", "reward.max_failed_steps=1"),
        ["'matrix_rewards:hard_exit'", "os._exit(4)"],
        "one-line",
    ),
    (
        "reward_hang_stops",
        T("reward.functions=[exact,matrix_rewards:sleeps]", "reward.max_failed_steps=1", "reward.timeout_s=0.2"),
        ["'matrix_rewards:sleeps'", "timeout"],
        "one-line",
    ),
    (
        "reward_none_stops",
        T("reward.functions=[exact,matrix_rewards:nones]", "reward.max_failed_steps=1"),
        ["'matrix_rewards:nones'", "None"],
        "one-line",
    ),
    (
        "reward_wrong_length_stops",
        T("reward.functions=[exact,matrix_rewards:short]", "reward.max_failed_steps=1"),
        ["'matrix_rewards:short'", "wrong length"],
        "one-line",
    ),
    (
        "reward_half_correctness_stops",
        T(
            "reward.functions=[matrix_rewards:half]",
            "reward.max_failed_steps=1",
            "reward.correctness=matrix_rewards:half",
        ),
        ["out of range"],
        "one-line",
    ),
    ("reward_some_rows_fail_trains_on", T("reward.functions=[exact,matrix_rewards:odd_rows]"), [], "accepted"),
    # --- eval
    ("eval_pass_k_above_k", ["eval", "{model}", "-d", "task:sums", "--pass-k", "5"], ["--pass-k"], "one-line"),
    ("eval_pass_k_text", ["eval", "{model}", "-d", "task:sums", "--pass-k", "x"], ["--pass-k"], "one-line"),
    ("eval_levels_text", ["eval", "{model}", "-d", "task:sums", "--levels", "x"], ["--levels"], "one-line"),
    ("eval_levels_unknown", ["eval", "{model}", "-d", "task:sums", "--levels", "42"], ["42"], "one-line"),
    ("eval_template_bad", ["eval", "{model}", "-d", "task:sums", "--template", "{oops}"], ["--template"], "one-line"),
    (
        "eval_chat_template_bad",
        ["eval", "{model}", "-d", "task:sums", "--chat-template", "maybe"],
        ["--chat-template"],
        "one-line",
    ),
    (
        "eval_max_new_tokens_zero",
        ["eval", "{model}", "-d", "task:sums", "--max-new-tokens", "0"],
        ["--max-new-tokens"],
        "one-line",
    ),
    (
        "eval_max_new_tokens_negative",
        ["eval", "{model}", "-d", "task:sums", "--max-new-tokens", "-5"],
        ["--max-new-tokens"],
        "one-line",
    ),
    ("eval_dtype_float64", ["eval", "{model}", "-d", "task:sums", "--dtype", "float64"], ["float64"], "one-line"),
    ("eval_unknown_task", ["eval", "{model}", "-d", "task:nope"], ["--data", "'nope'"], "one-line"),
    ("eval_limit_zero", ["eval", "{model}", "-d", "task:sums", "--limit", "0"], ["--limit"], "one-line"),
    (
        "eval_batch_size_negative",
        ["eval", "{model}", "-d", "task:sums", "--batch-size", "-1"],
        ["--batch-size"],
        "one-line",
    ),
    (
        "eval_temperature_nan",
        ["eval", "{model}", "-d", "task:sums", "-k", "2", "-t", "nan"],
        ["--temperature"],
        "one-line",
    ),
    ("eval_data_fifo", ["eval", "{model}", "-d", "{fifo.jsonl}"], ["fifo.jsonl", "not a regular file"], "one-line"),
    ("eval_data_deep_json", ["eval", "{model}", "-d", "{deep.jsonl}"], ["deep.jsonl:1", "nested"], "one-line"),
    (
        "eval_reward_unknown",
        ["eval", "{model}", "-d", "task:sums", "--reward", "nope"],
        ["--reward", "nope"],
        "one-line",
    ),
    (
        "eval_prompt_longer_than_the_context",
        ["eval", "{model}", "-d", "{long_prompt.jsonl}", "--max-new-tokens", "2"],
        ["long_prompt.jsonl:2", "the prompt is 3145", "characters", "allowed: at most 512 tokens"],
        "one-line",
    ),
    # --- probe
    (
        "probe_prompt_longer_than_the_context",
        ["probe", "{model}", "-d", "{long_prompt.jsonl}", "--max-new-tokens", "2", "-N", "2", "--png", "{dir}/l.png"],
        ["long_prompt.jsonl:2", "characters", "allowed: at most 512 tokens"],
        "one-line",
    ),
    ("probe_group_size_1", ["probe", "{model}", "-d", "task:sums", "-G", "1"], ["--group-size"], "one-line"),
    ("probe_edges_text", ["probe", "{model}", "-d", "task:sums", "--edges", "x"], ["--edges"], "one-line"),
    ("probe_edges_descending", ["probe", "{model}", "-d", "task:sums", "--edges", "1,0"], ["--edges"], "one-line"),
    ("probe_reference_zero", ["probe", "{model}", "-d", "task:sums", "-N", "0"], ["--reference"], "one-line"),
    ("probe_limit_negative", ["probe", "{model}", "-d", "task:sums", "--limit", "-1"], ["--limit"], "one-line"),
    ("probe_temperature_negative", ["probe", "{model}", "-d", "task:sums", "-t", "-1"], ["--temperature"], "one-line"),
    (
        "probe_batch_size_zero",
        ["probe", "{model}", "-d", "task:sums", "--batch-size", "0"],
        ["--batch-size"],
        "one-line",
    ),
    (
        "eval_memory_budget_nan",
        ["eval", "{model}", "-d", "task:sums", "--memory-budget-gb", "nan"],
        ["--memory-budget-gb"],
        "one-line",
    ),
    (
        "train_memory_budget_negative",
        ["train", "rollout.memory_budget_gb=-1"],
        ["rollout.memory_budget_gb"],
        "one-line",
    ),
    ("probe_top_p_zero", ["probe", "{model}", "-d", "task:sums", "--top-p", "0"], ["--top-p"], "one-line"),
    # --- compare
    ("compare_confidence_2", ["compare", "--confidence", "2", "-o", "{dir}/c3"], ["--confidence"], "one-line"),
    ("compare_interval_unknown", ["compare", "--interval", "z", "-o", "{dir}/c4"], ["--interval"], "one-line"),
    ("compare_max_seeds_alone", ["compare", "--max-seeds", "9", "-o", "{dir}/c4s"], ["--max-seeds"], "one-line"),
    (
        "compare_margin_negative",
        ["compare", "--sequential", "--equivalence-margin", "-0.1", "-o", "{dir}/c4m"],
        ["--equivalence-margin", "> 0"],
        "one-line",
    ),
    (
        "compare_robust_unknown",
        ["compare", "--robust", "sign", "-o", "{dir}/c4r"],
        ["--robust", "wilcoxon"],
        "one-line",
    ),
    (
        "compare_smooth_zero",
        ["compare", "-a", "g:", "--seeds", "0", "--smooth", "0", "-o", "{dir}/c5"],
        ["--smooth"],
        "one-line",
    ),
    ("compare_collect_empty", ["compare", "--collect-only", "-o", "{empty_dir}"], ["--out"], "one-line"),
    (
        "compare_arm_duplicate",
        ["compare", "-a", "g:", "-a", "g:", "--seeds", "0", "-o", "{dir}/c6"],
        ["unique"],
        "one-line",
    ),
    (
        "compare_config_missing",
        ["compare", "-c", "{dir}/none.yaml", "-a", "g:", "--seeds", "0", "-o", "{dir}/c7"],
        ["none.yaml"],
        "one-line",
    ),
    (
        "compare_arm_bad_override",
        ["compare", "-a", "g:train.steps=many", "--seeds", "0", "-o", "{dir}/c8"],
        ["train.steps"],
        "one-line",
    ),
    ("compare_seeds_text", ["compare", "-a", "g:", "--seeds", "x", "-o", "{dir}/c9"], ["--seeds"], "one-line"),
    # issue 49: trained every run, then found no avg@4 to compare (a wasted sweep)
    (
        "compare_metric_avg4_without_eval_samples",
        ["compare", "-a", "g:{compare_small}", "--seeds", "0", "--metric", "avg@4", "-o", "{dir}/c10"],
        ["--metric avg@4", "data.eval_samples=0", "--set data.eval_samples=4"],
        "one-line",
    ),
    # --- issue 39: --cpus-per-run nan was a traceback, 1e9 was blamed on train.num_threads
    *[
        (
            f"compare_cpus_per_run_{v}",
            ["compare", "-a", "g:", "--seeds", "0", "--cpus-per-run", v, "-o", "{dir}/c10"],
            ["--cpus-per-run", shown, "allowed: a number > 0 and at most 4096"],
            "one-line",
        )
        for v, shown in (("nan", "nan"), ("inf", "inf"), ("1e9", "1000000000.0"), ("-1", "-1"))
    ],
    # --- sim
    ("sim_steps_negative", ["sim", "--steps", "-1"], ["--steps"], "one-line"),
    ("sim_group_size_1", ["sim", "--group-size", "1"], ["--group-size"], "one-line"),
    ("sim_prompts_zero", ["sim", "--prompts", "0"], ["--prompts"], "one-line"),
    ("sim_level_prompts_zero", ["sim", "--level-prompts", "0"], ["--level-prompts"], "one-line"),
    ("sim_offsets_text", ["sim", "--offsets", "a"], ["--offsets"], "one-line"),
    ("sim_arm_unknown", ["sim", "--arms", "nope"], ["--arms"], "one-line"),
    ("sim_anchor_unknown", ["sim", "--anchor", "nope"], ["nope"], "one-line"),
    ("sim_anchor_opt_text", ["sim", "--anchor-opt", "k=x"], ["--anchor-opt"], "one-line"),
    ("sim_spread_negative", ["sim", "--spread", "-1"], ["--spread"], "one-line"),
    ("sim_lr_nan", ["sim", "--lr", "nan"], ["--lr"], "one-line"),
    ("sim_eval_every_zero", ["sim", "--eval-every", "0"], ["--eval-every"], "one-line"),
    ("sim_seeds_text", ["sim", "--seeds", "x"], ["--seeds"], "one-line"),
    ("sim_lam_zero", ["sim", "--lam", "0"], ["--lam"], "one-line"),
    ("sim_seeds_descending", ["sim", "--seeds", "5-1"], ["--seeds"], "one-line"),
    # --- bias
    ("bias_group_size_1", ["bias", "table", "-G", "1"], ["--group-size"], "one-line"),
    ("bias_rate_2", ["bias", "table", "-p", "2"], ["--success-rate"], "one-line"),
    ("bias_rate_nan", ["bias", "table", "-p", "nan"], ["--success-rate"], "one-line"),
    ("bias_eps_negative", ["bias", "table", "--eps", "-1"], ["--eps"], "one-line"),
    ("bias_interval_reversed", ["bias", "average", "-i", "0.5:0.1"], ["0.5:0.1"], "one-line"),
    ("bias_interval_text", ["bias", "average", "-i", "x"], ["--interval"], "one-line"),
    ("bias_lambda_p_hat_2", ["bias", "lambda", "--p-hat", "2", "--anchor", "0.5"], ["p"], "one-line"),
    ("bias_lambda_missing", ["bias", "lambda"], ["--p-hat"], "one-line"),
    # --- sft
    ("sft_batch_size_zero", ["sft", "{dir}/sft_out", "--batch-size", "0"], ["--batch-size"], "one-line"),
    ("sft_lr_negative", ["sft", "{dir}/sft_out", "--lr", "-1"], ["--lr"], "one-line"),
    ("sft_max_steps_negative", ["sft", "{dir}/sft_out", "--max-steps", "-1"], ["--max-steps"], "one-line"),
    ("sft_levels_text", ["sft", "{dir}/sft_out", "--levels", "x"], ["--levels"], "one-line"),
    ("sft_levels_empty", ["sft", "{dir}/sft_out", "--levels", ""], ["--levels"], "one-line"),
    ("sft_max_seconds_negative", ["sft", "{dir}/sft_out", "--max-seconds", "-1"], ["--max-seconds"], "one-line"),
    ("sft_data_missing", ["sft", "{dir}/sft_out", "--data", "{dir}/missing.jsonl"], ["missing.jsonl"], "one-line"),
    ("sft_model_missing", ["sft", "{dir}/sft_out", "--model", "{dir}/no_model"], ["no_model"], "one-line"),
    ("sft_target_negative", ["sft", "{dir}/sft_out", "--target-accuracy", "-0.5"], ["--target-accuracy"], "one-line"),
    ("sft_data_fifo", ["sft", "{dir}/sft_out", "--data", "{fifo.jsonl}"], ["fifo.jsonl"], "one-line"),
    # --- plot
    ("plot_step_text", ["plot", "{p_strings}", "--out", "{dir}/p2.png"], ["metrics.jsonl"], "one-line"),
    ("plot_rows_arrays", ["plot", "{p_array}", "--out", "{dir}/p3.png"], ["metrics.jsonl"], "one-line"),
    ("plot_binary", ["plot", "{p_binary}", "--out", "{dir}/p4.png"], ["metrics.jsonl"], "one-line"),
    ("plot_out_below_a_file", ["plot", "{base_run}", "--out", "{model_file}/curves.png"], ["model_file"], "one-line"),
    # --- issue 39: a step no float holds, and an --out that is no figure format (both tracebacks)
    (
        "plot_step_400_digits",
        ["plot", "{p_huge_step}", "--out", "{dir}/p5.png"],
        ["metrics.jsonl:1", "'step'"],
        "one-line",
    ),
    (
        "plot_out_jsonl",
        ["plot", "{base_run}", "--out", "{dir}/x.jsonl"],
        ["--out", "'.jsonl'", "allowed: .png"],
        "one-line",
    ),
    (
        "eval_json_below_a_file",
        ["eval", "{model}", "-d", "task:sums", "--limit", "2", "--json", "{model_file}/out.json"],
        ["model_file"],
        "one-line",
    ),
    (
        "compare_out_below_a_file",
        ["compare", "-a", "g:", "--seeds", "0", "-o", "{model_file}/cmp"],
        ["model_file"],
        "one-line",
    ),
    # --- issue 49: nothing of the prompt dropped silently, unique problem ids
    (
        "train_system_prompt_without_chat_template",
        T("data.system_prompt=Be brief."),
        ["data.system_prompt", "1 chat turn(s) before its question (system", "data.chat_template=never"],
        "one-line",
    ),
    (
        "train_chat_rows_under_the_plain_template",
        T(
            "data.source={chat_rows.jsonl}",
            "data.fields.prompt=prompt",
            "data.fields.answer=answer",
            "data.template=plain",
            "data.chat_template=auto",
        ),
        ["chat_rows.jsonl:1", "(system: data.system_prompt", "data.template=plain is used without the chat template"],
        "one-line",
    ),
    (
        "eval_system_prompt_without_chat_template",
        ["eval", "{model}", "-d", "task:sums", "--limit", "2", "--system-prompt", "Be brief.", "--max-new-tokens", "2"],
        ["data.system_prompt / --system-prompt", "no chat template"],
        "one-line",
    ),
    (
        "train_duplicate_ids",
        T("data.source={dup_ids.jsonl}"),
        ["dup_ids.jsonl:3", "id 'a'", "dup_ids.jsonl:1"],
        "one-line",
    ),
    (
        "eval_duplicate_ids",
        ["eval", "{model}", "-d", "{dup_ids.jsonl}", "--max-new-tokens", "2"],
        ["dup_ids.jsonl:3", "is also the id of", "distinct id per row"],
        "one-line",
    ),
    # --- demo
    ("demo_steps_zero", ["demo", "--steps", "0", "--out-dir", "{dir}/demo0"], ["--steps"], "one-line"),
    ("demo_out_dir_below_file", ["demo", "--out-dir", "{model_file}/demo"], ["model_file"], "one-line"),
    # --- data
    ("data_download_unknown", ["data", "download", "nosuch"], ["nosuch"], "one-line"),
]


def _expand(args: list[str], mx: dict, run: Path) -> list[str]:
    out: list[str] = []
    for arg in args:
        if arg == "{BASE}":
            out += _base(mx, run)
            continue
        for name, path in mx.items():
            arg = arg.replace("{" + name + "}", str(path))
        out.append(arg)
    # a later train.output_dir= wins over the base's (OmegaConf: the last override wins)
    return out


def test_the_matrix_is_large_enough():
    new = [c for c in MATRIX if not c[0].startswith("W_")]
    assert len(new) >= 60 and len(MATRIX) - len(new) >= 40, (len(new), len(MATRIX))
    assert len({c[0] for c in MATRIX}) == len(MATRIX)


@pytest.mark.parametrize(("args", "needles", "expect"), [c[1:] for c in MATRIX], ids=[c[0] for c in MATRIX])
def test_matrix(mx, tmp_path, monkeypatch, record_outcome, request, args, needles, expect):
    monkeypatch.chdir(mx["matrix"])  # import-path rewards (matrix_rewards.py) resolve from here
    monkeypatch.setattr("hadw.data.templates.CHAT_TEMPLATE_SECONDS", 1.0)  # a looping template costs 1 s, not 5
    result = _invoke_bounded(_expand(args, mx, tmp_path / "run"), Path(mx["matrix"]))
    outcome = classify(result, expect)
    record_outcome(request.node.callspec.id, outcome)
    detail = (
        None if result is None else (result.exit_code, result.stdout[-2000:], result.stderr[-2000:], result.exception)
    )
    assert outcome == expect, (outcome, detail)
    text = result.stderr if expect != "accepted" else result.stdout + result.stderr
    for needle in needles:
        assert needle in text, (needle, text)
    assert not (mx["matrix"] / "pwn").exists() and not (mx["matrix"] / "pwned").exists()  # no code ran
    assert (mx["matrix"] / "victim").read_text() == "precious\n"  # no write through a link


# Issue 39, finding 5: HADW_VERIFY_WORKERS=0 (or less) left the verifier pool with no worker and every scoring waited
# forever (a hang of train / eval / probe / compare / demo, nothing printed); a non-number was a traceback.
@pytest.mark.parametrize("value", ["0", "-3", "abc", "2.5", "100000"])
def test_a_bad_verifier_worker_count_is_one_line_before_the_work(mx, monkeypatch, record_outcome, request, value):
    from hadw.rewards.pool import shutdown_pool

    monkeypatch.setenv("HADW_VERIFY_WORKERS", value)
    shutdown_pool()  # the process-wide pool takes the setting when it (re)starts
    try:
        args = ["eval", str(mx["model"]), "-d", "task:sums", "--reward", "math", "--limit", "1", "--no-progress"]
        result = _invoke_bounded([*args, "--max-new-tokens", "2", "--device", "cpu"])
    finally:
        monkeypatch.delenv("HADW_VERIFY_WORKERS")
        shutdown_pool()
    outcome = classify(result, "one-line")
    record_outcome(request.node.name, outcome)
    assert outcome == "one-line", (outcome, result and result.output)
    assert f"HADW_VERIFY_WORKERS={value!r}" in result.stderr and "allowed: a whole number from 1" in result.stderr


def test_a_yaml_merge_key_is_yaml(tmp_path):
    """Issue 39, finding 10: `<<: *base` (a valid YAML merge key) was refused with advice about quoting values. It
    merges: the mapping gets base's keys and its own override them; a key given twice by hand is still refused."""
    from hadw.train.config import ConfigError, load_config
    from hadw.train.config_yaml import parse_yaml

    text = "base: &b\n  steps: 3\n  seed: 4\ntrain:\n  <<: *b\n  seed: 1\n"
    assert parse_yaml(text, "c.yaml") == {"base": {"steps": 3, "seed": 4}, "train": {"steps": 3, "seed": 1}}
    with pytest.raises(ConfigError, match="c.yaml:7: duplicate key 'seed' \\(first at line 6\\)"):
        parse_yaml(text + "  seed: 2\n", "c.yaml")
    path = tmp_path / "merge.yaml"  # in a config file: the merged section is read like any other
    path.write_text("rollout:\n  <<: {group_size: 4, max_new_tokens: 8}\n  max_new_tokens: 9\n")
    cfg = load_config(path, [])
    assert (cfg.rollout.group_size, cfg.rollout.max_new_tokens) == (4, 9)


def test_a_refused_pickle_is_one_line_the_first_time_too(files, tmp_path):
    """Run first in its process (pytest-xdist found it), the refusal came after torch's warning about the pickle's
    protocol: two lines. The warning registry is reset here, so the order of the suite does not hide it."""
    from hadw.rollout.models import load_model, model_load_error

    folder = _model_variant(files["model"], tmp_path / "m_pickle", _pickle_weights)
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        with pytest.raises(Exception) as refused:
            load_model(folder)
    assert "refused: it could run code" in model_load_error(refused.value)
    assert [str(w.message)[:60] for w in caught if "pickle" in str(w.message)] == []
