#!/usr/bin/env bash
# One prepared check for a GPU machine with no network: install what it lacks from carried wheels, then
# measure GPU rollouts (benchmarks/speed/rollout_gpu.py, on a quiet GPU), then, side by side, the whole test suite
# (pytest -n 8) and the demo, a 135 M-shaped bf16 training run, eval with samples, the TRL adapter in bf16,
# and `hadw train engine=trl` (vLLM colocated where vllm is installed) with hadw eval and hadw compare on its
# runs; one summary at the end. Usage (wheels from scripts/gpu_wheels.sh, default folder .whl):
#     WHEELS=.whl bash scripts/gpu_check.sh            # logs and reports also go to $OUT when it is set
# Everything goes into a fresh folder ($CHECK_DIR, default a new temporary one): a warm machine keeps earlier
# installs, which must not leak into this run. The machine's own torch / transformers are used as they are.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-.whl}
CHECK_DIR=${CHECK_DIR:-$(mktemp -d /tmp/hadw-gpu-check.XXXX)}
LOG=$CHECK_DIR/logs
mkdir -p "$LOG"
source scripts/offline_env.sh
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
SUMMARY=$CHECK_DIR/summary.txt
step() {  # step NAME COMMAND...: run, time, keep the log, record the outcome
  local name=$1; shift
  local t0=$SECONDS
  "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  printf '%-10s rc=%-3s %5ss\n' "$name" "$rc" "$((SECONDS - t0))" >> "$SUMMARY"
  return $rc
}

# 1. The carried wheels into a fresh folder, this checkout's src beside them (no build, no network).
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$CHECK_DIR/site" "$WHEELS"/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=$CHECK_DIR/site:$PWD/src
HADW=("$PY" -m hadw.cli)
"$PY" -c "import torch, transformers, datasets, pyarrow, trl, math_verify, omegaconf; print('torch', torch.__version__, \
'cuda', torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'NO GPU', '| transformers', \
transformers.__version__, 'trl', trl.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__)" \
  2>&1 | tee "$LOG/versions.txt"

# 2. GPU rollouts, alone on the card: every decoder vs transformers' generate, 135 M shape.
step bench timeout "${BENCH_S:-180}" "$PY" benchmarks/speed/rollout_gpu.py --report "$CHECK_DIR/rollout_gpu.md"

# 3. The suite, and beside it the demo and the 135 M-shaped runs (one GPU, 139 GB: room for all).
step tests timeout "${JOB_S:-270}" "$PY" -m pytest -v -n 8 --durations=10 -p no:cacheprovider &
tests_pid=$!
step demo timeout "${JOB_S:-270}" "${HADW[@]}" demo --out-dir "$CHECK_DIR/demo" &
demo_pid=$!
(  # each step capped, so that the chain ends within JOB_S too
  "$PY" -c "import sys; sys.path.insert(0, 'benchmarks'); from bench_models import MODELS; \
from hadw.rollout import build_tiny_model; build_tiny_model('$CHECK_DIR/m135', **MODELS['135M'])" > "$LOG/build.log" 2>&1
  step train135 timeout 150 "${HADW[@]}" train model.path="$CHECK_DIR/m135" model.compute_dtype=bfloat16 optim.lr=1e-6 \
    train.steps=5 train.prompts_per_step=8 rollout.group_size=8 rollout.max_new_tokens=128 \
    train.output_dir="$CHECK_DIR/train135"
  step eval135 timeout 60 "${HADW[@]}" eval "$CHECK_DIR/m135" --data task:sums --limit 32 -k 4 --dtype bfloat16 \
    --samples "$CHECK_DIR/samples.jsonl" --json "$CHECK_DIR/eval135.json"
  step trl timeout 60 "$PY" -m pytest -q -x tests/test_integration_trl.py -k "not two_processes" -p no:cacheprovider
  # engine=trl on the GPU: vLLM colocated where the machine has vllm (its wheels are too big to carry), else
  # transformers' generate; its run folder read by hadw eval; then the same engine through hadw compare
  VLLM=none; "$PY" -c "import vllm" > /dev/null 2>&1 && VLLM=colocate
  echo "trl.vllm=$VLLM" > "$LOG/trl_vllm.txt"
  TRL_RUN=(model.path="$CHECK_DIR/m135" engine=trl trl.vllm=$VLLM trl.vllm_gpu_memory_utilization=0.2
    model.compute_dtype=bfloat16 optim.lr=1e-6 train.steps=5 train.prompts_per_step=8 rollout.group_size=8
    rollout.max_new_tokens=128 data.eval_size=32 logging.progress=off)
  step trl135 timeout 200 "${HADW[@]}" train "${TRL_RUN[@]}" train.output_dir="$CHECK_DIR/trl135"
  step trleval timeout 60 "${HADW[@]}" eval "$CHECK_DIR/trl135" --json "$CHECK_DIR/trleval.json"
  step trlcmp timeout 300 "${HADW[@]}" compare --arm grpo: --arm hadw:hadw.enabled=true --seeds 0 \
    $(printf -- '--set %s ' "${TRL_RUN[@]}") --smooth 1 --out "$CHECK_DIR/trlcmp"
) &
runs_pid=$!
wait $tests_pid $demo_pid $runs_pid

{
  echo "== hadw GPU check: $(cat "$LOG/versions.txt")"
  cat "$SUMMARY"
  echo "-- rollouts (benchmarks/speed/rollout_gpu.py)"; grep -E "^\||first call|failed" "$LOG/bench.log"
  echo "-- train135 (per step)"; "$PY" -c "import json, sys; [print({k: round(v, 3) for k, v in r.items() \
if k.startswith(('timing_s', 'perf'))}) for r in map(json.loads, open(sys.argv[1])) if 'timing_s/step' in r]" \
    "$CHECK_DIR/train135/metrics.jsonl" 2>&1 | tail -5
  echo "-- engine=trl ($(cat "$LOG/trl_vllm.txt")): per step, then hadw eval RUN_DIR"; "$PY" -c "import json, sys; \
[print({k: round(v, 3) for k, v in r.items() if k.startswith('timing_s')}) for r in map(json.loads, open(sys.argv[1]))]" \
    "$CHECK_DIR/trl135/metrics.jsonl" 2>&1 | tail -3; tail -3 "$LOG/trleval.log"; tail -12 "$LOG/trlcmp.log"
  echo "-- demo"; grep -B2 -A8 "| level" "$LOG/demo.log" | tail -12
  echo "-- tests"; grep -E " (FAILED|ERROR) " "$LOG/tests.log" | head -30; tail -1 "$LOG/tests.log"
} | tee "$CHECK_DIR/report.txt"
if [ -n "${OUT:-}" ]; then  # the device tool brings back at most 8 files: the report, the table, all logs in one
  cp "$CHECK_DIR/report.txt" "$OUT/"
  cp "$CHECK_DIR/rollout_gpu.md" "$OUT/" 2>/dev/null
  cp "$CHECK_DIR/demo/demo_results.md" "$OUT/" 2>/dev/null
  tar -czf "$OUT/logs.tar.gz" -C "$CHECK_DIR" logs train135/metrics.jsonl eval135.json trl135/metrics.jsonl \
    trl135/final_eval.json trleval.json 2>/dev/null
fi
