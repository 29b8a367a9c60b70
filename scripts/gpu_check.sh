#!/usr/bin/env bash
# One prepared check for a GPU machine with no network: install what it lacks from carried wheels, then run
# the demo, a 135 M-shaped bf16 training run, the TRL adapter in bf16, eval with samples and the whole test
# suite, with one summary at the end. Usage (wheels from scripts/gpu_wheels.sh):
#     WHEELS=wheels bash scripts/gpu_check.sh
# Everything goes into a fresh folder ($CHECK_DIR, default a new temporary one): a warm machine keeps earlier
# installs, which must not leak into this run. The machine's own torch / transformers are used as they are.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-wheels}
CHECK_DIR=${CHECK_DIR:-$(mktemp -d /tmp/hadw-gpu-check.XXXX)}
LOG=$CHECK_DIR/logs
mkdir -p "$LOG"
source scripts/offline_env.sh
declare -a SUMMARY=()
step() {  # step NAME COMMAND...: run, time, keep the log, record the outcome
  local name=$1; shift
  local t0=$SECONDS
  "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  SUMMARY+=("$(printf '%-12s rc=%-3s %5ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$LOG/$name.log")")
  return $rc
}

# 1. A venv that sees the machine's torch/transformers and gets the rest from the carried wheels only.
python3 -m venv --system-site-packages "$CHECK_DIR/venv"
PY=$CHECK_DIR/venv/bin/python
step install bash -c "'$PY' -m pip install -q --no-index --find-links '$WHEELS' -r '$WHEELS/requirements.txt' \
  && '$PY' -m pip install -q --no-index --no-deps --no-build-isolation -e ." || { printf '%s\n' "${SUMMARY[@]}"; exit 1; }
HADW=$CHECK_DIR/venv/bin/hadw
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
  torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'NO GPU', 'transformers', transformers.__version__)" \
  | tee "$LOG/versions.txt"

# 2. The README's first command.
step demo "$HADW" demo --out-dir "$CHECK_DIR/demo"

# 3. A 135 M-shaped Llama (49 k vocabulary), bf16 compute on fp32 master weights; then eval with samples.
"$PY" -c "import sys; sys.path.insert(0, 'benchmarks'); from bench_models import MODELS; \
from hadw.rollout import build_tiny_model; build_tiny_model('$CHECK_DIR/m135', **MODELS['135M'])" > "$LOG/build.log" 2>&1
step train135 "$HADW" train model.path="$CHECK_DIR/m135" model.compute_dtype=bfloat16 optim.lr=1e-6 \
  train.steps=5 train.prompts_per_step=8 rollout.group_size=8 rollout.max_new_tokens=128 \
  train.output_dir="$CHECK_DIR/train135"
step eval135 "$HADW" eval "$CHECK_DIR/m135" --data task:sums --limit 32 -k 4 --dtype bfloat16 \
  --samples "$CHECK_DIR/samples.jsonl" --json "$CHECK_DIR/eval135.json"

# 4. The TRL adapter in bf16 (two steps, HA-DW metrics logged).
step trl "$PY" -m pytest -q -x tests/test_integration_trl.py -k "not two_processes" -p no:cacheprovider

# 5. The whole suite, with the GPU visible.
step tests "$PY" -m pytest -q -p no:cacheprovider

echo
echo "== hadw GPU check: $(cat "$LOG/versions.txt")"
printf '%s\n' "${SUMMARY[@]}"
grep -A8 "greedy" "$LOG/demo.log" | tail -12
tail -1 "$LOG/tests.log"
