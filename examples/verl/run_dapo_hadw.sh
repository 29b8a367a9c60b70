#!/usr/bin/env bash
# DAPO + HA-DW (paper Table 8): decoupled clip 0.2 / 0.28, token mean over the batch, 9 epochs.
# Like the paper, dynamic sampling is off: with algorithm.filter_groups.enable=True verl drops degenerate
# groups BEFORE the estimator, so the anchor would see the filtered batch, not all responses (docs/method.md §3.1).
# Overlong reward shaping is left off so the 0/1 MATH reward stays the correctness signal; if you add a
# shaped reward, keep correct_threshold such that "score > threshold" still means "correct".
EXP_NAME=${EXP_NAME:-qwen3-4b-dapo-hadw}
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
python3 -m verl.trainer.main_ppo "${COMMON_ARGS[@]}" \
  actor_rollout_ref.actor.policy_loss.loss_mode=vanilla \
  actor_rollout_ref.actor.clip_ratio_low=0.2 \
  actor_rollout_ref.actor.clip_ratio_high=0.28 \
  actor_rollout_ref.actor.loss_agg_mode=token-mean \
  algorithm.filter_groups.enable=False \
  trainer.total_epochs=9 "$@"
