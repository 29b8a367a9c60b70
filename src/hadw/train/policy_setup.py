"""Loading what the trainer trains: the policy (a model.path, or the tiny model from its warm start), LoRA adapters,
the KL reference, the optimiser and its warm-up, and the prompts too long for the model.

A part of hadw.train.trainer.Trainer (a mixin: its methods use the trainer's fields).
"""

from __future__ import annotations

import random
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from hadw.data import Problem, render_prompt
from hadw.data.templates import prompt_token_limit, prompt_too_long
from hadw.errors import UserError
from hadw.rollout import build_tiny_model, load_model
from hadw.rollout.models import model_load_error
from hadw.rollout.names import is_hub_id
from hadw.train.config import Config, ConfigError
from hadw.train.model_defaults import shipped_warm_start


def _check_master_weights(model) -> None:
    """Refuse to train non-float32 weights: AdamW steps below bf16/fp16 resolution would be lost."""
    dtypes = {p.dtype for p in model.parameters() if p.requires_grad}
    if dtypes - {torch.float32}:
        raise ConfigError(
            f"the model's trainable weights are {sorted(map(str, dtypes))}; train float32 master weights "
            "(model.dtype=float32) with model.compute_dtype=bfloat16 for mixed precision"
        )


def make_optimizer(model, cfg: Config, device: torch.device) -> torch.optim.Optimizer:
    """optim.name's optimiser over the model's trainable parameters (every weight; with LoRA the adapters
    only, so a checkpoint holds their optimiser state alone): AdamW (the default, as before) or plain SGD."""
    o = cfg.optim
    params = [p for p in model.parameters() if p.requires_grad]
    fused = device.type in ("cpu", "cuda")  # one kernel, no per-step copies of every weight (as TRL)
    if o.name == "sgd":  # no momentum: the step is lr × gradient, so a factor on the advantages is a factor on it
        return torch.optim.SGD(params, lr=o.lr, weight_decay=o.weight_decay)
    betas = tuple(o.betas)
    return torch.optim.AdamW(params, lr=o.lr, betas=betas, eps=o.eps, weight_decay=o.weight_decay, fused=fused)


def warmup_lambda(warmup_steps: int):
    return lambda n: min(1.0, (n + 1) / warmup_steps) if warmup_steps > 0 else 1.0


class PolicySetup:
    """The policy, its LoRA adapters and KL reference, and the prompts that fit it."""

    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % (1 << 32))
        torch.manual_seed(seed)

    def _warm_start(self, init_dir: Path) -> Path:
        """SFT the freshly built tiny model on the training task until model.tiny.warm_start_accuracy: a random
        model never earns a reward, so every GRPO group would be degenerate (no gradient)."""
        from hadw.data.tasks import TINY_WARM_START_LEVEL_FLOOR
        from hadw.train.sft import SFTConfig, below_floor, sft_warm_start

        cfg, t = self.cfg, self.cfg.model.tiny
        if not cfg.data.source.startswith("task:"):
            warnings.warn("model.tiny.warm_start_accuracy applies to task: sources only; skipped", stacklevel=2)
            return init_dir
        model, tokenizer = load_model(init_dir)
        sft = SFTConfig(
            task=cfg.data.source.split(":", 1)[1],
            levels=cfg.data.levels,
            target_accuracy=t.warm_start_accuracy,
            max_steps=t.warm_start_max_steps,
            eval_every=50,
            seed=cfg.train.seed,
        )
        result = sft_warm_start(model, tokenizer, sft, progress=cfg.logging.progress)
        print(f"warm start: {result.steps} SFT steps, greedy accuracy {result.accuracy:.3f}", file=sys.stderr)
        low = below_floor(result.history[-1], TINY_WARM_START_LEVEL_FLOOR) if result.history else {}
        if low:  # said, not silent: RL gets all-wrong groups on these levels (the demo refuses such a start)
            levels = ", ".join(f"{k} {v:.3f}" for k, v in low.items())
            print(
                f"warning: the warm start is below greedy {TINY_WARM_START_LEVEL_FLOOR} on {levels}: RL learns little "
                "there; raise model.tiny.warm_start_max_steps or start from a stronger model.path",
                file=sys.stderr,
            )
        out = self.run_dir / "warm_start_model"
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        return out

    def _load_model(self):
        m = self.cfg.model
        path = m.path
        if path:
            model_dir = Path(path)
            if not model_dir.exists() and not is_hub_id(path):  # else load_model tries it as a Hub id
                raise ConfigError(f"model.path={path}: no such folder")
            if model_dir.exists() and (not model_dir.is_dir() or not (model_dir / "config.json").is_file()):
                raise ConfigError(f"model.path={path}: not a model folder (no config.json); give a saved model folder")
        elif (shipped := shipped_warm_start(self.cfg)) is not None:  # the same file on every machine: no SFT
            from hadw.train import warm_starts as W

            path, start = W.resolve(shipped)
            print(start.line(), file=sys.stderr)
        else:
            t = m.tiny
            path = build_tiny_model(
                self.run_dir / "init_model",
                t.arch,
                t.hidden_size,
                t.num_layers,
                t.num_heads,
                t.num_kv_heads,
                t.intermediate_size,
                seed=self.cfg.train.seed,
            )
            if t.warm_start_accuracy > 0:
                path = self._warm_start(path)
        try:
            model, tokenizer = load_model(path, m.dtype, m.device, trust_remote_code=m.trust_remote_code)
        except UserError:  # e.g. offline and not cached: already one clear line
            raise
        except Exception as err:  # a damaged or mismatched folder, whatever transformers raises
            raise ConfigError(f"model.path={path}: cannot load the model: {model_load_error(err)}") from None
        if m.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        return model, tokenizer, path

    def _add_lora(self, model, base):
        """`model` with fresh LoRA adapters (model.lora.*); the base weights stay frozen."""
        try:
            from hadw.rollout.lora import LoraSettings, add_lora

            lora = self.cfg.model.lora
            settings = LoraSettings(lora.rank, lora.alpha, lora.dropout, lora.target_modules)
            model = add_lora(model, settings, base or getattr(model, "name_or_path", None))
        except ImportError as err:
            from hadw.errors import missing_extra

            raise missing_extra(err, "model.lora.enabled=true", "lora") or err from None
        except ValueError as err:  # e.g. target modules the model does not have
            raise ConfigError(f"model.lora: {' '.join(str(err).split())[:300]}") from None
        if self.cfg.model.gradient_checkpointing:  # checkpointed blocks need an input that requires grad
            model.enable_input_require_grads()
        return model

    def _load_reference(self):
        import copy

        ref = copy.deepcopy(self.model).eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref

    def _skip_long_prompts(self) -> None:
        """Drop file rows whose prompt exceeds data.max_prompt_tokens (default: the model's context minus
        rollout.max_new_tokens), counting them; a huge row would otherwise blow up memory in generation."""
        if self.source.task is not None:
            return
        limit = self.cfg.data.max_prompt_tokens or prompt_token_limit(
            self.model.config, self.cfg.rollout.max_new_tokens
        )
        # never above the context: evaluate() refuses a longer held-out prompt, at the end of the run
        limit = min(limit, prompt_token_limit(self.model.config, 0))
        chat = {"auto": "auto", "always": True, "never": False}[self.cfg.data.chat_template]

        def fits(problem: Problem) -> bool:
            text = render_prompt(problem, self.cfg.data.template, self.tokenizer, chat)
            return prompt_too_long(text, self.tokenizer, limit) is None  # a huge row is never tokenized

        kept = [p for p in self.source.problems if fits(p)]
        held_out = [p for p in self.source._held_out if fits(p)]
        skipped = len(self.source.problems) + len(self.source._held_out) - len(kept) - len(held_out)
        self.source.num_skipped = skipped
        if skipped:
            print(
                f"data.source={self.cfg.data.source}: skipped {skipped} rows whose prompt is longer than "
                f"{limit} tokens (data.max_prompt_tokens)",
                file=sys.stderr,
            )
        if not kept:
            raise ConfigError(
                f"data.source={self.cfg.data.source!r}: every training row is longer than {limit} tokens "
                "(data.max_prompt_tokens)"
            )
        self.source._held_out = held_out
        self.source.problems = kept
