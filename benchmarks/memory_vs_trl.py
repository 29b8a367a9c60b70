"""Peak memory of one training step: `hadw` vs TRL's GRPOTrainer on the same model and batch, side by side.

The run (issue 10.7): a SmolLM-135M-shaped Llama (30 layers, hidden 576, vocabulary 49 152, tied embeddings;
random weights, built offline, float32), 2 prompts x 4 responses x 128 new tokens, one rollout batch and one
optimiser step, no KL, no evaluation, gradient checkpointing on both sides (TRL's default; --no-gradient-checkpointing
turns it off on both). Each side runs in a fresh Python process (so neither inherits the other's
allocations) and reports its peak RSS (getrusage ru_maxrss: the kernel's high-water mark, imports and model
load included), the RSS after its imports, and its CPU time. Sides alternate (hadw, TRL, hadw, ...) so machine
load hits both alike; figures are min / median / max over the repeats. On a GPU machine the peak allocated
CUDA memory is reported too.

    .venv/bin/python benchmarks/memory_vs_trl.py [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROMPTS, G, NEW_TOKENS, LR = 2, 4, 128, 1e-6
SMOLLM_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                   num_key_value_heads=3, vocab_size=49152, max_position_embeddings=2048, tie_word_embeddings=True,
                   rms_norm_eps=1e-5, rope_theta=10000.0)  # fmt: skip
PROMPT_TEXTS = ["Compute 47+38 and explain each step.", "What is the value of 12 times 7?"]


def rss_gb() -> float:
    """Peak RSS of this process so far, GiB (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def build_model(out: Path) -> Path:
    """The 135M-shaped checkpoint with a byte-level tokenizer padded to the model's vocabulary."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    from hadw.rollout.models import CHATML_TEMPLATE, TINY_SPECIAL_TOKENS

    byte_chars = bytes_to_unicode()
    vocab = {tok: i for i, tok in enumerate(TINY_SPECIAL_TOKENS)}
    vocab |= {byte_chars[b]: len(vocab) + b for b in range(256)}
    size = SMOLLM_135M["vocab_size"]
    vocab |= {f"<x{i}>": i for i in range(len(vocab), size)}  # unreachable by encoding; decodes as "<xN>"
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<|im_end|>",
                                        unk_token="<|endoftext|>", chat_template=CHATML_TEMPLATE,
                                        padding_side="left")  # fmt: skip
    config = LlamaConfig(**SMOLLM_135M, pad_token_id=0, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def child_hadw(model_dir: Path, out: Path, checkpointing: bool) -> dict:
    from hadw import metrics as M
    from hadw.data import Problem
    from hadw.train.config import load_config
    from hadw.train.trainer import Trainer

    imports = rss_gb()
    overrides = [
        f"model.path={model_dir}", "model.device=auto", "data.template=question", "data.chat_template=never",
        "reward.functions=[exact]", "reward.correctness=exact", f"rollout.group_size={G}",
        f"rollout.max_new_tokens={NEW_TOKENS}", f"train.prompts_per_step={PROMPTS}",
        f"train.mini_batch_prompts={PROMPTS}", f"optim.lr={LR}", "optim.warmup_steps=0", "train.steps=1",
        f"train.output_dir={out}", "logging.progress=false", "logging.sample_every=0",
        f"model.gradient_checkpointing={checkpointing}",
    ]  # fmt: skip
    trainer = Trainer(load_config(None, overrides))
    problems = [Problem(q, "0", None, "bench", str(i)) for i, q in enumerate(PROMPT_TEXTS)]
    trainer.source.batch = lambda step, n, round_=0: problems[:n]  # the same two prompts as the TRL side
    metrics = trainer.train_step(0)
    return {"imports_gb": imports, "tokens": metrics[M.RESPONSE_LENGTH_MEAN], **_peaks()}


def child_trl(model_dir: Path, out: Path, checkpointing: bool) -> dict:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    imports = rss_gb()
    data = Dataset.from_dict({"prompt": PROMPT_TEXTS, "answer": ["0"] * PROMPTS})
    lengths = []

    def exact(completions, answer, completion_ids=None, **kwargs):
        lengths.extend(len(c) for c in completion_ids or [])
        return [float(c.strip() == a) for c, a in zip(completions, answer, strict=True)]

    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=PROMPTS * G, num_generations=G, steps_per_generation=1,
        gradient_accumulation_steps=1, max_completion_length=NEW_TOKENS, temperature=1.0, learning_rate=LR,
        beta=0.0, max_steps=1, report_to=[], use_cpu=not torch.cuda.is_available(), save_strategy="no",
        logging_steps=1, disable_tqdm=True, seed=0, shuffle_dataset=False,
        bf16=False,  # GRPOConfig defaults to bf16 autocast; this run is float32 on both sides
        gradient_checkpointing=checkpointing,  # TRL's default is True
    )  # fmt: skip
    GRPOTrainer(model=str(model_dir), reward_funcs=[exact], args=args, train_dataset=data).train()
    return {"imports_gb": imports, "tokens": sum(lengths) / max(len(lengths), 1), **_peaks()}


def _peaks() -> dict:
    import torch

    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = {"peak_rss_gb": rss_gb(), "cpu_s": usage.ru_utime + usage.ru_stime}
    if torch.cuda.is_available():
        out["cuda_max_allocated_gb"] = torch.cuda.max_memory_allocated() / 1024**3
    return out


def run_child(side: str, model_dir: Path, out: Path, threads: int, checkpointing: bool) -> dict:
    flag = "--gradient-checkpointing" if checkpointing else "--no-gradient-checkpointing"
    cmd = [sys.executable, __file__, "--child", side, "--model", str(model_dir), "--out", str(out),
           "--threads", str(threads), flag]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{side} run failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - start
    return result


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def versions() -> str:
    from importlib.metadata import version

    return ", ".join(f"{p} {version(p)}" for p in ("torch", "transformers", "trl", "accelerate", "hadw"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each child")
    parser.add_argument("--model", type=Path, help="use this checkpoint instead of building the 135M-shaped one")
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True,
                        help="on both sides (TRL's GRPOConfig default: on)")  # fmt: skip
    parser.add_argument("--child", choices=["hadw", "trl", "build"], help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    opts = parser.parse_args()

    if opts.child:
        import torch
        from transformers.utils import logging as hf_logging

        torch.set_num_threads(opts.threads)
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        if opts.child == "build":
            build_model(opts.out)
            return
        result = (child_hadw if opts.child == "hadw" else child_trl)(opts.model, opts.out, opts.gradient_checkpointing)
        print(json.dumps(result))
        return

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = opts.model
        if model_dir is None:  # built in a child too: a child's ru_maxrss starts at its parent's RSS at fork
            model_dir = Path(tmp) / "model135m"
            subprocess.run([sys.executable, __file__, "--child", "build", "--out", str(model_dir)], check=True)
        results: dict[str, list[dict]] = {"hadw": [], "trl": []}
        for r in range(opts.repeats):
            for side in ("hadw", "trl"):
                out = Path(tmp) / f"{side}{r}"
                results[side].append(run_child(side, model_dir, out, opts.threads, opts.gradient_checkpointing))
            h, t = results["hadw"][-1], results["trl"][-1]
            print(f"repeat {r}: peak RSS GiB  hadw {h['peak_rss_gb']:.2f}  TRL {t['peak_rss_gb']:.2f}  "
                  f"ratio {h['peak_rss_gb'] / t['peak_rss_gb']:.2f}", flush=True)  # fmt: skip

    print(f"\nsetup: {'given model ' + str(opts.model) if opts.model else 'SmolLM-135M-shaped Llama, random'}, "
          f"float32, {PROMPTS} prompts x {G} responses x {NEW_TOKENS} new tokens, 1 optimiser step (AdamW, "
          f"lr {LR}, fused), no KL, no eval, gradient checkpointing {'on' if opts.gradient_checkpointing else 'off'}"
          "; "
          f"{opts.threads} torch thread(s) per child; {opts.repeats} repeats, each side a fresh process")  # fmt: skip
    print(f"versions: python {sys.version.split()[0]}, {versions()}")
    print("min / median / max over repeats:")
    for side, label in (("hadw", "hadw train_step (GRPO)"), ("trl", "TRL GRPOTrainer (GRPO)")):
        rows = results[side]
        col = lambda key: spread([x[key] for x in rows])  # noqa: B023 - used at once
        line = f"  {label:<24} peak RSS {col('peak_rss_gb')} GiB   after imports {col('imports_gb')} GiB   "
        line += f"CPU {col('cpu_s')} s   new tokens/response {col('tokens')}"
        if "cuda_max_allocated_gb" in rows[0]:
            line += f"   CUDA max allocated {col('cuda_max_allocated_gb')} GiB"
        print(line)
    ratio = [h["peak_rss_gb"] / t["peak_rss_gb"] for h, t in zip(results["hadw"], results["trl"], strict=True)]
    print(f"peak RSS ratio hadw / TRL (paired by repeat): {spread(ratio)}  (target <= 1.00)")


if __name__ == "__main__":
    main()
