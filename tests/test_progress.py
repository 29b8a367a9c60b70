"""hadw.progress: the modes (auto | bar | lines | off), and the plain lines a job without a terminal prints."""

from __future__ import annotations

import io
import re
import time

import pytest

from hadw import progress as P


class Pipe(io.StringIO):
    """stderr as a pipe or a log file: not a terminal."""

    def isatty(self) -> bool:
        return False


class Terminal(Pipe):
    def isatty(self) -> bool:
        return True


def _pipe(monkeypatch, interval_s: float = 0.05) -> Pipe:
    """stderr replaced by a pipe, timer lines every `interval_s`. Called in the test itself: pytest's capture
    puts its own sys.stderr back between a fixture's setup and the test."""
    monkeypatch.delenv("HADW_PROGRESS", raising=False)
    monkeypatch.setenv("HADW_PROGRESS_INTERVAL", str(interval_s))
    stream = Pipe()
    monkeypatch.setattr("sys.stderr", stream)
    return stream


@pytest.mark.parametrize(
    ("mode", "env", "terminal", "expected"),
    [
        ("auto", None, False, "lines"),  # a pipe, a Slurm log: plain lines (was: nothing)
        ("auto", None, True, "bar"),
        (True, None, False, "lines"),  # the older boolean logging.progress=true
        ("True", None, False, "lines"),  # ... as OmegaConf writes it into the string field
        (False, None, True, "off"),
        ("false", None, True, "off"),
        (None, None, False, "lines"),
        ("off", "bar", True, "off"),  # an explicit mode wins over the environment
        ("auto", "off", True, "off"),
        ("auto", "0", True, "off"),  # HADW_PROGRESS's older values
        ("auto", "1", False, "bar"),
        ("auto", "lines", True, "lines"),
        ("lines", None, True, "lines"),
        ("bar", None, False, "bar"),
    ],
)
def test_resolve_mode(monkeypatch, mode, env, terminal, expected):
    if env is None:
        monkeypatch.delenv("HADW_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("HADW_PROGRESS", env)
    monkeypatch.setattr("sys.stderr", Terminal() if terminal else Pipe())
    assert P.resolve_mode(mode) == expected


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="allowed: auto, bar, lines, off"):
        P.resolve_mode("loud")
    assert P.normalize_mode("loud") is None


def test_format_line_has_count_rate_elapsed_and_eta():
    line = P.format_line("grpo+hadw", 12, 200, "step", 24.0, 12, "reward=0.312")
    assert line == "grpo+hadw: 12/200 steps (6%) | 2.0 s/step | elapsed 0:00:24 | ETA 0:06:16 | reward=0.312"
    assert P.format_line("eval", 30, 60, "problem", 10.0, 30, "") == (
        "eval: 30/60 problems (50%) | 3.00 problem/s | elapsed 0:00:10 | ETA 0:00:10"
    )
    assert "ETA ?" in P.format_line("eval", 0, 60, "problem", 3.0, 0, "")  # nothing done yet: no rate


def test_a_resumed_run_rates_only_its_own_steps():
    line = P.format_line("grpo", 110, 200, "step", 10.0, 10, "")  # 100 steps done before the resume
    assert "1.00 step/s" in line and "ETA 0:01:30" in line


def test_lines_mode_prints_at_a_steady_interval_and_at_the_end(monkeypatch):
    pipe = _pipe(monkeypatch)
    bar = P.Bar(10, "sft", unit="step")
    assert bar.mode == "lines" and pipe.getvalue() == ""  # nothing within the first interval
    bar.update(3, loss="0.5")
    time.sleep(0.3)  # no update for several intervals (a long step): the timer still prints
    ticks = pipe.getvalue().splitlines()
    assert len(ticks) >= 3 and all(t.startswith("sft: 3/10 steps (30%)") and "loss=0.5" in t for t in ticks)
    bar.update(7)
    bar.close()
    final = pipe.getvalue().splitlines()
    assert final[-1].startswith("sft: 10/10 steps (100%)")
    time.sleep(0.15)
    assert pipe.getvalue().splitlines() == final  # closed: the timer has stopped


def test_a_job_done_within_the_first_interval_prints_no_line(monkeypatch):
    """A quick command (or a quick one-line error) keeps its output as it was: tqdm's `delay`."""
    pipe = _pipe(monkeypatch, interval_s=5.0)
    with P.Bar(4, "eval", unit="problem") as bar:
        bar.update(4)
    assert pipe.getvalue() == ""


def test_interval_0_prints_a_line_at_every_update(monkeypatch):
    pipe = _pipe(monkeypatch, interval_s=0)
    with P.Bar(3, "grpo", unit="step") as bar:
        for _ in range(3):
            bar.update(1, reward="0.5")
    lines = pipe.getvalue().splitlines()
    expected = ["grpo: 1/3 steps (33%)", "grpo: 2/3 steps (67%)", "grpo: 3/3 steps (100%)"]
    assert [line.split(" | ")[0] for line in lines] == expected


def test_off_and_bar_modes_print_no_lines(monkeypatch):
    pipe = _pipe(monkeypatch)
    with P.Bar(5, "eval", mode="off") as bar:
        bar.update(2)
        time.sleep(0.15)
    assert pipe.getvalue() == ""


def test_bars_show_several_counters_one_line_each(monkeypatch):
    """`hadw demo`'s use: one counter per arm, set to the step read from its run."""
    pipe = _pipe(monkeypatch)
    with P.Bars("lines") as bars:
        grpo, hadw = bars.add("grpo", 20, unit="step"), bars.add("grpo+hadw", 20, unit="step")
        grpo.update(completed=5, acc="0.400")
        hadw.update(completed=4)
        time.sleep(0.2)
    lines = pipe.getvalue().splitlines()
    assert any(re.match(r"grpo: 5/20 steps .*acc=0.400", line) for line in lines)
    assert any(line.startswith("grpo+hadw: 4/20 steps") for line in lines)


def test_a_closed_stream_never_crashes_the_job(monkeypatch):
    stream = Pipe()
    monkeypatch.setattr("sys.stderr", stream)
    bar = P.Bar(3, "x", mode="lines")
    stream.close()
    bar.update(1)
    bar.close()  # writes the final line to a closed stream: ignored


@pytest.mark.parametrize(
    ("value", "expected"), [("auto", "auto"), ("lines", "lines"), ("true", "auto"), ("false", "off"), ("off", "off")]
)
def test_logging_progress_config_takes_a_mode_or_the_older_boolean(value, expected, tmp_path):
    import yaml

    from hadw.train.config import config_to_yaml, load_config

    cfg = load_config(None, [f"logging.progress={value}"])
    assert cfg.logging.progress == expected
    saved = config_to_yaml(cfg)
    assert yaml.safe_load(saved)["logging"]["progress"] == expected  # config.yaml says which mode ran
    (tmp_path / "config.yaml").write_text(saved)
    assert load_config(tmp_path / "config.yaml").logging.progress == expected  # 'off', quoted: not YAML's false


def test_logging_progress_config_refuses_another_value():
    from hadw.train.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="logging.progress='loud' is not allowed; allowed values: auto, bar, lines"):
        load_config(None, ["logging.progress=loud"])


def test_tables_written_to_a_file_or_pipe_are_not_cut_at_80_columns(capsys):
    """A probe table in a Slurm log read `pro…`, `p_r…`: rich's 80 columns off a terminal. The tables' console keeps
    every cell whole there (and a terminal keeps its own width)."""
    from hadw.eval.report import PROBE_ADVANTAGE_COLUMNS, PROBE_BIAS_COLUMNS, probe_rows, rich_table
    from hadw.progress import FILE_WIDTH, stdout_console

    keys = [k for _, m, _ in PROBE_BIAS_COLUMNS + PROBE_ADVANTAGE_COLUMNS for k in (m if isinstance(m, tuple) else [m])]
    buckets = {name: dict.fromkeys(keys, 0.123456) for name in ("all", "p∈[0.000, 0.125)", "my_own_dataset/L5")}
    headers, rows = probe_rows(buckets)
    headers2, rows2 = probe_rows(buckets, PROBE_ADVANTAGE_COLUMNS)
    headers, rows = headers + headers2[1:], [a + b[1:] for a, b in zip(rows, rows2, strict=True)]
    console = stdout_console()
    assert not console.is_terminal and console.width == FILE_WIDTH
    console.print(rich_table("Bias of the group baseline: a long title " * 3, headers, rows))
    out = capsys.readouterr().out
    assert "…" not in out and all(h in out for h in headers)
