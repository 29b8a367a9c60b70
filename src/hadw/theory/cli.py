"""`hadw bias`: how biased are your group-relative advantages? Tables, interval averages, the λ_scale range
of Theorem 3, continuous rewards, and the figures. Every sub-command takes --json for machine-readable output."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from hadw.cli_lists import parse_floats, parse_ints
from hadw.progress import stdout_console

# numpy, scipy and the theory modules are imported inside each command: registering `hadw bias` (and so
# `hadw --help`) must not pay for them (tests/test_cli_startup.py).

bias_app = typer.Typer(
    name="bias",
    help="Bias diagnostics from the paper's theory: how far E[Â|S] is from A for your G and success rates.",
    no_args_is_help=True,
)

DEFAULT_G = [2, 4, 8, 16]
DEFAULT_P = [0.05, 0.125, 0.25, 0.375, 0.5, 0.75, 0.875]
DEFAULT_INTERVALS = ["0:0.5", "0:0.25", "0:0.125", "0:2/G", "0.5:1", "0.75:1"]
DEFAULT_DISTS = ["beta:2,5", "beta:5,2", "beta:0.5,0.5", "truncnorm:0.3,0.2"]

GroupSizes = typer.Option("--group-size", "-G", help="Group sizes G, e.g. 4,8 (or repeat the option).")
JsonFlag = typer.Option("--json", help="Print JSON instead of a table.")


def _emit(data: dict, table: Table, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        stdout_console().print(table)


def _table(title: str, columns: list[str], right: bool = True) -> Table:
    """A rich table whose headers are literal text (headers like E[p̂|S] are not markup)."""
    table = Table(title=escape(title))
    for name in columns:
        table.add_column(escape(name), justify="right" if right else "left")
    return table


def _row(table: Table, *cells: str) -> None:
    table.add_row(*(escape(c) for c in cells))


def _fmt(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{x:.4g}" if abs(x) < 1e-3 and x != 0 else f"{x:.4f}"


def _check_groups(values: list[str]) -> list[int]:
    group_sizes = parse_ints(values, "--group-size")
    bad = [G for G in group_sizes if G < 2]
    if bad:
        raise typer.BadParameter(f"group sizes must be ≥ 2; got {bad}", param_hint="'--group-size'")
    return group_sizes


@bias_app.command("table")
def table_cmd(
    group_sizes: Annotated[list[str], GroupSizes] = [",".join(map(str, DEFAULT_G))],
    success_rates: Annotated[
        list[str],
        typer.Option(
            "--success-rate",
            "-p",
            help="True success rates p of a prompt in [0, 1], e.g. 0.1,0.5 (or repeat the option).",
        ),
    ] = [",".join(map(str, DEFAULT_P))],
    eps: Annotated[
        float, typer.Option("--eps", help="Margin ε ≥ 0 of the mis-estimation probability (0: ε→0 limit).")
    ] = 0.0,
    as_json: Annotated[bool, JsonFlag] = False,
) -> None:
    """Bias (Lemma 2), degenerate-group probability and mis-estimation probability (Theorem 2) per G and p."""
    import numpy as np

    from hadw.theory import binary, rectified

    group_sizes = _check_groups(group_sizes)
    success_rates = parse_floats(success_rates, "--success-rate")
    if any(not 0 <= p <= 1 for p in success_rates) or eps < 0:
        raise typer.BadParameter("--success-rate values must lie in [0, 1] and --eps must be ≥ 0")
    G, p = np.meshgrid(group_sizes, success_rates, indexing="ij")
    columns = {
        "p_degenerate": binary.p_degenerate(p, G),
        "expected_baseline": binary.expected_baseline(p, G),
        "bias": binary.bias(p, G),
        "prob_misestimate": binary.prob_misestimate(p, G, eps),
        "debias_constant": rectified.debias_constant(p, G),
    }
    rows = [
        {
            "G": int(G.flat[i]),
            "p": float(p.flat[i]),
            "direction": "under" if p.flat[i] <= 0.5 else "over",
            "eps": eps,
            **{k: float(v.flat[i]) for k, v in columns.items()},
        }
        for i in range(G.size)
    ]
    table = _table(
        f"Binary rewards: bias given a non-degenerate group (ε = {eps:g})",
        ["G", "p", "P(degenerate)", "E[p̂|S]", "bias A−E[Â|S]", "direction", "P(mis-estimate)", "c*"],
    )
    for r in rows:
        _row(
            table,
            str(r["G"]),
            f"{r['p']:g}",
            _fmt(r["p_degenerate"]),
            _fmt(r["expected_baseline"]),
            _fmt(r["bias"]),
            r["direction"],
            _fmt(r["prob_misestimate"]),
            _fmt(r["debias_constant"]),
        )
    _emit({"rows": rows}, table, as_json)


def parse_bound(text: str, G: int) -> float:
    """'0.25', '1/8' or 'k/G' (with the group size substituted) → float."""
    text = text.strip().replace("G", str(G))
    try:
        num, _, den = text.partition("/")
        return float(num) / float(den) if den else float(num)
    except ValueError:
        raise typer.BadParameter(
            f"cannot read interval bound {text!r}: use a number, a fraction like 1/8, or k/G",
            param_hint="'--interval'",
        ) from None


@bias_app.command("average")
def average_cmd(
    group_sizes: Annotated[list[str], typer.Option("--group-size", "-G", help="Group sizes G, e.g. 2-8 or 4,8.")] = [
        "2-8"
    ],
    intervals: Annotated[
        list[str],
        typer.Option(
            "--interval",
            "-i",
            help="Interval LO:HI of p (repeat). Bounds are numbers, fractions (1/8) or multiples of 1/G (2/G).",
        ),
    ] = DEFAULT_INTERVALS,
    direction: Annotated[
        str,
        typer.Option(
            "--direction",
            help="Which mis-estimate: auto (per interval: under when it starts below 1/2, as in the paper's "
            "Tables 4-6, over otherwise), under or over.",
        ),
    ] = "auto",
    as_json: Annotated[bool, JsonFlag] = False,
) -> None:
    """Probability of a mis-estimate given S for p ~ Uniform[LO, HI], ε → 0 (Corollaries 1–3)."""
    from hadw.theory import binary

    group_sizes = _check_groups(group_sizes)
    if direction not in binary.DIRECTIONS:
        raise typer.BadParameter(f"must be one of {binary.DIRECTIONS}", param_hint="'--direction'")
    rows = []
    for spec in intervals:
        if spec.count(":") != 1:
            raise typer.BadParameter(f"{spec!r} is not LO:HI", param_hint="'--interval'")
        for G in group_sizes:
            lo, hi = (parse_bound(s, G) for s in spec.split(":"))
            if not 0 <= lo < hi <= 1:
                raise typer.BadParameter(f"{spec!r} at G={G} gives [{lo}, {hi}]; need 0 ≤ LO < HI ≤ 1")
            # Tables 4-6 average one event over the whole interval: under-estimation on intervals of hard
            # prompts, even where (0, 2/G) reaches past 1/2 for G ≤ 3 (G = 2, 3 give 0.5, 0.75).
            event = direction if direction != "auto" else ("under" if lo < 0.5 else "over")
            value = float(binary.interval_average(G, lo, hi, event))
            rows.append({"G": G, "interval": spec, "lo": lo, "hi": hi, "direction": event, "average": value})
    table = _table(
        f"P(mis-estimate | S, p ~ U[LO, HI]), ε → 0, direction = {direction}",
        ["interval", *(f"G={G}" for G in group_sizes)],
    )
    for spec in intervals:
        _row(table, spec, *(f"{r['average']:.4f}" for r in rows if r["interval"] == spec))
    _emit({"rows": rows}, table, as_json)


@bias_app.command("lambda")
def lambda_cmd(
    p_hat: Annotated[float, typer.Option("--p-hat", help="Observed group success rate p̂ ∈ (0, 1).")],
    anchor: Annotated[float, typer.Option("--anchor", help="Difficulty anchor C ∈ [0, 1] (e.g. recent accuracy).")],
    group_size: Annotated[int, typer.Option("--group-size", "-G", help="Group size G ≥ 2.")] = 8,
    margin: Annotated[float, typer.Option("--margin", help="Δ ∈ (0, 1/2]: the true p is assumed in [Δ, 1−Δ].")] = 0.1,
    delta: Annotated[float, typer.Option("--delta", help="δ ∈ (0, 1): failure probability of the range.")] = 0.1,
    eps: Annotated[float, typer.Option("--eps", help="ε > 0: allowed error of the rectified baseline.")] = 0.1,
    as_json: Annotated[bool, JsonFlag] = False,
) -> None:
    """λ_scale range of Theorem 3 (via Lemma 1's c_low, c_high) for correct and incorrect responses."""
    from hadw.theory import rectified

    _check_groups([group_size])
    try:
        li = rectified.lambda_interval(p_hat, anchor, group_size, margin, delta, eps)
        cb = rectified.c_bounds(p_hat, group_size, margin, delta, eps)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    data = {name: float(v) for name, v in li._asdict().items()}
    data.update(
        p_hat=p_hat,
        anchor=anchor,
        G=group_size,
        Delta=margin,
        delta=delta,
        eps=eps,
        eps_delta=float(cb.eps_delta),
        I_lo=float(cb.I_lo),
        I_hi=float(cb.I_hi),
        both_empty=bool(not li.both_lo < li.both_hi),
    )
    table = _table(
        f"λ_scale range (Theorem 3): p̂={p_hat:g}, C={anchor:g}, G={group_size}, Δ={margin:g}, δ={delta:g}, ε={eps:g}",
        ["quantity", "value"],
    )
    _row(table, "ε_δ", _fmt(data["eps_delta"]))
    _row(table, "I", f"[{_fmt(data['I_lo'])}, {_fmt(data['I_hi'])}]")
    _row(table, "(c_low, c_high)", f"({_fmt(data['c_low'])}, {_fmt(data['c_high'])})")
    _row(table, "M = |p̂ − C|", _fmt(data["M"]))
    _row(table, f"λ, correct (D={data['D_correct']:+g})", f"({_fmt(li.correct_lo)}, {_fmt(li.correct_hi)})")
    _row(table, f"λ, incorrect (D={data['D_incorrect']:+g})", f"({_fmt(li.incorrect_lo)}, {_fmt(li.incorrect_hi)})")
    _row(table, "λ, both", "empty" if data["both_empty"] else f"({_fmt(li.both_lo)}, {_fmt(li.both_hi)})")
    _emit(data, table, as_json)


def parse_distribution(spec: str):
    """'beta:A,B' or 'truncnorm:MU,XI' → frozen scipy distribution on [0, 1]."""
    from hadw.theory import continuous

    family, _, params = spec.partition(":")
    makers = {"beta": continuous.beta_rewards, "truncnorm": continuous.truncated_gaussian_rewards}
    try:
        values = [float(x) for x in params.split(",")]
        if family not in makers or len(values) != 2:
            raise ValueError
        return makers[family](*values)
    except ValueError as err:
        raise typer.BadParameter(
            f"{spec!r}: use beta:ALPHA,BETA or truncnorm:MU,XI with valid parameters ({err})",
            param_hint="'--dist'",
        ) from None


@bias_app.command("continuous")
def continuous_cmd(
    dists: Annotated[
        list[str],
        typer.Option(
            "--dist",
            "-d",
            help="Reward distribution on [0, 1]: beta:ALPHA,BETA or truncnorm:MU,XI (N(MU, XI²) truncated to "
            "[0, 1]); repeat for several.",
        ),
    ] = DEFAULT_DISTS,
    group_sizes: Annotated[list[str], GroupSizes] = [",".join(map(str, DEFAULT_G))],
    sigma: Annotated[float, typer.Option("--sigma", help="σ ∈ [0, 1): a group updates when max r − min r > σ.")] = 0.1,
    as_json: Annotated[bool, JsonFlag] = False,
) -> None:
    """Bias of the group-mean baseline for continuous rewards (Theorem 4, with the corrected 1/G)."""
    import numpy as np

    from hadw.theory import continuous

    group_sizes = _check_groups(group_sizes)
    if not 0 <= sigma < 1:
        raise typer.BadParameter("must lie in [0, 1)", param_hint="'--sigma'")
    rows = []
    for spec in dists:
        res = continuous.continuous_theory(parse_distribution(spec), np.asarray(group_sizes), sigma)
        for j, G in enumerate(group_sizes):
            rows.append(
                {
                    "dist": spec,
                    "mean": res.mean,
                    "G": G,
                    "sigma": sigma,
                    "p_no_update": float(res.p_no_update[j]),
                    "expected_baseline": float(res.expected_baseline[j]),
                    "bias": float(res.bias[j]),
                }
            )
    table = _table(
        f"Continuous rewards: bias given an update (σ = {sigma:g})",
        ["distribution", "mean p", "G", "P(no update)", "E[p̂|S_σ]", "bias A−E[Â|S_σ]"],
    )
    for r in rows:
        _row(
            table,
            r["dist"],
            f"{r['mean']:.4f}",
            str(r["G"]),
            _fmt(r["p_no_update"]),
            _fmt(r["expected_baseline"]),
            _fmt(r["bias"]),
        )
    _emit({"rows": rows}, table, as_json)


@bias_app.command("plot")
def plot_cmd(
    out_dir: Annotated[Path, typer.Option("--out-dir", "-o", help="Folder for the PNG files (created).")] = Path("."),
    group_sizes: Annotated[list[str], typer.Option("--group-size", "-G", help="Group sizes G, e.g. 2,8.")] = [
        "2,4,8,16,32"
    ],
    sigma: Annotated[
        float, typer.Option("--sigma", help="σ of the continuous-reward figure (update if range > σ).")
    ] = 0.1,
    concentration: Annotated[
        float, typer.Option("--concentration", help="α + β of the Beta rewards in the continuous-reward figure.")
    ] = 4.0,
    points: Annotated[
        int, typer.Option("--points", help="Mean rewards evaluated in the continuous figure (≥ 2).")
    ] = 25,
    as_json: Annotated[bool, JsonFlag] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace existing PNG files of these names that hadw did not draw.")
    ] = False,
) -> None:
    """Write bias_binary.png (|bias| vs p per G, Figure 2) and bias_continuous.png (Beta rewards, Figure 5)."""
    from hadw.safe_files import check_figure
    from hadw.theory import plots  # matplotlib only when plotting

    group_sizes = _check_groups(group_sizes)
    if points < 2 or concentration <= 0 or not 0 <= sigma < 1:
        raise typer.BadParameter("need --points ≥ 2, --concentration > 0 and 0 ≤ --sigma < 1")
    binary_path, continuous_path = out_dir / "bias_binary.png", out_dir / "bias_continuous.png"
    for path in (binary_path, continuous_path):  # both before drawing either
        check_figure(path, f"--out-dir {path.name}", overwrite)
    data_binary = plots.plot_binary_bias(binary_path, group_sizes)
    data_cont = plots.plot_continuous_bias(continuous_path, group_sizes, sigma, concentration, points)
    data = {
        "binary_png": str(binary_path),
        "continuous_png": str(continuous_path),
        "sigma": sigma,
        "concentration": concentration,
        "binary": data_binary,
        "continuous": data_cont,
    }
    table = _table("Figures written", ["figure", "path"], right=False)
    _row(table, "|bias| vs p (binary, Figure 2)", str(binary_path))
    _row(table, f"bias vs mean (Beta, κ={concentration:g}, σ={sigma:g})", str(continuous_path))
    _emit(data, table, as_json)


def register(app: typer.Typer) -> None:
    app.add_typer(bias_app, name="bias")
