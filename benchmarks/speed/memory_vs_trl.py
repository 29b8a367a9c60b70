"""Peak memory of one training step: `hadw` vs TRL's GRPOTrainer on the same model and batch, side by side.

The run (issue 10.7): a SmolLM-135M-shaped Llama (30 layers, hidden 576, vocabulary 49 152, tied embeddings;
random weights, built offline, float32), 2 prompts x 4 responses x 128 new tokens, one rollout batch and one
optimiser step, no KL, no evaluation, gradient checkpointing on both sides (TRL's default; --no-gradient-checkpointing
turns it off on both), one precision on both sides (`--precision auto|fp32|bf16`, trl_cpu.py: auto is the faster
on this CPU, measured in a child process; bf16 is autocast over fp32 weights on both sides; the committed reports,
memory_vs_trl_135m.md and memory_vs_trl_lengths.md, ran before the option existed, in fp32: `--precision fp32`).
Each side runs in a fresh Python process (so neither inherits the other's
allocations) and reports its peak RSS (getrusage ru_maxrss: the kernel's high-water mark, imports and model
load included), the RSS after its imports, and its CPU time. Sides alternate (hadw, TRL, hadw, ...) so machine
load hits both alike; figures are min / median / max over the repeats. On a GPU machine the peak allocated
CUDA memory is reported too.

    .venv/bin/python benchmarks/speed/memory_vs_trl.py [--repeats 3] [--threads 1]

--lengths 256 1024 4096 (issue 38.6) measures the update pass alone against the response length instead: one
mini-batch of --rows rows (a --prompt-len-token prompt + L response tokens, random ids, the same on every side),
its policy log-probs with entropy, the GRPO loss and its backward, no optimiser step, gradient checkpointing
on every side. Three sides, each a fresh process per length: hadw with its chunked LM head (the default),
hadw with chunking off (LOGITS_CHUNK_BYTES unbounded: the one-pass forward it had before), and TRL's own
GRPOTrainer._compute_loss (its fused, tiled LM head). --raw FILE keeps every child's result as JSON, in
benchmarks/raw_tables.py's format: the report's table is rebuilt from it (`--rebuild FILE` rewrites it).

    .venv/bin/python benchmarks/speed/memory_vs_trl.py --lengths 256 1024 4096 --rows 2 --repeats 1 --precision fp32 \
        --raw benchmarks/speed/memory_vs_trl_lengths.raw.json --report benchmarks/speed/memory_vs_trl_lengths.md
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
import raw_tables
from bench_report import add_report_option, report
from trl_cpu import add_precision_option, best_precision, hadw_overrides

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROMPTS, G, NEW_TOKENS, LR = 2, 4, 128, 1e-6
SMOLLM_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                   num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192, tie_word_embeddings=True,
                   rms_norm_eps=1e-5, rope_theta=10000.0)  # fmt: skip
PROMPT_LEN, ROWS = 200, 2  # --lengths mode: a ~200-token prompt, as in the real-model run
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


def child_hadw(model_dir: Path, out: Path, checkpointing: bool, precision: str) -> dict:
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
        f"model.gradient_checkpointing={checkpointing}", *hadw_overrides(precision),
    ]  # fmt: skip
    trainer = Trainer(load_config(None, overrides))
    problems = [Problem(q, "0", None, "bench", str(i)) for i, q in enumerate(PROMPT_TEXTS)]
    trainer.source.batch = lambda step, n, round_=0: problems[:n]  # the same two prompts as the TRL side
    metrics = trainer.train_step(0)
    return {"imports_gb": imports, "tokens": metrics[M.RESPONSE_LENGTH_MEAN], **_peaks()}


def child_trl(model_dir: Path, out: Path, checkpointing: bool, precision: str) -> dict:
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
        bf16=precision == "bf16",  # autocast over fp32 weights, as hadw's model.compute_dtype=bfloat16
        gradient_checkpointing=checkpointing,  # TRL's default is True
    )  # fmt: skip
    GRPOTrainer(model=str(model_dir), reward_funcs=[exact], args=args, train_dataset=data).train()
    return {"imports_gb": imports, "tokens": sum(lengths) / max(len(lengths), 1), **_peaks()}


def update_batch(rows: int, prompt_len: int, length: int):
    """(prompt ids [rows, prompt_len], response ids [rows, length]): random ids of the byte tokenizer's range,
    seeded, so every side scores the same tokens."""
    import torch

    gen = torch.Generator().manual_seed(0)
    return torch.randint(3, 259, (rows, prompt_len), generator=gen), torch.randint(
        3, 259, (rows, length), generator=gen
    )


def child_update_hadw(
    model_dir: Path, out: Path, length: int, rows: int, prompt_len: int, chunk: bool, precision: str
) -> dict:
    """hadw's update pass on one mini-batch: the calls of Trainer._optimiser_step up to the backward."""
    import torch

    from hadw.core import policy_loss
    from hadw.rollout import logprobs as hadw_logprobs
    from hadw.train.config import load_config
    from hadw.train.trainer import MiniBatch, Trainer

    if not chunk:  # the one-pass forward for every batch: hadw before chunked log-probs
        hadw_logprobs.LOGITS_CHUNK_BYTES = 2**62
    imports = rss_gb()
    overrides = [f"model.path={model_dir}", "model.device=cpu", "data.template=question", "data.chat_template=never",
                 "reward.functions=[exact]", "reward.correctness=exact", f"rollout.group_size={rows}",
                 f"rollout.max_new_tokens={length}", "train.prompts_per_step=1", "train.mini_batch_prompts=1",
                 f"optim.lr={LR}", "optim.warmup_steps=0", "train.steps=1", f"train.output_dir={out}",
                 "logging.progress=false", "logging.sample_every=0", "model.gradient_checkpointing=true",
                 *hadw_overrides(precision)]  # fmt: skip
    trainer = Trainer(load_config(None, overrides))
    prompt, response = update_batch(rows, prompt_len, length)
    input_ids = torch.cat([prompt, response], dim=1)
    mb = MiniBatch(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                   response_mask=torch.ones(rows, length), old_logprobs=torch.full((rows, length), -10.8),
                   advantages=torch.linspace(-1, 1, rows))  # fmt: skip
    loaded = rss_gb()
    trainer.model.train()
    start = time.process_time()
    with trainer.autocast():
        logprobs, entropy = trainer._logprobs(trainer.model, mb, with_entropy=True)
    loss, _ = policy_loss(logprobs, mb.old_logprobs, mb.advantages, mb.response_mask, trainer.loss_spec,
                          entropy=entropy)  # fmt: skip
    loss.backward()
    return {"imports_gb": imports, "loaded_gb": loaded, "update_cpu_s": time.process_time() - start,
            "loss": float(loss), **_peaks()}  # fmt: skip


def child_update_trl(model_dir: Path, out: Path, length: int, rows: int, prompt_len: int, precision: str) -> dict:
    """TRL's update pass on the same mini-batch: GRPOTrainer._compute_loss (via compute_loss) and its backward."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    imports = rss_gb()
    data = Dataset.from_dict({"prompt": PROMPT_TEXTS, "answer": ["0"] * len(PROMPT_TEXTS)})
    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=rows, num_generations=rows, steps_per_generation=1,
        gradient_accumulation_steps=1, max_completion_length=length, temperature=1.0, learning_rate=LR, beta=0.0,
        max_steps=1, report_to=[], use_cpu=True, save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0,
        bf16=precision == "bf16", gradient_checkpointing=True,
    )  # fmt: skip
    reward = lambda completions, **kwargs: [0.0] * len(completions)  # never called: no generation
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=[reward], args=args, train_dataset=data)
    # Trainer.train() turns checkpointing on as its first step; this pass skips train(), so do what it does.
    kwargs = getattr(args, "activation_checkpointing_kwargs", None) or args.gradient_checkpointing_kwargs
    trainer.model.activation_checkpointing_enable(activation_checkpointing_kwargs=dict(kwargs or {}) or None)
    trainer.current_gradient_accumulation_steps = 1  # train() sets it; the loss's normaliser reads it
    prompt, response = update_batch(rows, prompt_len, length)
    mask = torch.ones_like(response)
    inputs = {"prompt_ids": prompt, "prompt_mask": torch.ones_like(prompt), "completion_ids": response,
              "completion_mask": mask, "advantages": torch.linspace(-1, 1, rows), "old_per_token_logps": None,
              "num_items_in_batch": mask.sum()}  # fmt: skip
    loaded = rss_gb()
    trainer.model.train()
    start = time.process_time()
    with trainer.accelerator.autocast():  # what train() runs the forward under (a no-op in fp32)
        loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    return {"imports_gb": imports, "loaded_gb": loaded, "update_cpu_s": time.process_time() - start,
            "loss": float(loss), **_peaks()}  # fmt: skip


def _peaks() -> dict:
    import torch

    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = {"peak_rss_gb": rss_gb(), "cpu_s": usage.ru_utime + usage.ru_stime}
    if torch.cuda.is_available():
        out["cuda_max_allocated_gb"] = torch.cuda.max_memory_allocated() / 1024**3
    return out


def run_child(
    side: str, model_dir: Path, out: Path, threads: int, checkpointing: bool, precision: str, *extra: str
) -> dict:
    flag = "--gradient-checkpointing" if checkpointing else "--no-gradient-checkpointing"
    cmd = [sys.executable, __file__, "--child", side, "--model", str(model_dir), "--out", str(out),
           "--threads", str(threads), flag, "--precision", precision, *extra]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{side} run failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - start
    return result


def resolve_precision(requested: str, model_dir: Path, threads: int) -> str:
    """fp32 or bf16 for every child; auto is measured in a child of its own (see its --child branch), printed."""
    if requested != "auto":
        print(f"precision: {requested} on every side (--precision {requested})")
        return requested
    cmd = [sys.executable, __file__, "--child", "precision", "--model", str(model_dir), "--threads", str(threads),
           "--precision", requested]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"the precision probe failed:\n{proc.stderr[-3000:]}")
    choice = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"precision: {choice['precision']} on every side ({choice['reason']})", flush=True)
    return choice["precision"]


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
    parser.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        metavar="L",
        help="measure the update pass alone at these response lengths (see above)",
    )
    add_precision_option(parser)
    parser.add_argument("--rows", type=int, default=ROWS, help="--lengths: rows of the mini-batch")
    parser.add_argument("--prompt-len", type=int, default=PROMPT_LEN, help="--lengths: prompt tokens per row")
    parser.add_argument("--raw", type=Path, metavar="FILE", help="--lengths: every child's result as JSON")
    parser.add_argument(
        "--rebuild", type=Path, metavar="RAW", help="rewrite the table blocks of a --raw file, and stop"
    )
    add_report_option(parser)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    opts = parser.parse_args()

    if opts.rebuild:
        raw_tables.rebuild(opts.rebuild, tables)
        return
    if opts.child:
        import torch
        from transformers.utils import logging as hf_logging

        torch.set_num_threads(opts.threads)
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        if opts.child == "build":
            build_model(opts.out)
            return
        if opts.child == "precision":  # a child's: the probe's model and gradients stay out of the parent's RSS
            choice = best_precision(opts.precision, opts.model, opts.threads)
            print(json.dumps({"precision": choice.precision, "reason": choice.reason}))
            return
        if opts.child.startswith("update-"):
            shape = (opts.length, opts.rows, opts.prompt_len)
            if opts.child == "update-trl":
                result = child_update_trl(opts.model, opts.out, *shape, opts.precision)
            else:
                chunk = opts.child == "update-hadw"
                result = child_update_hadw(opts.model, opts.out, *shape, chunk=chunk, precision=opts.precision)
            print(json.dumps(result))
            return
        child = child_hadw if opts.child == "hadw" else child_trl
        result = child(opts.model, opts.out, opts.gradient_checkpointing, opts.precision)
        print(json.dumps(result))
        return

    with report(opts.report, parser, opts):
        if opts.lengths:
            measure_lengths(opts)
        else:
            measure_train_step(opts)
    if opts.lengths and opts.report and opts.raw:  # the table again, as a block rebuilt from the raw file
        raw_rel = opts.raw.resolve().relative_to(raw_tables.ROOT)
        block = f"<!-- rebuilt from {raw_rel}: lengths -->\n{tables(json.loads(opts.raw.read_text()))['lengths']}"
        with opts.report.open("a", encoding="utf-8") as f:
            f.write(f"\nPeak RSS, GiB, from the raw file:\n\n{block}\n<!-- /rebuilt -->\n")


UPDATE_SIDES = {"update-hadw-unchunked": "hadw before (one-pass logits)", "update-hadw": "hadw after (chunked)",
                "update-trl": "TRL GRPOTrainer loss"}  # fmt: skip


def measure_lengths(opts: argparse.Namespace) -> None:
    """The update pass at each response length: every side in a fresh process, sides alternating per repeat."""
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = opts.model
        if model_dir is None:
            model_dir = Path(tmp) / "model135m"
            subprocess.run([sys.executable, __file__, "--child", "build", "--out", str(model_dir)], check=True)
        precision = resolve_precision(opts.precision, model_dir, opts.threads)
        for length in opts.lengths:
            for r in range(opts.repeats):
                for side in UPDATE_SIDES:
                    out = Path(tmp) / f"{side}{length}_{r}"
                    shape = ("--length", str(length), "--rows", str(opts.rows), "--prompt-len", str(opts.prompt_len))
                    result = run_child(side, model_dir, out, opts.threads, True, precision, *shape)
                    results.append({"side": side, "length": length, "repeat": r, **result})
                    print(f"L={length} repeat {r} {side}: peak RSS {result['peak_rss_gb']:.2f} GiB, update CPU "
                          f"{result['update_cpu_s']:.0f} s, loss {result['loss']:.4f}", flush=True)  # fmt: skip
    print(
        f"\nsetup: {'given model ' + str(opts.model) if opts.model else 'SmolLM2-135M-shaped Llama, random'}, "
        f"{precision}, CPU; one mini-batch of {opts.rows} rows x ({opts.prompt_len} prompt + L response) tokens; "
        "policy log-probs + entropy, GRPO loss, backward; no optimiser step, no KL; gradient checkpointing on "
        f"every side; {opts.threads} torch thread(s) per child; {opts.repeats} repeat(s), each a fresh process"
    )
    print(f"versions: python {sys.version.split()[0]}, {versions()}")
    print("peak RSS GiB (ru_maxrss of the child: model load, imports and the pass; min over repeats):")
    print(lengths_table(results))
    if opts.raw:
        command = shlex.join(["python", "benchmarks/speed/memory_vs_trl.py", *sys.argv[1:]])
        shape = dict(rows=opts.rows, prompt_len=opts.prompt_len, threads=opts.threads, versions=versions())
        shape["precision"] = precision
        raw_tables.write_raw(opts.raw, [opts.report] if opts.report else [], Path(__file__), command, results, **shape)


def lengths_table(runs: list[dict]) -> str:
    """The --lengths table: peak RSS (GiB, min over repeats) of every side at each response length."""
    lengths = sorted({r["length"] for r in runs})
    lines = [f"| response tokens | {' | '.join(UPDATE_SIDES.values())} | hadw after / TRL |",
             "|---:|" + "---:|" * (len(UPDATE_SIDES) + 1)]  # fmt: skip
    for length in lengths:
        peak = {side: min(r["peak_rss_gb"] for r in runs if r["side"] == side and r["length"] == length)
                for side in UPDATE_SIDES}  # fmt: skip
        cells = " | ".join(f"{peak[side]:.2f}" for side in UPDATE_SIDES)
        lines.append(f"| {length} | {cells} | {peak['update-hadw'] / peak['update-trl']:.2f} |")
    return "\n".join(lines)


def tables(raw: dict) -> dict[str, str]:
    """The report's rebuilt block from the raw file alone (benchmarks/raw_tables.py)."""
    return {"lengths": lengths_table(raw["runs"])}


def measure_train_step(opts: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = opts.model
        if model_dir is None:  # built in a child too: a child's ru_maxrss starts at its parent's RSS at fork
            model_dir = Path(tmp) / "model135m"
            subprocess.run([sys.executable, __file__, "--child", "build", "--out", str(model_dir)], check=True)
        precision = resolve_precision(opts.precision, model_dir, opts.threads)
        results: dict[str, list[dict]] = {"hadw": [], "trl": []}
        for r in range(opts.repeats):
            for side in ("hadw", "trl"):
                out = Path(tmp) / f"{side}{r}"
                checkpointing = opts.gradient_checkpointing
                results[side].append(run_child(side, model_dir, out, opts.threads, checkpointing, precision))
            h, t = results["hadw"][-1], results["trl"][-1]
            print(f"repeat {r}: peak RSS GiB  hadw {h['peak_rss_gb']:.2f}  TRL {t['peak_rss_gb']:.2f}  "
                  f"ratio {h['peak_rss_gb'] / t['peak_rss_gb']:.2f}", flush=True)  # fmt: skip

    print(f"\nsetup: {'given model ' + str(opts.model) if opts.model else 'SmolLM-135M-shaped Llama, random'}, "
          f"{precision}, {PROMPTS} prompts x {G} responses x {NEW_TOKENS} new tokens, 1 optimiser step (AdamW, "
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
