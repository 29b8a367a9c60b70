"""The predictions of sim_vs_trainer.md (this folder): `hadw sim` for the `sums` 2-4 testbed, AdamW and SGD, four arms,
plus a sensitivity sweep over the sim's uncalibrated structural knobs. Prints markdown.

Usage: python benchmarks/studies/sim_vs_trainer/sim_vs_trainer.py [--seeds 0-19] [--json-dir runs/sim_vs_trainer]
The commands it runs are printed with their results; each is also a plain `hadw sim` command line.
    python benchmarks/studies/sim_vs_trainer/sim_vs_trainer.py --measured runs/s2t   # the measured table, verdicts
(reads the predictions from --json-dir and the tiny-model study's compare_grpo.json / compare_sgd_grpo.json)
    python benchmarks/studies/sim_vs_trainer/sim_vs_trainer.py --fix-check    # the predictions: check of `--tokens 3`
    python benchmarks/studies/sim_vs_trainer/sim_vs_trainer.py --fix-check --measured runs/g4   # ... its verdicts
(the check of the fix on a setting nothing was calibrated on: G = 4, AdamW, with the G = 8 calibration unchanged)
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ARMS = "grpo,grpo_lam,hadw,hadw_norm"
TRAINER_ARM = {
    "grpo_lam": "grpo_scale (advantage_scale=1.3)",
    "hadw": "hadw",
    "hadw_norm": "hadw_norm (normalize=batch)",
}
OPTIMISERS = {"adamw": [], "sgd": ["--optimizer", "sgd", "--lr", "0.0012", "--grad-clip", "0"]}
SENSITIVITY = {
    "K = 2 (binary)": ["--answers", "2"],
    "K = 8": ["--answers", "8"],
    "wrong mass spread evenly": ["--wrong-concentration", "0.34"],
    "one dominant wrong answer (0.9)": ["--wrong-concentration", "0.9"],
    "no random features": ["--features", "0"],
    "64 random features": ["--features", "64"],
    "prompt spread 0.5": ["--spread", "0.5"],
    "prompt spread 2": ["--spread", "2"],
}


def run(args: list[str], path: Path) -> dict:
    cmd = ["hadw", "sim", "--arms", ARMS, *args, "--json", str(path), "--plot", str(path.with_suffix(".png"))]
    subprocess.run([sys.executable, "-m", "hadw.cli", *cmd[1:]], check=True, capture_output=True)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["command"] = shlex.join(cmd)
    return data


def diff(data: dict, arm: str, bucket: str = "all") -> dict:
    return data["summary"][arm][bucket]["diff_vs_grpo"]["diff"]


MEASURED_ARM = {"grpo_lam": "grpo_scale", "hadw": "hadw", "hadw_norm": "hadw_norm"}


def verdicts(json_dir: Path, study: Path, key: str = "val/all/avg@4") -> str:
    """Predicted vs measured per arm: consistent when the measured mean difference lies in the prediction's
    interval widened on both sides by the measurement's 95 % half-width (the rule registered beforehand)."""
    from hadw.experiments.stats import minimal_detectable_effect

    out = [
        "| optimiser | trainer arm − grpo | predicted [95 %] | measured [95 %] (n) | p | MDE 80 % | "
        "widened interval | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for opt, prefix in (("adamw", ""), ("sgd", "sgd_")):
        pred = json.loads((json_dir / f"pred_{opt}.json").read_text(encoding="utf-8"))
        measured = json.loads((study / f"compare_{prefix}grpo.json").read_text(encoding="utf-8"))["metrics"][key]
        for arm, name in MEASURED_ARM.items():
            p, d = diff(pred, arm), measured["diffs"].get(prefix + name)
            if d is None:
                out.append(f"| {opt} | {prefix + name} | {p['mean']:+.4f} | not measured | | | | |")
                continue
            m = d["diff"]
            low, high, verdict = widened_verdict(p, m)
            mde = minimal_detectable_effect(m["n"], m["std"])
            out.append(
                f"| {opt} | {prefix + name} | {p['mean']:+.4f} [{p['low']:+.4f}, {p['high']:+.4f}] | "
                f"{m['mean']:+.4f} [{m['low']:+.4f}, {m['high']:+.4f}] ({m['n']}) | {d['p_value']:.3f} | "
                f"{mde:.4f} | [{low:+.4f}, {high:+.4f}] | {verdict} |"
            )
    return "\n".join(out)


# Later checks of the sim on settings it was not calibrated on (sim_vs_trainer.md, one section each): what the sim
# is told about the setting, its variants (name: extra options), the arms predicted, the JSON prefix.
# "fix": the sums 2-4 recipe at G = 4 (the trainer's rollout.group_size=4, all else as in the first check). The sim
# is told G and nothing else new: offsets and learning rates stay at their G = 8 calibration (lr 3e-4 with one
# token, 2.3e-4 with three).
CHECKS: dict[str, dict] = {
    "fix": {
        "setting": ["--group-size", "4"],
        "variants": {"tokens1": ["--tokens", "1"], "tokens3": ["--tokens", "3", "--lr", "2.3e-4"]},
        "arms": ("hadw", "hadw_norm"),
        "prefix": "fix_g4",
    },
}


def widened_verdict(pred: dict, measured: dict) -> tuple[float, float, str]:
    """The registered rule: consistent when the measured mean difference lies in the prediction's 95 % interval
    widened on both sides by the measurement's 95 % half-width. Returns (low, high, verdict)."""
    hw = (measured["high"] - measured["low"]) / 2
    low, high = pred["low"] - hw, pred["high"] + hw
    return low, high, "consistent" if low <= measured["mean"] <= high else "**miss**"


def check_predictions(check: str, seeds: str, json_dir: Path) -> str:
    """Markdown: the sim's arm − GRPO for one of CHECKS, per variant (one row per variant and arm)."""
    c = CHECKS[check]
    out = [
        "| sim | command | GRPO final all (L2 / L3 / L4) | trainer arm − grpo | predicted Δ avg@k all [95 %] "
        "| L2 | L3 | L4 | seeds a real run needs (SD 0.013) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, extra in c["variants"].items():
        data = run(["--seeds", seeds, *c["setting"], *extra], json_dir / f"{c['prefix']}_{name}.json")
        g = data["summary"]["grpo"]
        levels = " / ".join(f"{g[b]['final']['mean']:.3f}" for b in ("L1", "L2", "L3"))
        for arm in c["arms"]:
            d = diff(data, arm)
            per = " | ".join(f"{diff(data, arm, b)['mean']:+.4f}" for b in ("L1", "L2", "L3"))
            need = data["summary"][arm]["all"]["seeds_needed"]
            out.append(
                f"| `{' '.join(extra)}` | `{data['command']}` | {g['all']['final']['mean']:.3f} ({levels}) | "
                f"{TRAINER_ARM[arm]} | {d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}] | {per} | "
                f"{need or '>10^6'} |"
            )
    return "\n".join(out)


def check_verdicts(check: str, json_dir: Path, study: Path, key: str = "val/all/avg@4") -> str:
    """Markdown: one check's measured differences beside each variant's prediction, with the registered verdicts."""
    from hadw.experiments.stats import minimal_detectable_effect

    c = CHECKS[check]
    measured = json.loads((study / "compare_grpo.json").read_text(encoding="utf-8"))["metrics"][key]
    out = [
        "| trainer arm − grpo | sim | predicted [95 %] | measured [95 %] (n) | p | paired SD | MDE 80 % | "
        "widened interval | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in c["arms"]:
        d = measured["diffs"].get(MEASURED_ARM[arm])
        for name, extra in c["variants"].items():
            p = diff(json.loads((json_dir / f"{c['prefix']}_{name}.json").read_text(encoding="utf-8")), arm)
            sim = f"`{' '.join(extra[:2])}`"
            if d is None:
                out.append(f"| {MEASURED_ARM[arm]} | {sim} | {p['mean']:+.4f} | not measured | | | | | |")
                continue
            m = d["diff"]
            low, high, verdict = widened_verdict(p, m)
            out.append(
                f"| {MEASURED_ARM[arm]} | {sim} | {p['mean']:+.4f} [{p['low']:+.4f}, {p['high']:+.4f}] | "
                f"{m['mean']:+.4f} [{m['low']:+.4f}, {m['high']:+.4f}] ({m['n']}) | {d['p_value']:.3f} | "
                f"{m['std']:.4f} | {minimal_detectable_effect(m['n'], m['std']):.4f} | [{low:+.4f}, {high:+.4f}] | "
                f"{verdict} |"
            )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-19")
    parser.add_argument("--json-dir", type=Path, default=Path("runs/sim_vs_trainer"))
    parser.add_argument("--measured", type=Path, default=None, help="the hadw_effect.py --out folder of the study")
    parser.add_argument("--fix-check", action="store_true", help="the G = 4 check of --tokens 3 (= --check fix)")
    parser.add_argument("--check", choices=list(CHECKS), default=None, help="one of the later checks instead")
    a = parser.parse_args()
    check = "fix" if a.fix_check else a.check
    if check is not None:
        a.json_dir.mkdir(parents=True, exist_ok=True)
        print(
            check_verdicts(check, a.json_dir, a.measured)
            if a.measured
            else check_predictions(check, a.seeds, a.json_dir)
        )
        return
    if a.measured is not None:
        print(verdicts(a.json_dir, a.measured))
        return
    a.json_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for opt, extra in OPTIMISERS.items():
        data = run(["--seeds", a.seeds, *extra], a.json_dir / f"pred_{opt}.json")
        g = data["summary"]["grpo"]
        out.append(f"\n**{opt}** — `{data['command']}`\n")
        start = " / ".join(f"{g[b]['start']:.3f}" for b in ("L1", "L2", "L3", "all"))
        final = " / ".join(f"{g[b]['final']['mean']:.3f}" for b in ("L1", "L2", "L3", "all"))
        out.append(f"GRPO: start {start}, final {final} (sums L2 / L3 / L4 / all)\n")
        out.append(
            "| trainer arm − grpo | sim arm | predicted Δ avg@k all [95 % over 20 sim seeds] | L2 | L3 | L4 "
            "| seeds a real run needs (SD 0.013) |"
        )
        out.append("|---|---|---|---|---|---|---|")
        for arm in ("grpo_lam", "hadw", "hadw_norm"):
            d = diff(data, arm)
            levels = " | ".join(f"{diff(data, arm, b)['mean']:+.4f}" for b in ("L1", "L2", "L3"))
            need = data["summary"][arm]["all"]["seeds_needed"]
            out.append(
                f"| {TRAINER_ARM[arm]} | {arm} | {d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}] | "
                f"{levels} | {need or '>10^6'} |"
            )
        rows = []
        for name, knob in SENSITIVITY.items():
            tag = name.split(" (")[0].replace(" ", "_").replace("=", "").replace(".", "")
            s = run(["--seeds", "0-9", *extra, *knob], a.json_dir / f"sens_{opt}_{tag}.json")
            g_all = s["summary"]["grpo"]["all"]["final"]["mean"]
            deltas = " | ".join(f"{diff(s, arm)['mean']:+.4f}" for arm in ("grpo_lam", "hadw", "hadw_norm"))
            rows.append(f"| {name} (`{' '.join(knob)}`) | {g_all:.3f} | {deltas} |")
        out.append(f"\nSensitivity ({opt}; 10 sim seeds; one uncalibrated knob changed at a time):\n")
        out.append("| knob | GRPO final all | Δ grpo_lam | Δ hadw | Δ hadw_norm |")
        out.append("|---|---|---|---|---|")
        out.extend(rows)
    print("\n".join(out))


if __name__ == "__main__":
    main()
