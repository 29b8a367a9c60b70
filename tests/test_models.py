"""Tiny offline models: save/load round trip, determinism, tokenizer round trip, chat template, loader."""

from __future__ import annotations

import string
import unicodedata

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hadw.rollout import build_tiny_model, build_tiny_tokenizer, load_model

PROBE = "<|im_start|>user\nWhat is 3/4 + 1/4? \\boxed{1}<|im_end|>"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen2", seed=0)


def logits_of(model, tokenizer, text: str = PROBE) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([tokenizer(text).input_ids])).logits


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_save_load_round_trip_keeps_logits(tmp_path, arch):
    model, tok = load_model(build_tiny_model(tmp_path / "a", arch=arch), device="cpu")
    assert type(model).__name__.lower().startswith(arch)
    assert 0.5e6 <= model.num_parameters() <= 5e6
    assert model.config.vocab_size == len(tok) == 260
    model.save_pretrained(tmp_path / "b")
    tok.save_pretrained(tmp_path / "b")
    reloaded, tok2 = load_model(tmp_path / "b", device="cpu")
    assert tok2(PROBE).input_ids == tok(PROBE).input_ids
    torch.testing.assert_close(logits_of(reloaded, tok2), logits_of(model, tok), rtol=0, atol=0)


def test_build_is_deterministic_in_seed_and_leaves_global_rng_alone(tmp_path, tiny_dir):
    state = torch.get_rng_state()
    same, tok = load_model(build_tiny_model(tmp_path / "same", seed=0), device="cpu")
    other, _ = load_model(build_tiny_model(tmp_path / "other", seed=1), device="cpu")
    assert torch.equal(torch.get_rng_state(), state)
    reference, _ = load_model(tiny_dir, device="cpu")
    assert torch.equal(logits_of(same, tok), logits_of(reference, tok))
    assert not torch.allclose(logits_of(other, tok), logits_of(reference, tok))


def test_tokenizer_ids_are_bytes_offset_by_four(tiny_dir):
    _, tok = load_model(tiny_dir, device="cpu")
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert len(tok) == 4 + 256
    text = "\\boxed{3/4}"
    assert tok(text).input_ids == [4 + ord(c) for c in text]
    assert tok.convert_ids_to_tokens(tok(" \n").input_ids) == ["Ġ", "Ċ"]  # GPT-2 byte characters


@pytest.mark.parametrize(
    "text",
    ["\\boxed{3/4}", "\\frac{1}{2} = 0.5", "x^2 - (y_1 * 7) / 3, done.\n\tok", "  two  spaces ", "π ≈ 3.14 日本"],
)
def test_tokenizer_round_trip(tiny_dir, text):
    _, tok = load_model(tiny_dir, device="cpu")
    ids = tok(text).input_ids
    assert tok.decode(ids) == text
    assert tok.decode([*ids, tok.eos_token_id], skip_special_tokens=True) == text


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r"), max_size=40))
def test_tokenizer_round_trip_any_text(text):
    tok = build_tiny_tokenizer()
    # One token per UTF-8 byte of the NFC form (the normaliser Qwen2 uses too).
    normal = unicodedata.normalize("NFC", text)
    ids = tok(text).input_ids
    if any(t in normal for t in ("<|im_", "<|endoftext|>", "<pad>")):
        return  # literal special-token strings are parsed as special tokens, by design
    assert len(ids) == len(normal.encode("utf-8"))
    assert tok.decode(ids) == normal


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_loaded_tokenizer_matches_builder_for_both_architectures(tmp_path, arch):
    # transformers rebuilds qwen2 tokenizers as Qwen2Tokenizer; the byte-level design must survive that.
    _, tok = load_model(build_tiny_model(tmp_path / arch, arch=arch), device="cpu")
    reference = build_tiny_tokenizer()
    text = string.printable + " é 日本 \\boxed{12}"
    assert tok(text).input_ids == reference(text).input_ids
    assert tok.decode(tok(text).input_ids) == reference.decode(reference(text).input_ids)


def test_chat_template(tiny_dir):
    _, tok = load_model(tiny_dir, device="cpu")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text).input_ids
    assert ids[0] == tok.bos_token_id and ids.count(tok.eos_token_id) == 2
    assert tok.decode(ids, skip_special_tokens=True) == "system\nBe brief.\nuser\n1+1?\nassistant\n"


def test_load_model_pad_fallback_padding_side_and_dtype(tmp_path, tiny_dir):
    _, tok = load_model(tiny_dir, device="cpu")
    tok.pad_token = None
    tok.padding_side = "right"
    model, _ = load_model(tiny_dir, device="cpu")
    model.save_pretrained(tmp_path / "nopad")
    tok.save_pretrained(tmp_path / "nopad")
    model, tok = load_model(tmp_path / "nopad", dtype="bfloat16", device="cpu")
    assert tok.pad_token_id == tok.eos_token_id == 2
    assert tok.padding_side == "left"
    assert model.dtype == torch.bfloat16 and not model.training


def test_load_model_errors(tmp_path, tiny_dir):
    with pytest.raises(FileNotFoundError, match="neither a model folder nor a Hub id"):
        load_model(tmp_path / "missing")
    with pytest.raises(ValueError, match="allowed"):
        load_model(tiny_dir, dtype="float8")
    with pytest.raises(ValueError, match="arch='gpt2'"):
        build_tiny_model(tmp_path / "x", arch="gpt2")
