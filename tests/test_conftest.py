"""tests/conftest.py: its tiny-model fixtures build what llm_zoo.models builds, and its markers skip only when the
requirement is missing."""

from __future__ import annotations

import importlib.util

import pytest


def test_the_tiny_model_factory_builds_what_build_tiny_model_builds(tiny_model, byte_tokenizer):
    torch = pytest.importorskip("torch")
    from llm_zoo.models import build_tiny_model

    made = tiny_model(byte_tokenizer, shape="smallest", seed=3)
    direct = build_tiny_model(byte_tokenizer, hidden_size=16, num_layers=1, num_heads=2, seed=3)
    assert (made.config.hidden_size, made.config.num_hidden_layers, made.config.num_attention_heads) == (16, 1, 2)
    assert all(torch.equal(a, b) for a, b in zip(made.state_dict().values(), direct.state_dict().values()))
    # no shape: build_tiny_model's defaults; keywords win over a shape
    assert tiny_model().config.hidden_size == build_tiny_model(byte_tokenizer).config.hidden_size
    assert tiny_model(shape="smallest", hidden_size=32).config.hidden_size == 32
    with pytest.raises(ValueError, match=r"shape= takes one of \['smallest'\]"):
        tiny_model(shape="huge")


def test_the_model_folder_factory_saves_a_loadable_model(tiny_model_dir):
    from transformers import AutoConfig, AutoTokenizer

    folder = tiny_model_dir("m", shape="smallest")
    assert folder.name == "m" and AutoConfig.from_pretrained(folder).hidden_size == 16
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.decode(tokenizer.encode("[check]", add_special_tokens=False)) == "[check]"


@pytest.mark.torch
def test_a_torch_marked_test_runs_only_where_torch_and_transformers_import():
    assert importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


@pytest.mark.bwrap
def test_a_bwrap_marked_test_runs_only_where_the_sandbox_is_available():
    from llm_zoo.sandbox import sandbox_info

    assert sandbox_info().available, sandbox_info().problem
