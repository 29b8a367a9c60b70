"""Shared test setup: everything offline, and the curated benchmark files ($HADW_SHARED_DATA, which
scripts/offline_env.sh sets when the development machine has them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The rewards a test names are remembered (hadw.rewards.trust) in a trust file of the test session, never the
# user's own ~/.config/hadw; commands the tests start inherit it.
import tempfile  # noqa: E402

os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="hadw-tests-config-")
# Tiny models gain nothing from a second thread, and lose a lot when the verifier pool or a second
# process competes for the 2 cores.
torch.set_num_threads(1)

# Outcome of each case of the bad-input matrix (tests/test_bad_inputs.py), summarised after the run.
# The smallest real `hadw compare` recipe (a 1-layer 32-wide model, 2 prompts × 2 responses a step, 4 eval prompts,
# a checkpoint after every step); tests add train.steps. test_compare and test_launchers run it.
TINY_COMPARE_RECIPE = [
    "data.source=task:addition",
    "data.levels=[1]",
    "data.eval_size=4",
    "data.chat_template=never",
    "rollout.group_size=2",
    "rollout.max_new_tokens=3",
    "train.prompts_per_step=2",
    "train.mini_batch_prompts=2",
    "model.tiny.hidden_size=32",
    "model.tiny.num_layers=1",
    "model.tiny.intermediate_size=64",
    "logging.sample_every=0",
    "checkpoint.every=1",
]


@pytest.fixture(autouse=True)
def _in_a_scratch_folder(tmp_path_factory, monkeypatch):
    """Every test starts in a folder of its own, never the repository root: a command that writes into the working
    directory (a run folder, a figure, a lock) then cannot leave files in the clone or see another test's
    (issue 39, finding 11: `my run/.lock` was left in the repository root). A folder apart from tmp_path, so that
    tests that check tmp_path holds nothing are unaffected."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


BAD_INPUT_OUTCOMES = pytest.StashKey[dict]()
OUTCOME_ORDER = ("one-line", "accepted", "traceback", "silent", "hang", "other")
_OUTCOME_PROPERTY = "hadw_bad_input_outcome"


_OUTCOMES: dict[str, str] = {}  # this process's tally (the controller's, under pytest-xdist)


def pytest_configure(config):
    config.stash[BAD_INPUT_OUTCOMES] = _OUTCOMES


@pytest.fixture
def record_outcome(request):
    """record_outcome(case_id, outcome): one of OUTCOME_ORDER, counted in the session summary line. The outcome
    travels in the test's report (user_properties), so that the summary also counts the cases a pytest-xdist
    worker ran (scripts/test.sh runs the suite on two)."""

    def record(case_id: str, outcome: str) -> None:
        request.node.user_properties.append((_OUTCOME_PROPERTY, (case_id, outcome)))

    return record


def pytest_runtest_logreport(report):
    if report.when != "teardown":  # user_properties are complete in the teardown report
        return
    for name, value in report.user_properties:
        if name == _OUTCOME_PROPERTY:
            case_id, outcome = value
            _OUTCOMES[case_id] = outcome


def pytest_collection_modifyitems(session, config, items):
    """The Ray / Slurm module (xdist_group "daemons", ~7 minutes on 2 cores) first: under pytest-xdist its worker
    starts on it at once while the other runs the rest, instead of being handed it half-way and ending last."""
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)  # stable: order kept otherwise


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    outcomes = config.stash.get(BAD_INPUT_OUTCOMES, {})
    if outcomes:
        counts = {k: sum(v == k for v in outcomes.values()) for k in OUTCOME_ORDER}
        terminalreporter.write_line(
            f"bad-input matrix: {len(outcomes)} cases: " + ", ".join(f"{n} {k}" for k, n in counts.items())
        )


def shared_data_dir() -> Path | None:
    """The benchmark data folder: $HADW_SHARED_DATA when it names a folder, else None (tests skip)."""
    env = os.environ.get("HADW_SHARED_DATA")
    return Path(env) if env and Path(env).is_dir() else None


@pytest.fixture
def shared_data() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip(
            "benchmark data not found: set HADW_SHARED_DATA to a folder of the curated benchmark files "
            "(CI has it; a user's clone does not)"
        )
    return path


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    """A very small tiny model (2 layers, hidden 32) saved as a checkpoint folder, built once per test module."""
    from hadw.rollout import build_tiny_model

    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "model",
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
        seed=0,
    )
