"""Install tiers: the base install (torch, numpy, scipy, typer, rich) has a working `hadw` command.

Each case runs the real command in a child interpreter whose imports of the optional packages fail, as they
do after `pip install hadw` without extras.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

OPTIONAL = ("transformers", "tokenizers", "safetensors", "huggingface_hub", "math_verify", "datasets", "pyarrow",
            "omegaconf", "yaml", "matplotlib", "trl", "accelerate", "tensorboard", "wandb")  # fmt: skip

PRELUDE = f"""
import sys
class NoOptional:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {OPTIONAL!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, NoOptional())
from hadw.cli import main
sys.argv = ["hadw", *sys.argv[1:]]
main()
"""


def _base_hadw(*args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO_ROOT / "src"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", PRELUDE, *args], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_help_and_bias_table_work_on_the_base_install():
    result = _base_hadw("--help")
    assert result.returncode == 0, result.stderr
    for command in ("train", "eval", "compare", "bias", "sim"):
        assert command in result.stdout
    table = _base_hadw("bias", "table", "-G", "8", "-p", "0.5")
    assert table.returncode == 0, table.stderr
    assert "0.5" in table.stdout


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["train"], "train"),
        (["train", "x.yaml", "--resume"], "train"),
        (["eval", "m", "--data", "task:sums"], "eval"),
        (["demo"], "train"),
        (["probe", "m", "--data", "task:sums"], "eval"),
    ],
)
def test_a_command_without_its_extra_is_one_line_naming_it(args, extra):
    result = _base_hadw(*args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and f"pip install 'hadw[{extra}]'" in lines[0] and "Traceback" not in result.stderr


def test_every_extra_the_cli_names_exists_in_pyproject():
    import tomllib

    from hadw.cli import COMMAND_EXTRAS
    from hadw.errors import EXTRAS, TIERS

    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS.values()) | set(COMMAND_EXTRAS.values()) | set(TIERS) <= set(extras)
