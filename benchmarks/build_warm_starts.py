"""Build the tiny model's shipped warm starts (src/hadw/train/warm_starts/) and their manifest entries.

Each start is `hadw.experiments.demo.warm_start` (the demo's SFT: `sums` levels 2-4, until greedy accuracy 0.3 with
every level at or above the floor 0.15, checked every 50 steps, at most 1500 steps) for one SFT seed, copied into the
package with the sha256 of every file. The result depends on the CPU's kernels (hadw.train.warm_starts says why): a
rebuild on another machine gives other files, which is why they ship. Rebuilding replaces the named entries only.

Usage: python benchmarks/build_warm_starts.py --seeds 0,1,2,3 [--out runs/warm_starts]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
from pathlib import Path

import torch
import transformers

from hadw.data.tasks import TINY_LEVELS, TINY_TASK, TINY_WARM_START_ACCURACY, TINY_WARM_START_LEVEL_FLOOR
from hadw.experiments.demo import DemoSettings, warm_start
from hadw.train import warm_starts as W


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def build(seed: int, out: Path) -> W.WarmStart:
    """SFT seed `seed` (reused from `out` if built there for the same request), copied into the package."""
    settings = DemoSettings()
    folder = warm_start(out / f"seed{seed}", None, settings.sft_target, seed=seed, max_steps=settings.sft_max_steps)
    record = json.loads((folder / W.RECORD).read_text(encoding="utf-8"))
    name = f"sums{''.join(map(str, TINY_LEVELS))}-s{seed}"
    target = W.SHIPPED_DIR / name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for path in folder.iterdir():
        if path.is_file() and path.name != W.RECORD:
            shutil.copyfile(path, target / path.name)
    result = record["result"]
    return W.WarmStart(
        name=name,
        task=TINY_TASK,
        levels=tuple(TINY_LEVELS),
        sft_seed=seed,
        target=TINY_WARM_START_ACCURACY,
        level_floor=TINY_WARM_START_LEVEL_FLOOR,
        steps=result["steps"],
        accuracy=result["accuracy"],
        level_accuracy=result["level_accuracy"],
        files=W.sha256_files(target),
        built_with={
            "cpu": cpu_name(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3", help="comma-separated SFT seeds")
    parser.add_argument("--out", type=Path, default=Path("runs/warm_starts"), help="where SFT runs (reused)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the demo: one thread, the kernels a 2-core machine runs
    built = []
    for seed in args.seeds.split(","):
        try:
            built.append(build(int(seed), args.out))
        except W.WarmStartError as err:  # below the floor: not shipped (its folder stays in --out, with its record)
            print(f"SFT seed {seed}: not shipped: {err}")
    entries = json.loads(W.MANIFEST.read_text(encoding="utf-8"))["warm_starts"] if W.MANIFEST.is_file() else []
    by_name = {e["name"]: e for e in entries} | {b.name: W.manifest_entry(b) for b in built}
    manifest = {
        "about": "Shipped warm starts of the tiny model; built by benchmarks/build_warm_starts.py, read by "
        "hadw.train.warm_starts (every file's sha256 is checked on load).",
        "warm_starts": [by_name[n] for n in sorted(by_name)],
    }
    W.MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    for b in built:
        floor_ok = all(v >= b.level_floor for v in b.level_accuracy.values())
        print(b.line(), "" if floor_ok else f"BELOW THE FLOOR {b.level_floor}")


if __name__ == "__main__":
    main()
