"""Tiny models and tokenizers built offline, saved and loaded the way real checkpoints are.

Tests, examples and CPU smoke runs need a causal LM with a chat template, but no model hub is
reachable there. This module builds both from code:

- :func:`build_byte_tokenizer`: byte-level, encodes any text (one token per UTF-8 byte).
- :func:`build_word_tokenizer`: word-level over a corpus, so a game move such as ``[check]`` is
  one token and a tiny model can learn to play in a few steps.
- :func:`build_bpe_tokenizer`: byte-level BPE learned from a corpus, digits one by one: lossless
  (tool-call JSON, ids and emails come back byte for byte) and about a third of the bytes' length.
- :func:`build_tiny_model`: a randomly initialised ``LlamaForCausalLM`` or ``Qwen2ForCausalLM``
  sized to the tokenizer.
- :func:`save_tiny` / :func:`make_tiny_model`: ``save_pretrained`` into a folder, which
  ``AutoTokenizer.from_pretrained`` and ``AutoModelForCausalLM.from_pretrained`` then load exactly
  as they load a downloaded checkpoint.

Both tokenizers share the special tokens and a ChatML-style chat template::

    <|im_start|>system\\n{content}<|im_end|>\\n<|im_start|>user\\n{content}<|im_end|>\\n<|im_start|>assistant\\n

``<|im_end|>`` is the end-of-turn token and the tokenizer's ``eos_token``; ``<|pad|>`` pads.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

PAD_TOKEN = "<|pad|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
"""End of a turn; the tokenizers' ``eos_token`` and the models' stop token."""
UNK_TOKEN = "[UNK]"
"""Word tokenizer only: every word outside its vocabulary."""
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
ROLES = ("system", "user", "assistant", "tool")

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant', 'tool'] -%}"
    "{{- raise_exception('chat template: role must be system, user, assistant or tool, got ' ~ message['role']) -}}"
    "{%- endif -%}"
    "{{- '" + IM_START + "' + message['role'] + '\\n' -}}"
    # {% generation %} marks what the model writes, for return_assistant_tokens_mask (SFT export).
    "{%- if message['role'] == 'assistant' -%}"
    "{% generation %}{{- message['content'] + '" + IM_END + "' -}}{% endgeneration %}"
    "{%- else -%}"
    "{{- message['content'] + '" + IM_END + "' -}}"
    "{%- endif -%}"
    "{{- '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '" + IM_START + "assistant\\n' -}}{%- endif -%}"
)
"""ChatML-style Jinja template shared by both tokenizers; rejects unknown roles."""

WORD_PATTERN = r"\[[^\[\]\s]+\]|\w+|[^\w\s]"
"""How :func:`build_word_tokenizer` cuts whitespace-free text: a bracketed word such as ``[check]``
or ``[raise_2]`` stays whole, a run of word characters (``\\w+``: letters, digits, underscore, any
script) is one piece, and every other character (punctuation, symbols, emoji) is a piece alone."""

_ARCHS = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}


# ---- tokenizers -----------------------------------------------------------------------------


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """Build a byte-level tokenizer: token ``i < 256`` is byte ``i``, then the special tokens.

    Any string encodes (as its UTF-8 bytes) and ``decode(encode(text)) == text``, as long as the
    text does not itself spell a special token such as ``<|im_end|>``.
    """
    # The ByteLevel pre-tokenizer stands each byte in for a printable character (GPT-2's table);
    # ordering the vocabulary by byte value makes token id == byte value.
    byte_chars = _byte_to_char()
    assert set(byte_chars) == set(pre_tokenizers.ByteLevel.alphabet())
    vocab = {char: byte for byte, char in enumerate(byte_chars)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    return _wrap(backend, unk_token=None)


def build_word_tokenizer(corpus: Iterable[str], extra_words: Iterable[str] = ()) -> PreTrainedTokenizerFast:
    """Build a word-level tokenizer whose vocabulary is every piece of ``corpus`` and ``extra_words``.

    Text is split at whitespace, then each chunk is cut by :data:`WORD_PATTERN`: bracketed words
    (``[check]``) stay whole, ``\\w+`` runs are words, any other character is a piece alone. So
    ``"Say [bet]!"`` is ``Say``, ``[bet]``, ``!``. A piece outside the vocabulary becomes ``[UNK]``.

    The vocabulary is the special tokens, ``[UNK]``, the four role names (so the chat template
    encodes without ``[UNK]``) and then the distinct pieces in sorted order, so it depends only on
    the set of pieces. Whitespace is not kept: decoding joins the tokens with single spaces
    (``"Say [bet] !"``), and with ``skip_special_tokens=True`` ``[UNK]`` is dropped too.

    Args:
        corpus: Texts to draw the vocabulary from (prompts, rules, replies).
        extra_words: More text to include, split by the same rule (e.g. every legal move).
    """
    if isinstance(corpus, str):
        raise TypeError(
            "build_word_tokenizer takes an iterable of texts as corpus, got a single str; wrap it: [text]."
        )
    splitter = _word_splitter()
    pieces: set[str] = set()
    for text in (*corpus, *extra_words):
        if not isinstance(text, str):
            raise TypeError(
                f"build_word_tokenizer: corpus and extra_words hold str, got {type(text).__name__}."
            )
        pieces.update(piece for piece, _ in splitter.pre_tokenize_str(text))
    head = [*SPECIAL_TOKENS, UNK_TOKEN, *ROLES]
    words = head + sorted(pieces - set(head))
    backend = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token=UNK_TOKEN))
    backend.pre_tokenizer = splitter
    # No decoder: the tokenizers library then joins tokens with single spaces.
    return _wrap(backend, unk_token=UNK_TOKEN)


def build_bpe_tokenizer(corpus: Iterable[str], vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    """Build a byte-level BPE tokenizer learned from ``corpus``, with every digit a token of its own.

    Any text encodes and ``decode(encode(text)) == text`` (the bytes are the base alphabet), so
    replies that must come back exactly (tool-call JSON, order ids, emails) do; merges learned
    from the env's own text make its prompts and transcripts a few times shorter than bytes.
    Digits stay one per token, so a tiny model writes an id it has never seen digit by digit.
    The result depends only on the corpus and ``vocab_size`` (the BPE trainer is deterministic).
    """
    if isinstance(corpus, str):
        raise TypeError("build_bpe_tokenizer takes an iterable of texts as corpus, got a single str; wrap it: [text].")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(list(corpus), trainer)
    return _wrap(backend, unk_token=None)


def _wrap(backend: Tokenizer, *, unk_token: str | None) -> PreTrainedTokenizerFast:
    """Add the special tokens and chat template to ``backend`` and wrap it for transformers."""
    backend.add_special_tokens(list(SPECIAL_TOKENS) + ([unk_token] if unk_token else []))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=IM_END,
        unk_token=unk_token,
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_input_names=["input_ids", "attention_mask"],
    )


def _word_splitter() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")]
    )


def _byte_to_char() -> list[str]:
    """Return GPT-2's byte -> printable character table, indexed by byte value.

    Bytes that are printable Latin-1 characters stand for themselves; the other 68 bytes take the
    code points from 256 upward, in byte order.
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table, spare = {}, 256
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(spare)
            spare += 1
    return [table[byte] for byte in range(256)]


# ---- models ---------------------------------------------------------------------------------


BENCHMARK_SHAPES: dict[str, dict[str, int]] = {
    # about 0.5B parameters: the GPU benchmarks' model, built from a config (no hub)
    "0.5b": {"hidden_size": 1024, "num_layers": 24, "num_heads": 16, "intermediate_size": 5632},
    # the same family at a size a --quick run or a CPU can afford
    "small": {"hidden_size": 256, "num_layers": 4, "num_heads": 4, "intermediate_size": 1024},
}
"""Keyword arguments of :func:`build_tiny_model` for the benchmark models, by name."""


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    *,
    arch: Literal["llama", "qwen2"] = "llama",
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 2048,
    initializer_range: float = 0.02,
    seed: int = 0,
    zero_head: bool = False,
) -> PreTrainedModel:
    """Build a randomly initialised causal LM sized to ``tokenizer``, in eval mode, in float32.

    The vocabulary is ``len(tokenizer)``; pad and eos ids come from the tokenizer and are set in
    both the config and the generation config (there is no bos token). Initialisation draws from a
    forked torch RNG seeded with ``seed``, so the same arguments give the same weights and the
    global RNG is left untouched.

    Args:
        tokenizer: From :func:`build_byte_tokenizer` or :func:`build_word_tokenizer` (or any
            tokenizer with pad and eos tokens).
        arch: ``"llama"`` -> ``LlamaForCausalLM``; ``"qwen2"`` -> ``Qwen2ForCausalLM``.
        hidden_size: Width of the residual stream; divisible by ``num_heads``.
        num_layers: Transformer blocks.
        num_heads: Attention heads (and key/value heads: no grouped-query attention).
        intermediate_size: Width of the MLP; defaults to ``4 * hidden_size``.
        max_position_embeddings: Longest sequence the config declares.
        initializer_range: Std of the normal weight initialisation. Larger values (about
            ``hidden_size ** -0.5``) make a tiny model's output depend on its context from the
            start, which matters when it learns by reinforcement from scratch.
        seed: Seed of the weight initialisation.
        zero_head: Start the output layer (``lm_head``) at zero, so the first next-token distribution
            is uniform whatever the context and the seed. With a large ``initializer_range`` a
            random head can instead make some contexts nearly deterministic from the start (a
            logit gap of 4.5 between two moves in one seed), where policy gradients vanish.
    """
    if arch not in _ARCHS:
        raise ValueError(f"build_tiny_model: arch must be one of {sorted(_ARCHS)}, got {arch!r}.")
    if hidden_size % num_heads:
        raise ValueError(
            f"build_tiny_model: hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads})."
        )
    if tokenizer.pad_token_id is None or tokenizer.eos_token_id is None:
        raise ValueError(
            "build_tiny_model needs a tokenizer with pad and eos tokens, got "
            f"pad_token={tokenizer.pad_token!r}, eos_token={tokenizer.eos_token!r}; "
            "use llm_zoo.models.build_byte_tokenizer() or build_word_tokenizer(corpus)."
        )
    config_cls, model_cls = _ARCHS[arch]
    ids = {
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": None,
    }
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        initializer_range=initializer_range,
        tie_word_embeddings=False,
        **ids,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    if zero_head:
        with torch.no_grad():
            model.get_output_embeddings().weight.zero_()
    model.generation_config = GenerationConfig(**ids)
    return model.eval()


def save_tiny(
    path: str | os.PathLike[str], tokenizer: PreTrainedTokenizerFast, model: PreTrainedModel
) -> Path:
    """Save ``model`` and ``tokenizer`` (with its chat template) into the folder ``path``; return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_tiny_model(
    path: str | os.PathLike[str],
    *,
    tokenizer: Literal["bytes", "words"] = "bytes",
    corpus: Iterable[str] | None = None,
    **model_kwargs,
) -> Path:
    """Build a tokenizer and a tiny model and save both into ``path``; return the folder.

    Load it back with ``AutoTokenizer.from_pretrained(path)`` and
    ``AutoModelForCausalLM.from_pretrained(path)``, or ``TransformersPolicy.from_pretrained(path)``.

    Args:
        path: Folder to write (created if missing).
        tokenizer: ``"bytes"`` for :func:`build_byte_tokenizer`, ``"words"`` for
            :func:`build_word_tokenizer` over ``corpus``.
        corpus: Texts for the word vocabulary; required with ``tokenizer="words"`` only.
        **model_kwargs: Passed to :func:`build_tiny_model` (``arch``, ``hidden_size``, ``seed``, ...).
    """
    if tokenizer == "bytes":
        if corpus is not None:
            raise ValueError(
                "make_tiny_model: corpus is only used with tokenizer='words'; drop it or switch."
            )
        tok = build_byte_tokenizer()
    elif tokenizer == "words":
        if corpus is None:
            raise ValueError(
                "make_tiny_model(tokenizer='words') needs corpus=[...] to draw the vocabulary from."
            )
        tok = build_word_tokenizer(corpus)
    else:
        raise ValueError(f"make_tiny_model: tokenizer must be 'bytes' or 'words', got {tokenizer!r}.")
    return save_tiny(path, tok, build_tiny_model(tok, **model_kwargs))
