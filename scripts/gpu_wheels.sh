#!/usr/bin/env bash
# Fetch, on a machine WITH registry access, the Python 3.12 wheels a GPU machine's image lacks, into ./.whl
# (ignored by git; carry it to the GPU machine and run scripts/gpu_check.sh there). What the image has (a
# CUDA torch, transformers, huggingface_hub, accelerate, pyarrow, pandas, scipy, pytest + xdist, typer, rich,
# ...) is used as it is: its newer hub wheels would pull dependencies it cannot fetch. Versions: those this
# checkout's .venv tests with, so the GPU run tests what CI tests.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${WHEELS:-.whl}
PY=${PY_VERSION:-3.12}
NAMES="math-verify latex2sympy2_extended antlr4-python3-runtime omegaconf datasets dill multiprocess trl"
pins=$(.venv/bin/python -m pip list --format=freeze 2>/dev/null | grep -i -E "^($(echo "$NAMES" | tr ' ' '|'))==")
mkdir -p "$OUT"
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any -d "$OUT" $pins
echo "$(ls "$OUT"/*.whl | wc -l) wheels in $OUT ($(du -sh "$OUT" | cut -f1)): $(echo $pins)"
