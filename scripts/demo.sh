#!/usr/bin/env bash
# Set everything up and run the demo: GRPO vs GRPO+HA-DW on a tiny model, on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/offline_env.sh
.venv/bin/hadw demo "$@"
