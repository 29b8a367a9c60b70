"""Load any local causal LM, or build a tiny random one offline for tests and CPU demos.

The tiny model is a real Qwen2 / Llama architecture from `transformers` (random weights) with a
byte-level tokenizer (one token per ASCII character), saved with `save_pretrained` so every code path
that loads a checkpoint (`load_model`, vLLM, TRL) treats it like a downloaded model. `load_model` also takes a
Hub id (downloaded through huggingface_hub when online); tests never reach the Hub.

Tiny tokenizer: byte-level, one token per UTF-8 byte, no merges (so every string round-trips and
ASCII text such as "\\boxed{3/4}" is one token per character). It uses exactly the pipeline of
Qwen2's tokenizer (NFC normaliser, ByteLevel pre-tokenizer/decoder, BPE model), because transformers
rebuilds any `model_type="qwen2"` tokenizer as `Qwen2Tokenizer` on load; the two then agree. Ids:
    0 <pad>          pad_token
    1 <|im_start|>   bos_token; opens a chat turn (never prepended automatically, as in Qwen2)
    2 <|im_end|>     eos_token; closes a chat turn, so a chat-style policy stops on it
    3 <|endoftext|>  unk_token (never produced: every byte has a token); Qwen2Tokenizer insists on it
    4 + b            byte b (0..255), written as GPT-2's printable byte character ("Ġ" = space)
Chat template: ChatML as in Qwen2.5-Instruct,
    <|im_start|>{role}\\n{content}<|im_end|>\\n ... [<|im_start|>assistant\\n]
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Literal

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
)
from transformers.convert_slow_tokenizer import bytes_to_unicode

from hadw.errors import UserError
from hadw.rollout.lora import is_adapter_dir
from hadw.rollout.names import is_hub_id

TINY_SPECIAL_TOKENS = ("<pad>", "<|im_start|>", "<|im_end|>", "<|endoftext|>")
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_CONFIGS = {"qwen2": Qwen2Config, "llama": LlamaConfig}


def model_device(model: torch.nn.Module) -> torch.device:
    """Where `model`'s parameters live: the one device every input of its forward must be on."""
    return next(model.parameters()).device


def to_model_device(model: torch.nn.Module, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """`tensors` moved to `model`'s device: the one home of the host-to-device move (SFT, trainer, engine).

    Tensors built from Python lists (token ids, masks, labels) start on the CPU; a model on a GPU needs them there.
    """
    device = model_device(model)
    return tuple(t.to(device) for t in tensors)


def _resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class ModelNotFoundError(UserError, FileNotFoundError):
    """model.path / MODEL is no folder and no Hub id that can be had; the CLI prints one line, exit 2."""

    prefix = "model error: "


# What a causal LM needs from a Hub repository (not its other-framework weights, ONNX exports, ...).
_HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.py", "*.tiktoken", "*.jinja"]


def resolve_model_path(path_or_id: str | Path) -> Path:
    """A local folder as is; a Hub id ("Qwen/Qwen2.5-0.5B-Instruct") -> its snapshot folder, downloaded
    with huggingface_hub's progress bars when online, from the cache when offline.

    Raises ModelNotFoundError (a FileNotFoundError) with one line: not a folder and not a Hub id; or not
    cached while HF_HUB_OFFLINE is set (and how to fix it); or the repository cannot be downloaded.
    """
    path = Path(path_or_id)
    if path.is_dir():
        return path
    name = str(path_or_id)
    if path.exists() or not is_hub_id(name):
        raise ModelNotFoundError(f"load_model: {name} is neither a model folder nor a Hub id (ORG/NAME)")
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.utils import enable_progress_bars

    if not constants.HF_HUB_DISABLE_PROGRESS_BARS:  # the CLI quiets transformers' bars, not this download's
        enable_progress_bars("huggingface_hub")
    try:
        return Path(snapshot_download(name, allow_patterns=_HUB_FILES))
    except Exception as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        if constants.HF_HUB_OFFLINE:
            raise ModelNotFoundError(
                f"load_model: {name}: no such folder, and as a Hub id it is not in the Hugging Face cache while "
                f"HF_HUB_OFFLINE=1 forbids downloading: unset HF_HUB_OFFLINE to download it, or run "
                f"`hf download {name} --local-dir DIR` on a machine that is online and pass DIR"
            ) from None
        raise ModelNotFoundError(
            f"load_model: {name}: no such folder, and as a Hub id it cannot be downloaded: {reason}"
        ) from None


def load_model(
    path_or_dir: str | Path,
    dtype: Literal["float32", "bfloat16", "float16"] = "float32",
    device: str = "auto",
    trust_remote_code: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a local folder or a Hub id (see resolve_model_path), in
    eval mode. trust_remote_code: run the repository's own modelling code; only when the user asks.

    The tokenizer always has a pad token (falls back to EOS) and pads on the left, which is what
    batched generation and `compute_logprobs` expect.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"load_model: dtype={dtype!r}; allowed: {sorted(_DTYPES)}")
    path = resolve_model_path(path_or_dir)
    if is_adapter_dir(path):  # a LoRA run's checkpoint or final_model: its base model, the adapter merged in
        return _load_with_adapter(path, dtype, device, trust_remote_code)
    check_model_config(path)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    if not tokenizer("1+1=", add_special_tokens=False).input_ids:  # e.g. the folder has no tokenizer files
        raise ValueError(f"load_model: the tokenizer in {path} encodes text to no tokens (no tokenizer files?)")
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"load_model: tokenizer in {path} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    with warnings.catch_warnings():
        # torch's weights-only unpickler warns about the protocol of a pickle it is about to refuse: the refusal is
        # the one line (model_load_error); the warning would be a second one, printed the first time only
        warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=_DTYPES[dtype], local_files_only=True, trust_remote_code=trust_remote_code
        )
    model.to(_resolve_device(device)).eval()
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def _load_with_adapter(adapter_dir: Path, dtype, device: str, trust_remote_code: bool):
    """The base model an adapter folder names (hadw.rollout.lora), with the adapter merged into its weights: a
    plain model that generates as fast as the base, with every decoder."""
    from hadw.rollout.lora import adapter_base, attach_adapter, check_base

    base = adapter_base(adapter_dir)
    if not Path(base).is_dir() and (Path(base).is_absolute() or not is_hub_id(base)):
        raise ModelNotFoundError(
            f"load_model: {adapter_dir} is a LoRA adapter whose base model {base} is not there (moved or deleted?); "
            f"put the base model back, or edit base_model_name_or_path in {adapter_dir / 'adapter_config.json'}"
        )
    from hadw.metrics import METRICS_FILE

    # an adapter of a hadw run (its final_model, a checkpoint's model) must have its base record: deleting it skipped
    # the check; an adapter from elsewhere has none (then a warning names the risk)
    of_a_run = any((folder / METRICS_FILE).is_file() for folder in Path(adapter_dir).absolute().parents[:2])
    try:
        check_base(adapter_dir, base, required=of_a_run)  # another model now at that path: refused, never merged into
    except ValueError as err:
        raise ModelNotFoundError(f"load_model: {err}") from None
    model, tokenizer = load_model(base, dtype, device, trust_remote_code)
    return attach_adapter(model, adapter_dir, merge=True).eval(), tokenizer


# Sizes past these are not a model but a typo or a crafted config.json that would allocate terabytes.
MAX_CONFIG_SIZES = {
    "vocab_size": 1 << 22,
    "hidden_size": 1 << 16,
    "intermediate_size": 1 << 18,
    "num_hidden_layers": 1 << 10,
    "num_attention_heads": 1 << 10,
    "num_key_value_heads": 1 << 10,
}


def check_model_config(path: Path) -> None:
    """ValueError naming config.json's field when the file is not a JSON object or a size is not a positive
    integer within MAX_CONFIG_SIZES: checked before anything is allocated from it."""
    config = path / "config.json"
    if not config.is_file():
        return  # transformers says what is missing
    try:
        data = json.loads(config.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ValueError(f"{config}: not a JSON config ({type(err).__name__})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{config}: holds a {type(data).__name__}, not a JSON object")
    text_config = data.get("text_config") if isinstance(data.get("text_config"), dict) else {}
    for key, limit in MAX_CONFIG_SIZES.items():
        value = data.get(key, text_config.get(key))
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
            raise ValueError(f"{config}: {key}={value!r} is not a plausible size; allowed: an integer in [1, {limit}]")


def model_load_error(err: BaseException) -> str:
    """One line for why a model folder did not load (transformers' messages run over many lines; a refused
    pickle's advice to pass weights_only=False is not one to follow for a file from elsewhere)."""
    text = " ".join(str(err).split())
    if "weights_only" in text or "WeightsUnpickler" in text:
        return "its weights are a pickle that is not plain tensors (refused: it could run code); use safetensors"
    return f"{type(err).__name__}: {text[:300]}" if text else type(err).__name__


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """The byte-level tokenizer described in the module docstring (260 tokens)."""
    byte_chars = bytes_to_unicode()  # byte value -> printable stand-in character
    vocab = {tok: i for i, tok in enumerate(TINY_SPECIAL_TOKENS)}
    vocab |= {byte_chars[b]: len(TINY_SPECIAL_TOKENS) + b for b in range(256)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False, byte_fallback=False))
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in TINY_SPECIAL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        unk_token="<|endoftext|>",
        padding_side="left",
        chat_template=CHATML_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def build_tiny_model(
    out_dir: str | Path,
    arch: Literal["qwen2", "llama"] = "qwen2",
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 384,
    max_position_embeddings: int = 512,
    initializer_range: float = 0.02,
    seed: int = 0,
    vocab_size: int | None = None,
) -> Path:
    """Build a random tiny causal LM + char tokenizer offline and `save_pretrained` both into out_dir.

    Defaults give a Qwen2 model of ~0.82 M parameters (vocabulary 260, tied embeddings).
    Weights depend only on `seed` (torch's global RNG is forked, so the caller's state is untouched).
    Returns out_dir; `load_model(out_dir)` reloads it like any checkpoint.
    vocab_size: rows of the embedding and the head (None: the tokenizer's 260). A larger value gives a
    real model's vocabulary-sized head and log-softmax (SmolLM2's 49 152) with the same tokenizer: ids past
    the tokenizer's are never produced by it, but the model can sample them (they decode to nothing).
    """
    if arch not in _CONFIGS:
        raise ValueError(f"build_tiny_model: arch={arch!r}; allowed: {sorted(_CONFIGS)}")
    out = Path(out_dir)
    tokenizer = build_tiny_tokenizer()
    if vocab_size is not None and vocab_size < len(tokenizer):
        raise ValueError(f"build_tiny_model: vocab_size={vocab_size}; allowed: >= {len(tokenizer)} (the tokenizer's)")
    config = _CONFIGS[arch](
        vocab_size=vocab_size or len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        initializer_range=initializer_range,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
