#!/usr/bin/env bash
# Fetch, on a machine WITH registry access, the Python 3.12 wheels a bare GPU machine lacks, into ./wheels
# (then carry that folder to the GPU machine and run scripts/gpu_check.sh there). torch, transformers,
# huggingface_hub and tokenizers are left out on purpose: the GPU machine keeps its own (a CUDA torch, and a
# hub whose newer wheels would pull dependencies it cannot fetch).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${WHEELS:-wheels}
PY=${PY_VERSION:-3.12}
mkdir -p "$OUT"
# Resolve the whole dependency set for Python $PY, then download it without the packages the machine keeps.
report=$(mktemp)
python3 -m pip install -q --dry-run --ignore-installed --only-binary=:all: --python-version "$PY" \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any --target "$(mktemp -d)" \
  --report "$report" "math-verify[antlr4_13_2]>=0.8" "omegaconf>=2.3" "datasets>=3" "trl>=1.0,<2" "accelerate>=1.0" \
  "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6.100" "typer>=0.12" "rich>=13" "scipy>=1.12" "matplotlib>=3.8"
python3 - "$report" > "$OUT/requirements.txt" <<'PY'
import json, re, sys
# What a CUDA torch + transformers image already has (torch's and transformers' own dependencies).
keep_theirs = re.compile(
    r"^(torch|triton|nvidia-.*|cuda-.*|transformers|huggingface-hub|tokenizers|safetensors|hf-xet|kernels|numpy|"
    r"sympy|mpmath|networkx|jinja2|markupsafe|filelock|fsspec|typing-extensions|pyyaml|regex|requests|urllib3|"
    r"idna|certifi|charset-normalizer|tqdm|packaging|setuptools)$"
)
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    if not keep_theirs.match(meta["name"].lower().replace("_", "-")):
        print(f"{meta['name']}=={meta['version']}")
PY
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --platform manylinux_2_28_x86_64 \
  --platform manylinux2014_x86_64 --platform any -d "$OUT" -r "$OUT/requirements.txt"
# The device tool carries at most 64 MiB of ignored files: pyarrow (datasets) and scipy are most of it.
echo "$(ls "$OUT"/*.whl | wc -l) wheels in $OUT ($(du -sh "$OUT" | cut -f1)); largest:"
ls -S -s "$OUT" | sed -n 2,6p
