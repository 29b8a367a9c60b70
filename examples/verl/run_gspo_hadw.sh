#!/usr/bin/env bash
# GSPO + HA-DW (paper Table 8): sequence-level length-normalised ratio, clip 3e-4 / 4e-4, 3 epochs.
EXP_NAME=${EXP_NAME:-qwen3-4b-gspo-hadw}
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
python3 -m verl.trainer.main_ppo "${COMMON_ARGS[@]}" \
  actor_rollout_ref.actor.policy_loss.loss_mode=gspo \
  actor_rollout_ref.actor.clip_ratio_low=0.0003 \
  actor_rollout_ref.actor.clip_ratio_high=0.0004 \
  actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
  trainer.total_epochs=3 "$@"
