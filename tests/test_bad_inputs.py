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
from pathlib import Path

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
    f["model"] = build_tiny_model(d / "tiny", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                                  intermediate_size=64, seed=0)

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
    write("array_row.jsonl", '[1, 2, 3]\n')
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
    return [f"model.path={files['model']}", f"train.output_dir={run}", "train.steps=1", "train.prompts_per_step=2",
            "train.mini_batch_prompts=1", "rollout.group_size=2", "rollout.max_new_tokens=2",
            "data.chat_template=never", "data.eval_size=0", "logging.progress=false", "train.num_threads=1"]


@pytest.mark.parametrize(("args", "needles"), [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_config_errors_are_one_line_exit_2(files, args, needles):
    _assert_one_line_error(_run(["train", *_fill(args, files)]), *needles)


@pytest.mark.parametrize(("args", "needles"), [c[1:] for c in MODEL_CASES + DATA_CASES],
                         ids=[c[0] for c in MODEL_CASES + DATA_CASES])
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
    _assert_one_line_error(_run(["train", *_base(files, run)]), f"train.output_dir={run}", "already holds a run",
                           "--resume", "--overwrite")


@pytest.mark.parametrize(
    ("code", "needle"), [(errno.ENOSPC, "No space left on device"), (errno.EACCES, "Permission denied")]
)
def test_full_disk_and_permission_denied_are_one_line(files, tmp_path, monkeypatch, code, needle):
    def failing(*args, **kwargs):
        raise OSError(code, os.strerror(code), str(tmp_path / "run" / "final_model" / "model.safetensors"))

    monkeypatch.setattr(trainer_module.Trainer, "_save_final_model", failing)
    result = _run(["train", *_base(files, tmp_path / "run")])
    _assert_one_line_error(result, needle, "final_model")


def test_the_real_command_exits_2_with_one_line_and_hadw_debug_brings_the_traceback_back(files):
    environ = os.environ | {"PYTHONPATH": str(REPO_ROOT / "src")}
    command = [sys.executable, "-m", "hadw.cli", "train"]
    plain = subprocess.Popen([*command, str(files["bad_syntax.yaml"])], env=environ, stderr=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    debug = subprocess.Popen([*command, "optim.lr=0"], env=environ | {"HADW_DEBUG": "1"}, stderr=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # both at once: start-up dominates
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


def test_the_table_has_at_least_sixty_cases():
    assert len(CONFIG_CASES) + len(MODEL_CASES) + len(DATA_CASES) + 12 >= 60


@pytest.mark.parametrize(
    ("args", "needles"),
    [(["eval", "{dir}/no_model", "--data", "task:addition"], ["MODEL", "no_model"]),
     (["eval", "{model}", "--data", "{dir}/missing.jsonl"], ["--data", "missing.jsonl"]),
     (["eval", "{model}", "--data", "{latin1.jsonl}"], ["latin1.jsonl:2", "not UTF-8"]),
     (["plot", "{dir}/no_run", "--out", "{dir}/curves.png"], ["no_run", "metrics.jsonl", "hadw train"]),
     (["plot", "{empty_dir}", "--out", "{dir}/curves.png"], ["empty_dir", "no training step"])],
    ids=["eval_model_missing", "eval_data_missing", "eval_data_not_utf8", "plot_run_missing", "plot_run_empty"],
)
def test_eval_path_errors_are_one_line_exit_2(files, args, needles):
    _assert_one_line_error(_run(_fill(args, files)), *needles)
