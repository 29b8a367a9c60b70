"""Every tensor goes where the model is (a GPU run crashed on an SFT batch left on the CPU).

Without a GPU, the model is moved to the `meta` device and a forward pre-hook compares each input tensor's
device with the parameters': a tensor built on the CPU and never moved is caught here exactly as CUDA would
catch it ("Expected all tensors to be on the same device"). The hook stops at the first forward, so no meta
arithmetic runs.
"""

from __future__ import annotations

import pytest
import torch

from hadw.rollout import build_tiny_model, load_model, to_model_device
from hadw.train.sft import SFTConfig, sft_warm_start


class Reached(Exception):
    """The model's forward was called with every input on the model's device."""


class LeftBehind(Exception):
    """An input of the model's forward was on another device than its parameters."""


def _check_inputs(module, args, kwargs):
    device = next(module.parameters()).device
    for name, value in [*enumerate(args), *kwargs.items()]:
        if isinstance(value, torch.Tensor) and value.device != device:
            raise LeftBehind(f"input {name!r} is on {value.device}, the model on {device}")
    raise Reached


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", num_layers=1, hidden_size=32, intermediate_size=64)


@pytest.fixture
def meta_model(tiny_dir):
    model, tokenizer = load_model(tiny_dir, device="cpu")
    model.use_kernels = False  # transformers would re-kernelize on train(), which knows no meta device
    model.to("meta")
    model.register_forward_pre_hook(_check_inputs, with_kwargs=True)
    return model, tokenizer


def test_the_check_catches_a_cpu_tensor(meta_model):
    model, _ = meta_model
    with pytest.raises(LeftBehind, match="on cpu, the model on meta"):
        model(input_ids=torch.tensor([[5, 6]]))
    with pytest.raises(Reached):
        model(*to_model_device(model, torch.tensor([[5, 6]])))


def test_sft_moves_its_batch_to_the_model(meta_model):
    model, tokenizer = meta_model
    cfg = SFTConfig(task="sums", levels=[2], batch_size=2, max_steps=1, eval_size=2)
    with pytest.raises(Reached):
        sft_warm_start(model, tokenizer, cfg)
