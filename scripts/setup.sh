#!/usr/bin/env bash
# Create .venv (once) and install hadw with its test extras. torch==2.13.0 goes in first, on its own:
# an unpinned torch pulled in by another package would fetch a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# torch's CPU build, explicitly: on Linux PyPI's torch is the CUDA build (GBs of nvidia wheels). For a GPU
# machine set both, e.g. TORCH_SPEC=torch==2.13.0 TORCH_INDEX=https://download.pytorch.org/whl/cu128.
if [ "$(uname -s)" = "Linux" ]; then
  TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0+cpu}
else  # macOS and Windows wheels on PyPI are the CPU (or MPS) build already, without the +cpu label
  TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
fi
TORCH_INDEX=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
.venv/bin/python -m pip install -q --retries 1 --extra-index-url "$TORCH_INDEX" "$TORCH_SPEC"
.venv/bin/python -m pip install -q -e ".[test]"
