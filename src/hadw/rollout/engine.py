"""HFRolloutEngine: batched sampling with a `transformers` model and its KV cache, plus `make_engine`.

One loop, no `model.generate`: prefill each distinct left-padded prompt once (its G rows share the
cache), then feed one token per row per step, through FusedDecoder (Llama / Qwen2 on a CPU, with or
without peft LoRA adapters), its static-shape step replayed as a CUDA graph (GraphedDecoder: Llama / Qwen2
on a GPU) or the model's forward with a DynamicCache. Position ids come from the attention mask (as in
`compute_logprobs`), so the log-probs recorded here equal a teacher-forced re-scoring of the same tokens
(to float rounding, ~1e-6). Randomness comes only from a torch.Generator seeded by `params.seed`, so
torch's global RNG state is never touched. Each phase is tagged with torch.profiler.record_function
("rollout/prefill", "rollout/forward", "rollout/sample", "rollout/bookkeeping") so a profiler shows
where the time goes (benchmarks/speed/rollout_speed.py).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from hadw.rollout.batch import RolloutBatch, RolloutEngine, check_prompts, left_pad
from hadw.rollout.fused import FusedDecoder, fused_unsupported
from hadw.rollout.graphed import GraphedDecoder
from hadw.rollout.logprobs import cache_kwarg, prefill_shared, prompt_groups
from hadw.rollout.memory import rows_per_chunk
from hadw.rollout.models import model_device
from hadw.rollout.names import DECODERS
from hadw.rollout.sampling import SamplingParams, sample_next_token


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """The tokenizer's EOS plus the model's generation_config EOS ids (what `generate` stops on)."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if config_eos is not None:
        ids.update(config_eos if isinstance(config_eos, list) else [config_eos])
    return ids


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The lower precision autocast computes matmuls in on `device` when it is on (the trainer's
    model.compute_dtype=bfloat16), else None. FusedDecoder casts its weights to it once per `generate` call,
    rather than autocast re-casting every weight on every decode step."""
    return torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None


def no_autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast off on `device` (FusedDecoder's weights already carry the mixed precision)."""
    return torch.autocast(device.type, enabled=False)


class HFRolloutEngine:
    """RolloutEngine over a `transformers` causal LM (any device, any dtype).

    decoder: how the prefill and the one-token steps run. "fused": hadw's FusedDecoder (Llama / Qwen2
    only; ×1.3 the tokens/s of "hf" on a CPU at 64 rows × 64 new tokens, ×1.05–1.2 for 6-token answers,
    benchmarks/speed/roofline.py); "graph": FusedDecoder's weights with a static-shape step replayed as one
    CUDA graph per chunk (GraphedDecoder; Llama / Qwen2; on a CPU the same step runs eagerly, for tests;
    opt-in until it has been measured on a GPU: benchmarks/speed/rollout_gpu.py, scripts/gpu_check.sh);
    "hf": the model's own forward with a DynamicCache; "auto": fused for float32 weights on a CPU when the
    model supports it, else hf (on a GPU transformers' SDPA kernels are kept). A peft LoRA model
    (`model.lora.*`) runs fused / graph too: the adapters are merged into the fused weights' copies once
    per chunk, the base weights alone inside `reference_policy` (`fused_unsupported` names what is refused).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        max_batch_size: int | None = None,
        decoder: str = "auto",
        memory_budget_gb: float | None = None,
    ):
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"HFRolloutEngine: max_batch_size={max_batch_size} must be >= 1 or None")
        if memory_budget_gb is not None and not memory_budget_gb > 0:
            raise ValueError(f"HFRolloutEngine: memory_budget_gb={memory_budget_gb} must be > 0 or None")
        if decoder not in DECODERS:
            raise ValueError(f"HFRolloutEngine: decoder={decoder!r}; allowed: {list(DECODERS)}")
        reason = fused_unsupported(model)
        if decoder in ("fused", "graph") and reason:
            raise ValueError(f"HFRolloutEngine: decoder={decoder!r} cannot run this model: {reason}")
        self.decoder = decoder
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        # Rows per chunk are also capped by the K/V cache and logits they need (hadw.rollout.memory);
        # None: half of the memory available when a generate call starts.
        self.memory_budget = None if memory_budget_gb is None else int(memory_budget_gb * 1024**3)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if self.pad_id is None:
            raise ValueError("HFRolloutEngine: tokenizer has neither pad_token_id nor eos_token_id")
        self.eos_ids = eos_token_ids(model, tokenizer)
        self._cache_arg = cache_kwarg(model) or "past_key_values"

    def uses_fused(self) -> bool:
        """Whether prefill and decode steps run through FusedDecoder's weights (fused or graph)."""
        return self.resolved_decoder() in ("fused", "graph")

    def resolved_decoder(self) -> str:
        """The decoder this call runs: "fused", "graph" or "hf" (decided per call: the device may change)."""
        if self.decoder != "auto":
            return self.decoder
        # Where it is measured and tested: float32 weights on a CPU. "graph" stays opt-in on a GPU until
        # benchmarks/speed/rollout_gpu.py has run there (no GPU has been lent since it was written).
        on_cpu_fp32 = model_device(self.model).type == "cpu" and self.model.dtype == torch.float32
        return "fused" if on_cpu_fp32 and fused_unsupported(self.model) is None else "hf"

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, on_rows_done: Callable[[int], None] | None = None
    ) -> RolloutBatch:
        """See RolloutEngine.generate; on_rows_done is called after each decode step that finished rows."""
        check_prompts(prompts)
        rows = [list(p) for p in prompts for _ in range(params.n)]
        prompt_ids, prompt_mask = left_pad(rows, self.pad_id)
        device = model_device(self.model)
        stop_ids = set() if params.ignore_eos else self.eos_ids | set(params.stop_token_ids or [])
        stop = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        generator = torch.Generator(device=device).manual_seed(seed)

        chunk = min(
            self.max_batch_size or len(rows),
            rows_per_chunk(self.model, prompt_ids.shape[1] + params.max_new_tokens, self.memory_budget),
        )
        was_training = self.model.training
        self.model.eval()  # no dropout while sampling; restored below
        try:
            parts = [
                self._generate_chunk(
                    prompt_ids[i : i + chunk].to(device),
                    prompt_mask[i : i + chunk].to(device),
                    params,
                    stop,
                    generator,
                    on_rows_done,
                )
                for i in range(0, len(rows), chunk)
            ]
        finally:
            self.model.train(was_training)

        width = max(ids.shape[1] for ids, _, _ in parts)
        response_ids = torch.cat([F.pad(ids, (0, width - ids.shape[1]), value=self.pad_id) for ids, _, _ in parts])
        logprobs = torch.cat([F.pad(lp, (0, width - lp.shape[1])) for _, lp, _ in parts])
        lengths = torch.cat([n for _, _, n in parts])
        response_mask = (torch.arange(width) < lengths[:, None]).long()
        stopped = torch.isin(response_ids.gather(1, (lengths - 1).clamp(min=0)[:, None]).squeeze(1), stop.cpu())
        return RolloutBatch(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            response_ids=response_ids,
            response_mask=response_mask,
            logprobs=logprobs,
            finish_reasons=["stop" if s else "length" for s in stopped.tolist()],
            prompt_index=torch.arange(len(prompts)).repeat_interleave(params.n),
            response_texts=self.tokenizer.batch_decode(
                [ids[:n] for ids, n in zip(response_ids.tolist(), lengths.tolist(), strict=True)],
                skip_special_tokens=True,
            ),
        )

    def _prefill(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, DynamicCache]:
        """Run the prompts once; returns (next-token logits [B, V], the cache with one row per prompt row).

        Rows arrive in groups of identical prompts (n samples each), so each distinct prompt is run once
        and its cache rows are shared by its group (as vLLM's prefix caching would): 1/n of the prefill.
        """
        return prefill_shared(self.model, prompt_ids, prompt_mask, *prompt_groups(prompt_ids, prompt_mask))

    @torch.inference_mode()
    def _generate_chunk(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        params: SamplingParams,
        stop: torch.Tensor,
        generator: torch.Generator,
        on_rows_done: Callable[[int], None] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample one chunk of rows. prompt_*: [B, P] on the model's device.

        Returns CPU tensors (response_ids [B, R'], logprobs [B, R'], lengths [B]) where R' <= max_new_tokens
        is the number of steps run (the loop ends once every row has stopped).
        """
        batch, prompt_len = prompt_ids.shape
        max_new = params.max_new_tokens
        device = prompt_ids.device
        # Preallocated buffers: the mask grows by one (always real) column per step; rows that already
        # stopped keep feeding pad tokens whose outputs are discarded.
        attention = torch.cat([prompt_mask, prompt_mask.new_ones(batch, max_new)], dim=1)
        response = torch.full((batch, max_new), self.pad_id, dtype=torch.long, device=device)
        logprobs = torch.zeros((batch, max_new), dtype=torch.float32, device=device)
        lengths = torch.zeros(batch, dtype=torch.long, device=device)
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        num_real = prompt_mask.sum(dim=1)  # [B]: position of the first response token
        with record_function("rollout/prefill"):
            fused, cache, decoder = None, None, self.resolved_decoder()
            if decoder == "fused":  # the fused weights run the prefill too, into their own cache
                fused = FusedDecoder(self.model, prompt_mask, max_new, matmul_dtype=autocast_dtype(device))
                with no_autocast(device):
                    logits = fused.prefill(prompt_ids, *prompt_groups(prompt_ids, prompt_mask))
            elif decoder == "graph":
                fused = GraphedDecoder(self.model, prompt_mask, max_new)
                logits = fused.prefill(prompt_ids, *prompt_groups(prompt_ids, prompt_mask))
            else:
                logits, cache = self._prefill(prompt_ids, prompt_mask)

        steps = 0
        for t in range(max_new):
            if t > 0:  # one token per row, through the fused loop or the model's forward
                with record_function("rollout/forward"):
                    tokens, positions = response[:, t - 1], num_real + (t - 1)
                    if fused is not None:
                        with no_autocast(device):  # mixed precision is in the fused weights' dtypes
                            logits = fused.step(tokens, positions)
                    else:
                        logits = self.model(
                            input_ids=tokens[:, None],
                            attention_mask=attention[:, : prompt_len + t],
                            position_ids=positions[:, None],
                            use_cache=True,
                            logits_to_keep=1,
                            **{self._cache_arg: cache},
                        ).logits[:, -1, :]
            with record_function("rollout/sample"):
                tokens, token_logprobs = sample_next_token(logits, params, generator)
            with record_function("rollout/bookkeeping"):
                response[:, t] = tokens.masked_fill(done, self.pad_id)
                logprobs[:, t] = token_logprobs.masked_fill(done, 0.0)
                lengths += (~done).long()
                finished = torch.isin(tokens, stop) & ~done
                done |= finished
                steps = t + 1
                if on_rows_done is not None:  # one sync per step, only when someone is watching
                    newly = int(finished.sum()) if t + 1 < max_new else int(batch - (done.sum() - finished.sum()))
                    if newly:
                        on_rows_done(newly)
                if bool(done.all()):
                    break
        return response[:, :steps].cpu(), logprobs[:, :steps].cpu(), lengths.cpu()


# The native trainer's engines. vLLM-scale generation goes through TRL (use_vllm) or verl, which
# maintain the weight sync and memory sharing with the trainer (examples/trl, examples/verl).
ENGINES: dict[str, Callable[..., RolloutEngine]] = {"hf": HFRolloutEngine}


def make_engine(name: str, model, tokenizer, **kwargs) -> RolloutEngine:
    """Build a rollout engine by name ("hf": HFRolloutEngine); kwargs go to the engine (hf: max_batch_size)."""
    if name not in ENGINES:
        raise ValueError(f"make_engine: unknown engine {name!r}; allowed: {sorted(ENGINES)}")
    return ENGINES[name](model, tokenizer, **kwargs)
