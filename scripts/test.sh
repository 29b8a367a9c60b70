#!/usr/bin/env bash
# Set everything up and run the whole test suite (lint first).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# verl tests: verl + the few packages its estimator code imports, into .venv-verl (~40 s the first time).
# If this fails (no network, ...), tests/test_integration_verl.py is skipped and pytest -ra prints why.
bash scripts/setup_verl.sh || echo "scripts/setup_verl.sh failed: the verl integration tests will be skipped"
# Slurm launcher tests: Debian's slurm-wlm + munge (as root, when missing; ~25 s). The tests start and stop
# their own one-node cluster (scripts/slurm_local.sh); without the packages they skip with the reason.
bash scripts/setup_slurm.sh || echo "scripts/setup_slurm.sh failed: the Slurm launcher tests will be skipped"
source scripts/offline_env.sh
.venv/bin/ruff check src tests benchmarks examples
.venv/bin/ruff format --check src tests benchmarks examples
# Two pytest-xdist workers: the suite is CPU-bound, and the daemon tests' waits (Slurm requeues, a time limit)
# leave a core to the other worker. The Ray / Slurm module runs on one worker, first (tests/conftest.py).
.venv/bin/python -m pytest -q -n 2 --dist loadgroup "$@"
