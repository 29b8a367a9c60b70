"""VLLMRolloutEngine: the RolloutEngine interface over vLLM's offline `LLM.generate` (GPU only).

Written against vLLM's public API (LLM, SamplingParams(logprobs=0), token-id prompts). It is not
exercised by the CPU test-suite; tests/test_rollout_vllm.py skips when vllm is not installed.
Log-probs: vLLM is started with logprobs_mode="processed_logprobs", i.e. after temperature scaling.
That equals our convention (full-vocabulary log softmax(logits / T)) only without top-k/top-p, since
vLLM renormalises over the truncated set; a warning says so, and the trainer's recomputed old
log-probs (compute_logprobs) are exact in every case.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from hadw.rollout.batch import RolloutBatch, check_prompts, left_pad, right_pad
from hadw.rollout.sampling import SamplingParams


class VLLMRolloutEngine:
    """model: a local checkpoint path, or a `transformers` model whose `name_or_path` is one."""

    def __init__(self, model, tokenizer, gpu_memory_utilization: float = 0.3, dtype: str = "auto", **llm_kwargs):
        from vllm import LLM  # ImportError here names the missing package

        path = model if isinstance(model, str | Path) else model.name_or_path
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.llm = LLM(
            model=str(path),
            tokenizer=str(path),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            logprobs_mode="processed_logprobs",
            **llm_kwargs,
        )

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy the trainer's current weights into vLLM (same process; as TRL's colocate mode does)."""
        runner_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        runner_model.load_weights(model.state_dict().items())
        self.llm.reset_prefix_cache()

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutBatch:
        from vllm import SamplingParams as VLLMSamplingParams

        check_prompts(prompts)
        if params.top_p < 1 or params.top_k > 0:
            warnings.warn(
                "VLLMRolloutEngine: with top_p < 1 or top_k > 0, vLLM's log-probs are renormalised over the "
                "truncated set (not the full-vocabulary convention); recompute old log-probs with "
                "compute_logprobs",
                stacklevel=2,
            )
        vllm_params = VLLMSamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            max_tokens=params.max_new_tokens,
            stop_token_ids=list(params.stop_token_ids or []),
            ignore_eos=params.ignore_eos,
            seed=params.seed,
            logprobs=0,  # the sampled token's log-prob only
        )
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompts], sampling_params=vllm_params, use_tqdm=False
        )
        rows = [(i, list(out.prompt_token_ids), c) for i, out in enumerate(outputs) for c in out.outputs]
        responses = [list(c.token_ids) for _, _, c in rows]
        logprobs = [[step[tok].logprob for step, tok in zip(c.logprobs, c.token_ids, strict=True)] for _, _, c in rows]
        prompt_ids, prompt_mask = left_pad([p for _, p, _ in rows], self.pad_id)
        response_ids = right_pad(responses, self.pad_id, torch.long)
        response_mask = right_pad([[1] * len(r) for r in responses], 0, torch.long)
        return RolloutBatch(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            response_ids=response_ids,
            response_mask=response_mask,
            logprobs=right_pad(logprobs, 0.0, torch.float32),
            finish_reasons=["stop" if c.finish_reason == "stop" else "length" for _, _, c in rows],
            prompt_index=torch.tensor([i for i, _, _ in rows], dtype=torch.long),
            response_texts=self.tokenizer.batch_decode(responses, skip_special_tokens=True),
        )
