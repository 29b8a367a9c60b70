#!/usr/bin/env bash
# Shared settings of the paper's verl runs (docs/method.md §3.3, paper Table 8), sourced by run_*_hadw.sh.
# 8 GPUs, Qwen3-4B-Base, MATH (7.5k train). Override anything with env vars or extra Hydra args ("$@").
set -euo pipefail

MODEL_PATH=${MODEL_PATH:-$HOME/models/Qwen3-4B-Base}
DATA_DIR=${DATA_DIR:-$HOME/data/math}  # verl: python examples/data_preprocess/math_dataset.py --local_save_dir $DATA_DIR
NGPUS=${NGPUS:-8}
CKPT_DIR=${CKPT_DIR:-$PWD/checkpoints/hadw/${EXP_NAME}}

# Fail before Ray starts if verl cannot see grpo_hadw (verl hides plugin import errors).
python3 -m hadw.integrations.verl

# Table 8: 256 prompts x G=8 per step; mini-batch 16 prompts (16 optimiser steps per rollout batch);
# lr 1e-6, AdamW wd 0.1, 10 warm-up steps, grad clip 1.0, no KL; prompt/response 1024/4096.
COMMON_ARGS=(
  data.train_files="$DATA_DIR/train.parquet"
  data.val_files="$DATA_DIR/test.parquet"
  data.train_batch_size=256
  data.max_prompt_length=1024
  data.max_response_length=4096
  data.filter_overlong_prompts=True
  data.truncation=error
  actor_rollout_ref.model.path="$MODEL_PATH"
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.rollout.n=8
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.temperature=1.0
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16
  actor_rollout_ref.actor.ppo_mini_batch_size=16
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.optim.weight_decay=0.1
  actor_rollout_ref.actor.optim.lr_warmup_steps=10
  actor_rollout_ref.actor.grad_clip=1.0
  actor_rollout_ref.actor.use_kl_loss=False
  actor_rollout_ref.actor.kl_loss_coef=0.0
  actor_rollout_ref.actor.entropy_coeff=0
  algorithm.use_kl_in_reward=False
  # HA-DW: the estimator, its options (algorithm.hadw.*, not in verl's schema, hence "+"), the anchor checkpoint.
  algorithm.adv_estimator=grpo_hadw
  +algorithm.hadw.enable=${HADW_ENABLE:-True}
  +algorithm.hadw.lam=${HADW_LAMBDA:-1.3}
  +algorithm.hadw.anchor=${HADW_ANCHOR:-window}
  +algorithm.hadw.anchor_options.k=${HADW_WINDOW:-10}
  +algorithm.hadw.correct_threshold=0.5
  +algorithm.hadw.metrics_file="$CKPT_DIR/hadw_metrics.jsonl"
  trainer.checkpoint_callback_class=hadw.integrations.verl.checkpoint.HADWCheckpointCallback
  trainer.default_local_dir="$CKPT_DIR"
  trainer.resume_mode=auto
  trainer.critic_warmup=0
  trainer.logger='["console","wandb"]'
  trainer.project_name=hadw
  trainer.experiment_name="$EXP_NAME"
  trainer.n_gpus_per_node="$NGPUS"
  trainer.nnodes=1
  trainer.save_freq=20
  trainer.test_freq=10
)
mkdir -p "$CKPT_DIR"
