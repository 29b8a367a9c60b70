#!/usr/bin/env bash
# Make verl's estimator code importable for the tests, without a second torch or a GPU stack.
#
# A full `pip install verl` pulls ray[default], vllm-era pins (transformers<5.11, numpy>=2, wandb, ...) and
# is unusable beside this project's .venv. The grpo_hadw tests need only verl.trainer.ppo.core_algos, which
# imports verl/__init__ (ray, tensordict) and a few light packages. So: verl and exactly those packages go,
# pinned and --no-deps, into the folder .venv-verl (a `pip --target` library folder, not a venv); the tests
# APPEND it to sys.path of the main .venv, so the main venv's torch/transformers/numpy always win.
# ~300 MB, ~30-60 s. Idempotent. Override the folder with VERL_LIB=... and the version with VERL_VERSION=...
set -euo pipefail
cd "$(dirname "$0")/.."
VERL_LIB=${VERL_LIB:-.venv-verl}
VERL_VERSION=${VERL_VERSION:-0.9.1}
PIP=".venv/bin/python -m pip"
if [ -f "$VERL_LIB/.complete-$VERL_VERSION" ]; then
  exit 0
fi
rm -rf "$VERL_LIB"
$PIP install -q --disable-pip-version-check --no-deps --target "$VERL_LIB" \
  "verl==$VERL_VERSION" "ray==2.60.0" "tensordict==0.10.0" "pyvers>=0.1,<0.2" \
  "codetiming==1.4.0" "hydra-core==1.3.8" "cloudpickle>=3" "orjson>=3" "importlib_metadata>=8" "zipp>=3" \
  "msgpack>=1" "jsonschema>=4" "jsonschema-specifications" "referencing" "rpds-py" "attrs>=23" \
  "requests>=2" "urllib3>=2" "idna" "charset-normalizer" "certifi"
touch "$VERL_LIB/.complete-$VERL_VERSION"
