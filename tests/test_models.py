"""Tests for llm_zoo.models: offline tokenizers, tiny models, and the save/load round trip."""

from __future__ import annotations

import socket

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from llm_zoo.models import (  # noqa: E402
    CHAT_TEMPLATE,
    IM_END,
    IM_START,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    UNK_TOKEN,
    build_bpe_tokenizer,
    build_byte_tokenizer,
    build_tiny_model,
    build_word_tokenizer,
    make_tiny_model,
    save_tiny,
)

torch.set_num_threads(1)

KUHN_CORPUS = [
    "You are playing Kuhn poker. You hold the K. Reply with [check] or [bet].",
    "Your opponent bets. Reply with [call] or [fold]!",
]
ALL_ROLES = (
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello"},
    {"role": "tool", "content": "42"},
)


@pytest.fixture(scope="module")
def byte_tok():
    return build_byte_tokenizer()


@pytest.fixture(scope="module")
def word_tok():
    return build_word_tokenizer(KUHN_CORPUS)


# ---- byte tokenizer ---------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=64))
def test_byte_tokenizer_round_trips_any_text(byte_tok, text):
    ids = byte_tok.encode(text, add_special_tokens=False)
    assert byte_tok.decode(ids) == text
    if not any(special in text for special in SPECIAL_TOKENS):  # each of those encodes as one token
        assert ids == list(text.encode("utf-8"))


@pytest.mark.parametrize("text", ["", "a\nb\r\n\tc  ", "héllo wörld", "🃏👋🏽 emoji", "日本語", "\x00\x7f"])
def test_byte_tokenizer_ids_are_utf8_bytes(byte_tok, text):
    ids = byte_tok.encode(text, add_special_tokens=False)
    assert ids == list(text.encode("utf-8"))
    assert byte_tok.decode(ids) == text


def test_byte_tokenizer_special_tokens(byte_tok):
    assert len(byte_tok) == 256 + 3
    assert byte_tok.pad_token == PAD_TOKEN and byte_tok.eos_token == IM_END
    assert byte_tok.pad_token_id != byte_tok.eos_token_id
    assert byte_tok.padding_side == "left"
    assert byte_tok.encode(IM_START + IM_END, add_special_tokens=False) == [
        byte_tok.convert_tokens_to_ids(IM_START),
        byte_tok.eos_token_id,
    ]
    assert byte_tok.decode([*b"ok", byte_tok.eos_token_id], skip_special_tokens=True) == "ok"


# ---- word tokenizer ---------------------------------------------------------------------------


def test_word_tokenizer_keeps_bracketed_words_whole(word_tok):
    ids = word_tok.encode("Reply with [check]", add_special_tokens=False)
    assert word_tok.convert_ids_to_tokens(ids) == ["Reply", "with", "[check]"]
    assert ids[-1] != word_tok.unk_token_id


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("Say [bet]!", ["Say", "[bet]", "!"]),
        ("a[call]b", ["a", "[call]", "b"]),
        ("K.", ["K", "."]),
        ("[ check ]", ["[", "check", "]"]),
        ("  spaced\n\tout ", ["spaced", "out"]),
        ("raise_2 [raise_2]", ["raise_2", "[raise_2]"]),
    ],
)
def test_word_tokenizer_split_rule(text, pieces):
    tok = build_word_tokenizer([text])
    assert tok.convert_ids_to_tokens(tok.encode(text, add_special_tokens=False)) == pieces


def test_word_tokenizer_maps_unknown_words_to_unk(word_tok):
    ids = word_tok.encode("You hold the Q [raise]", add_special_tokens=False)
    assert word_tok.convert_ids_to_tokens(ids) == ["You", "hold", "the", UNK_TOKEN, UNK_TOKEN]
    assert word_tok.decode(ids) == "You hold the [UNK] [UNK]"
    assert word_tok.decode(ids, skip_special_tokens=True) == "You hold the"


def test_word_tokenizer_decodes_words_joined_by_spaces(word_tok):
    ids = word_tok.encode("Reply with [call] or [fold]!", add_special_tokens=False)
    assert word_tok.decode(ids) == "Reply with [call] or [fold] !"


def test_word_tokenizer_vocabulary_depends_only_on_the_pieces():
    a = build_word_tokenizer(KUHN_CORPUS, extra_words=["[raise]"])
    b = build_word_tokenizer(reversed(KUHN_CORPUS + ["[raise]"]))
    assert a.get_vocab() == b.get_vocab()
    assert a.convert_tokens_to_ids("[raise]") != a.unk_token_id


def test_word_tokenizer_rejects_a_bare_string():
    with pytest.raises(TypeError, match="iterable of texts"):
        build_word_tokenizer("You hold the K")


# ---- chat template ----------------------------------------------------------------------------


def test_chat_template_renders_all_roles_and_generation_prompt(byte_tok):
    text = byte_tok.apply_chat_template(list(ALL_ROLES), tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello<|im_end|>\n"
        "<|im_start|>tool\n42<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    without = byte_tok.apply_chat_template(list(ALL_ROLES), tokenize=False)
    assert text == without + "<|im_start|>assistant\n"


def test_chat_template_marks_assistant_tokens(byte_tok):
    out = byte_tok.apply_chat_template(list(ALL_ROLES[1:3]), return_assistant_tokens_mask=True)
    marked = [i for i, m in zip(out["input_ids"], out["assistant_masks"]) if m]
    assert marked == [*b"Hello", byte_tok.eos_token_id]


def test_chat_template_rejects_unknown_roles(byte_tok):
    with pytest.raises(Exception, match="role must be system, user, assistant or tool"):
        byte_tok.apply_chat_template([{"role": "narrator", "content": "x"}], tokenize=False)


def test_word_tokenizer_chat_template_has_no_unknowns(word_tok):
    ids = word_tok.apply_chat_template(list(ALL_ROLES[:3]), add_generation_prompt=True, return_dict=False)
    tokens = word_tok.convert_ids_to_tokens(ids)
    assert tokens[:2] == [IM_START, "system"] and tokens[-2:] == [IM_START, "assistant"]
    assert word_tok.chat_template == CHAT_TEMPLATE


# ---- tiny models ------------------------------------------------------------------------------


def test_tiny_model_matches_tokenizer(byte_tok):
    model = build_tiny_model(byte_tok)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.vocab_size == len(byte_tok)
    assert model.config.pad_token_id == byte_tok.pad_token_id
    assert model.config.eos_token_id == byte_tok.eos_token_id
    assert model.generation_config.eos_token_id == byte_tok.eos_token_id
    assert model.generation_config.pad_token_id == byte_tok.pad_token_id
    assert not model.training
    logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, len(byte_tok))


def test_tiny_model_qwen2(word_tok):
    model = build_tiny_model(word_tok, arch="qwen2", hidden_size=32, num_heads=2)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.vocab_size == len(word_tok)


def test_tiny_model_init_is_seeded_and_leaves_global_rng_alone(byte_tok):
    state = torch.random.get_rng_state()
    a, b = build_tiny_model(byte_tok, seed=3), build_tiny_model(byte_tok, seed=3)
    c = build_tiny_model(byte_tok, seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    pairs = list(zip(a.parameters(), b.parameters()))
    assert all(torch.equal(p, q) for p, q in pairs)
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"arch": "gpt9"}, "arch must be one of"),
        ({"hidden_size": 30, "num_heads": 4}, "divisible by num_heads"),
        ({"copy_heads": True, "num_layers": 1}, "copy_heads needs num_layers >= 2"),
        ({"copy_heads": True, "num_heads": 2}, "num_heads >= 4"),
    ],
)
def test_tiny_model_rejects_bad_arguments(byte_tok, kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_tiny_model(byte_tok, **kwargs)


# ---- save and load ----------------------------------------------------------------------------


@pytest.fixture
def offline(monkeypatch):
    """Forbid network access: the hub flag, and any socket connection at all."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True, raising=False)

    def no_network(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", no_network)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_make_tiny_model_loads_back_through_auto_classes(tmp_path, offline, byte_tok, arch):
    path = make_tiny_model(tmp_path / "tiny", arch=arch, seed=7)
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    reference = build_tiny_model(byte_tok, arch=arch, seed=7)

    ids = torch.tensor(
        [byte_tok.apply_chat_template(list(ALL_ROLES), add_generation_prompt=True, return_dict=False)]
    )
    with torch.no_grad():
        diff = (model(ids).logits - reference(ids).logits).abs().max().item()
    assert diff < 1e-6
    assert tok.chat_template == CHAT_TEMPLATE
    assert tok.padding_side == "left"
    assert (tok.pad_token, tok.eos_token) == (PAD_TOKEN, IM_END)
    assert tok.decode(tok.encode("héllo 🃏\n", add_special_tokens=False)) == "héllo 🃏\n"
    assert model.generation_config.eos_token_id == tok.eos_token_id


def test_make_tiny_model_with_word_tokenizer(tmp_path, offline):
    path = make_tiny_model(tmp_path / "words", tokenizer="words", corpus=KUHN_CORPUS)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    ids = tok.encode("Reply with [bet]", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids) == ["Reply", "with", "[bet]"]
    assert model.config.vocab_size == len(tok)
    assert tok.chat_template == CHAT_TEMPLATE


def test_save_tiny_returns_the_folder(tmp_path, word_tok):
    path = save_tiny(
        str(tmp_path / "a" / "b"), word_tok, build_tiny_model(word_tok, hidden_size=16, num_heads=2)
    )
    assert (path / "config.json").is_file() and (path / "tokenizer.json").is_file()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tokenizer": "words"}, "needs corpus"),
        ({"tokenizer": "bytes", "corpus": ["x"]}, "only used with tokenizer='words'"),
        ({"tokenizer": "chars"}, "must be 'bytes' or 'words'"),
    ],
)
def test_make_tiny_model_rejects_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_tiny_model(tmp_path, **kwargs)


def test_zero_head_starts_from_a_uniform_next_token_distribution(word_tok):
    import torch

    random_head = build_tiny_model(word_tok, initializer_range=0.125, seed=1)
    zero_head = build_tiny_model(word_tok, initializer_range=0.125, seed=1, zero_head=True)
    ids = torch.tensor([word_tok.encode("Your card : K . Your move : [call] or [fold] .")])
    with torch.no_grad():
        spread = random_head(ids).logits[0, -1].std().item()
        logits = zero_head(ids).logits[0, -1]
    assert spread > 0.1  # a random head with a large init is far from uniform
    assert torch.equal(logits, torch.zeros_like(logits))
    body = {k: v for k, v in zero_head.state_dict().items() if not k.startswith("lm_head")}
    assert all(torch.equal(v, random_head.state_dict()[k]) for k, v in body.items())  # only the head differs


# ---- copy heads ---------------------------------------------------------------------------------


def _copy_accuracy(model, vocab: list[int], filler: list[int] | None = None, seed: int = 0) -> float:
    """How often the model's argmax continues a random string of ``vocab`` tokens it saw earlier (its second
    copy), the two copies among random ``filler`` tokens (default: ``vocab``)."""
    import random

    rng = random.Random(seed)
    filler = filler or vocab
    hits = total = 0
    for _ in range(24):
        span = [rng.choice(vocab) for _ in range(12)]
        seq = ([rng.choice(filler) for _ in range(rng.randint(0, 30))] + span
               + [rng.choice(filler) for _ in range(rng.randint(0, 300))] + span)
        with torch.no_grad():
            predicted = model(input_ids=torch.tensor([seq])).logits[0].argmax(-1).tolist()
        for i in range(len(seq) - len(span) + 1, len(seq)):  # the second copy after its first token
            hits += predicted[i - 1] == seq[i]
            total += 1
    return hits / total


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_copy_heads_copy_a_repeated_span_before_any_training(arch):
    corpus = [f"order #W{n:07d} for customer C{n % 9973:04d} at {n % 997} Oak Lane" for n in range(0, 10**7, 7919)]
    tok = build_bpe_tokenizer(corpus, vocab_size=512)
    vocab = [i for i in range(len(tok)) if i not in tok.all_special_ids]
    plain = build_tiny_model(tok, arch=arch, hidden_size=128, num_heads=4, seed=1)
    copying = build_tiny_model(tok, arch=arch, hidden_size=128, num_heads=4, seed=1, copy_heads=True)
    assert _copy_accuracy(plain, vocab) < 0.05  # a random initialisation never copies
    assert _copy_accuracy(copying, vocab) > 0.75  # the circuit does, 300 tokens after the first copy
    digits = [tok.convert_tokens_to_ids(str(d)) for d in range(10)]
    # an id's digits repeat tokens, so the last two tokens tell where the copy is (0.1 is chance)
    assert _copy_accuracy(copying, digits, filler=vocab) > 0.5
    assert copying.config.attention_bias if arch == "llama" else True
    # the circuit trains like any weights: every parameter gets a gradient (the silent heads and MLPs too)
    ids = torch.tensor([[vocab[i] for i in range(40)]])
    copying.train()
    copying(input_ids=ids, labels=ids).loss.backward()
    silent = [n for n, p in copying.named_parameters() if p.grad is None]
    assert not silent, silent


# ---- the model a run builds ------------------------------------------------------------------


def test_a_run_builds_the_envs_tiny_model_over_the_envs_tokenizer_and_marks_it():
    from llm_zoo import catalogue, env_spec
    from llm_zoo.models import build_tokenizer_and_model, env_tokenizer, model_config
    from llm_zoo.trainers.grpo import make_config

    config = make_config("kuhn_poker_v0", {"model_hidden_size": 16, "model_layers": 1})
    tokenizer, model = build_tokenizer_and_model(config, seed=5)
    assert tokenizer.get_vocab() == env_tokenizer(env_spec("kuhn_poker_v0"), "words").get_vocab()
    assert model.config.hidden_size == 16 and model.config.num_hidden_layers == 1
    assert getattr(model.config, catalogue.TINY_MARK) is True  # a checkpoint of it is read as the tiny model again
    assert model_config(config).to_dict() == model.config.to_dict()  # what the memory preflight reads
    again = build_tokenizer_and_model(config, seed=5)[1].state_dict()
    assert all(torch.equal(v, again[k]) for k, v in model.state_dict().items())  # the seed fixes the weights
    other = build_tokenizer_and_model(config, seed=6)[1].state_dict()
    assert not all(torch.equal(v, other[k]) for k, v in model.state_dict().items())


def test_model_fields_that_cannot_build_a_model_are_refused_naming_the_field():
    from types import SimpleNamespace

    from llm_zoo.models import check_model_fields

    fine = {"dtype": "auto", "lora_r": 0, "lora_alpha": 16.0, "lora_dropout": 0.0, "lora_layers": 0, "model": "tiny",
            "model_tokenizer": "words"}
    check_model_fields(SimpleNamespace(**fine))
    with pytest.raises(ValueError, match=r"sft config\.dtype must be one of .*got 'float8'"):
        check_model_fields(SimpleNamespace(**{**fine, "dtype": "float8"}), "sft config")
    with pytest.raises(ValueError, match=r"lora_r=4 needs a model directory.*set lora_r=0"):
        check_model_fields(SimpleNamespace(**{**fine, "lora_r": 4}))
    with pytest.raises(ValueError, match=r"lora_dropout in \[0, 1\)"):
        check_model_fields(SimpleNamespace(**{**fine, "lora_dropout": 1.0}))
    with pytest.raises(ValueError, match=r"config\.lora_layers must be >= 0 .*needs lora_r > 0"):
        check_model_fields(SimpleNamespace(**{**fine, "lora_layers": 2}))
    with pytest.raises(ValueError, match=r"config\.model_tokenizer must be one of .*got 'chars'"):
        check_model_fields(SimpleNamespace(**{**fine, "model_tokenizer": "chars"}))


def test_the_default_tokenizer_of_an_env_with_tools_writes_a_call_back_byte_for_byte():
    from llm_zoo import env_spec, toolcalls
    from llm_zoo.models import declares_tools, env_tokenizer

    shop, poker = env_spec("user_sim_v0"), env_spec("kuhn_poker_v0")
    assert declares_tools(shop) and not declares_tools(poker)
    auto = env_tokenizer(shop)  # model_tokenizer's default, "auto"
    assert auto.get_vocab() == env_tokenizer(shop, "bpe_words").get_vocab()
    call = '<tool_call>{"name": "find_order", "arguments": {"email": "ana.lee@example.com"}}</tool_call>'
    back = auto.decode(auto(call, add_special_tokens=False)["input_ids"])
    assert back == call and [c.name for c in toolcalls.parse(back).calls] == ["find_order"]
    words = env_tokenizer(shop, "words")  # what the default was: the spaces it decodes with break the call
    assert words.decode(words(call, add_special_tokens=False)["input_ids"]) != call


def test_adding_and_loading_adapters_leaves_out_transformers_deprecation_that_peft_triggers(tmp_path, offline):
    # peft reads model.is_gradient_checkpointing, which transformers 5 warns about on every run; other warnings pass
    import warnings

    from llm_zoo.models import add_lora, load_pretrained

    path = make_tiny_model(tmp_path / "tiny", seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = add_lora(AutoModelForCausalLM.from_pretrained(path), path, r=2, alpha=4.0, dropout=0.0)
        model.save_pretrained(tmp_path / "adapters")
        AutoTokenizer.from_pretrained(path).save_pretrained(tmp_path / "adapters")
        _, loaded = load_pretrained(tmp_path / "adapters", trainable=True)
        warnings.warn("a warning of llm_zoo's own", FutureWarning, stacklevel=1)
    assert type(loaded).__name__ == "PeftModelForCausalLM"
    messages = [str(w.message) for w in caught]
    assert not any("is_gradient_checkpointing" in m for m in messages), messages
    assert "a warning of llm_zoo's own" in messages
