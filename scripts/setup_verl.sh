#!/usr/bin/env bash
# Make verl's estimator code importable for the tests, without a second torch or a GPU stack.
#
# A full `pip install verl` pulls ray[default], vllm-era pins (transformers<5.11, numpy>=2, wandb, ...) and
# is unusable beside this project's .venv. The grpo_hadw tests import verl.trainer.ppo.core_algos (verl/__init__:
# ray, tensordict, ...), verl.trainer.ppo.ray_trainer (compute_advantage: + torchdata, cachetools, fastapi,
# starlette, uvicorn, opentelemetry-api), verl.trainer.ppo.v1.utils (the v1 trainer's
# compute_advantage_for_multi_trajectories: + TransferQueue, pyzmq, msgspec, prometheus_client) and
# verl.utils.tracking / verl.utils.metric. Everything else they import (pandas, pyarrow, datasets, peft,
# accelerate, transformers, omegaconf, pydantic, anyio, click, h11, ...) is already in .venv. So: verl and exactly those packages go,
# pinned and --no-deps, into the folder .venv-verl (a `pip --target` library folder, not a venv); the tests
# APPEND it to sys.path of the main .venv, so the main venv's torch/transformers/numpy always win.
# ~300 MB, ~30-60 s. Idempotent. Override the folder with VERL_LIB=... and the version with VERL_VERSION=...
set -euo pipefail
cd "$(dirname "$0")/.."
VERL_LIB=${VERL_LIB:-.venv-verl}
VERL_VERSION=${VERL_VERSION:-0.9.1}
PACKAGES_VERSION=2  # bump when the list below changes: an existing $VERL_LIB is then rebuilt
MARKER="$VERL_LIB/.complete-$VERL_VERSION-packages$PACKAGES_VERSION"
PIP=".venv/bin/python -m pip"
if [ -f "$MARKER" ]; then
  exit 0
fi
rm -rf "$VERL_LIB"
$PIP install -q --disable-pip-version-check --no-deps --target "$VERL_LIB" \
  "verl==$VERL_VERSION" "ray==2.60.0" "tensordict==0.10.0" "pyvers>=0.1,<0.2" \
  "codetiming==1.4.0" "hydra-core==1.3.8" "cloudpickle>=3" "orjson>=3" "importlib_metadata>=8" "zipp>=3" \
  "msgpack>=1" "jsonschema>=4" "jsonschema-specifications" "referencing" "rpds-py" "attrs>=23" \
  "requests>=2" "urllib3>=2" "idna" "charset-normalizer" "certifi" \
  "torchdata==0.11.0" "cachetools==8.0.3" "fastapi==0.165.0" "starlette==1.10.0" "uvicorn==0.55.0" \
  "opentelemetry-api==1.45.3" "TransferQueue==0.1.11" "pyzmq==27.3.0" "msgspec==0.23.0" "prometheus-client==0.26.0"
touch "$MARKER"
