#!/usr/bin/env bash
# GRPO + HA-DW (paper Table 8): token ratio clipped at 1 ± 0.2, per-sequence token mean, 3 epochs.
EXP_NAME=${EXP_NAME:-qwen3-4b-grpo-hadw}
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
python3 -m verl.trainer.main_ppo "${COMMON_ARGS[@]}" \
  actor_rollout_ref.actor.policy_loss.loss_mode=vanilla \
  actor_rollout_ref.actor.clip_ratio_low=0.2 \
  actor_rollout_ref.actor.clip_ratio_high=0.2 \
  actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
  trainer.total_epochs=3 "$@"
