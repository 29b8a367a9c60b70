#!/usr/bin/env bash
# Set everything up and run the whole test suite (lint first).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/offline_env.sh
.venv/bin/ruff check src tests benchmarks examples
.venv/bin/python -m pytest -q "$@"
