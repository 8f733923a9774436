"""Tiny models and tokenizers built offline, saved and loaded the way real checkpoints are.

Tests, examples and CPU smoke runs need a causal LM with a chat template, but no model hub is
reachable there. This module builds both from code:

- :func:`build_byte_tokenizer`: byte-level, encodes any text (one token per UTF-8 byte).
- :func:`build_word_tokenizer`: word-level over a corpus, so a game move such as ``[check]`` is
  one token and a tiny model can learn to play in a few steps.
- :func:`build_bpe_tokenizer`: byte-level BPE learned from a corpus, digits one by one: lossless
  (tool-call JSON, ids and emails come back byte for byte) and about a third of the bytes' length;
  ``word_bounded=True`` keeps merges inside words, so a word has the same tokens wherever it stands.
- :func:`build_tiny_model`: a randomly initialised ``LlamaForCausalLM`` or ``Qwen2ForCausalLM``
  sized to the tokenizer; with ``copy_heads=True`` its first two layers start as an induction
  circuit, so it copies from its context before any training (:func:`install_copy_heads`).
- :func:`save_tiny` / :func:`make_tiny_model`: ``save_pretrained`` into a folder, which
  ``AutoTokenizer.from_pretrained`` and ``AutoModelForCausalLM.from_pretrained`` then load exactly
  as they load a downloaded checkpoint.
- :func:`build_tokenizer_and_model`: the model a run starts from, for ``train`` and ``sft`` alike: a
  model directory (:func:`load_pretrained`, LoRA adapters by :func:`add_lora`), or a tiny model over
  the env's tokenizer (:func:`env_tokenizer`).

Both tokenizers share the special tokens and a ChatML-style chat template::

    <|im_start|>system\\n{content}<|im_end|>\\n<|im_start|>user\\n{content}<|im_end|>\\n<|im_start|>assistant\\n

``<|im_end|>`` is the end-of-turn token and the tokenizer's ``eos_token``; ``<|pad|>`` pads.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

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

from llm_zoo import catalogue
from llm_zoo.spec import EnvSpec, env_spec

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

WORD_BOUNDARY = r"\s|[^\w\s]"
"""What :func:`build_bpe_tokenizer` isolates with ``word_bounded=True``: each whitespace character and
each character that is neither a word character nor whitespace (punctuation, symbols)."""

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


def build_bpe_tokenizer(corpus: Iterable[str], vocab_size: int = 1024, *,
                        word_bounded: bool = False) -> PreTrainedTokenizerFast:
    """Build a byte-level BPE tokenizer learned from ``corpus``, with every digit a token of its own.

    Any text encodes and ``decode(encode(text)) == text`` (the bytes are the base alphabet), so
    replies that must come back exactly (tool-call JSON, order ids, emails) do; merges learned
    from the env's own text make its prompts and transcripts a few times shorter than bytes.
    Digits stay one per token, so a tiny model writes an id it has never seen digit by digit.
    The result depends only on the corpus, ``vocab_size`` and ``word_bounded`` (the BPE trainer is
    deterministic).

    With ``word_bounded=True`` every whitespace character and every punctuation mark is a token of its
    own, and merges stay inside a run of word characters (:data:`WORD_BOUNDARY`): a word then has the
    same tokens wherever it stands. GPT-2's split glues a leading space or quote onto the word after
    it, so the email a customer writes (``is ada.dunn99@``: `` a``, ``d``, ``a``) and the same email
    in a tool call's JSON (``": "ada.dunn99@``: ``ad``, ``a``) share no first tokens, and a model
    cannot copy one into the other token by token. It costs about 1.3x the tokens on user_sim's text.
    """
    if isinstance(corpus, str):
        raise TypeError("build_bpe_tokenizer takes an iterable of texts as corpus, got a single str; wrap it: [text].")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        ([pre_tokenizers.Split(Regex(WORD_BOUNDARY), behavior="isolated")] if word_bounded else [])
        + [pre_tokenizers.Digits(individual_digits=True),
           pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=not word_bounded)])
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
    copy_heads: bool = False,
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
        copy_heads: Start the first two layers as an induction circuit (:func:`install_copy_heads`):
            the model then copies a span it has seen before any training, which a tiny model
            trained from scratch learns only after a long plateau. Needs ``num_layers >= 2`` and
            ``num_heads >= 4``; the attention gets biases and a slow RoPE base (``COPY_ROPE_THETA``).
    """
    if arch not in _ARCHS:
        raise ValueError(f"build_tiny_model: arch must be one of {sorted(_ARCHS)}, got {arch!r}.")
    if hidden_size % num_heads:
        raise ValueError(
            f"build_tiny_model: hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads})."
        )
    if copy_heads and (num_layers < 2 or num_heads < 4):
        raise ValueError(f"build_tiny_model: copy_heads needs num_layers >= 2 and num_heads >= 4 (the circuit uses "
                         f"two heads of each of the first two layers); got num_layers={num_layers}, num_heads={num_heads}.")
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
        **({"attention_bias": True, "rope_parameters": {"rope_theta": COPY_ROPE_THETA, "rope_type": "default"}}
           if copy_heads else {}),
        **ids,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
        if copy_heads:
            install_copy_heads(model, seed)
    if zero_head:
        with torch.no_grad():
            model.get_output_embeddings().weight.zero_()
    model.generation_config = GenerationConfig(**ids)
    return model.eval()


COPY_ROPE_THETA = 1e8
"""RoPE base of a model with copy heads: the slower half of each head's rotary pairs then turns by at
most about 0.1 rad over 1000 positions, so a content match there holds across a long transcript."""


def install_copy_heads(model: PreTrainedModel, seed: int = 0) -> None:
    """Set the first two layers of a freshly built tiny model to an induction circuit, in place.

    The residual stream is laid out as: the token embedding in its first half, the previous token
    (a projection of its embedding) in the next ``head_dim`` dimensions, the token before that in
    the ``head_dim`` after. Layer 0's heads 0 and 1 attend to the positions 1 and 2 back by content-
    free query and key biases (RoPE turns them into a score peaked at that offset) and write those
    tokens there. Layer 1's head 0 is the copy head: its query is the current token and the one
    before, its key the previous two tokens of each position (in the slow rotary pairs, so the
    match does not decay with distance), so it attends to where the last two tokens occurred
    before, and writes that position's token back into the token dimensions, which the output
    layer reads as the embedding does. Everything else of those two layers starts silent (zero
    output projections of the other heads, zero MLP output); all of it trains as usual.

    Before any training the model predicts the continuation of a repeated random token string
    about 9 times in 10 (``tests/test_models.py``); the plain initialisation, never.
    """
    config = model.config
    hidden, heads = config.hidden_size, config.num_attention_heads
    hd = hidden // heads
    half, token_dims = hd // 2, hidden // 2
    prev, prev2 = slice(token_dims, token_dims + hd), slice(token_dims + hd, token_dims + 2 * hd)
    layers = model.model.layers
    inv = model.model.rotary_emb.inv_freq.double()
    rng = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb.zero_()
        emb[:, :token_dims] = torch.randn(emb.shape[0], token_dims, generator=rng)
        read = torch.linalg.qr(torch.randn(token_dims, hd, generator=rng))[0].T  # [hd, token_dims], orthonormal rows
        first = layers[0].self_attn
        first.o_proj.weight.zero_()
        for module in (first, layers[1].self_attn):
            for proj in (module.q_proj, module.k_proj, module.v_proj, module.o_proj):
                if proj.bias is not None:
                    proj.bias.zero_()
        offsets = torch.arange(0, 4096, dtype=torch.double)
        for head, back, out in ((0, 1, prev), (1, 2, prev2)):
            rows = slice(head * hd, (head + 1) * hd)
            # score(offset) = sum_i cos((offset - back) * theta_i): highest at `back`, by `margin` over any other
            score = torch.cos((offsets[:, None] - back) * inv[None]).sum(-1)
            margin = float(score[back] - torch.cat([score[:back], score[back + 1:]]).max())
            scale = math.sqrt(16.0 / margin * math.sqrt(hd))  # q.k / sqrt(hd) = 16 at `back`, 16 more than elsewhere
            query, key = torch.zeros(hd), torch.zeros(hd)
            query[:half] = scale
            key[:half] = scale * torch.cos(back * inv).float()
            key[half:] = scale * torch.sin(back * inv).float()
            first.q_proj.weight[rows] = 0
            first.k_proj.weight[rows] = 0
            first.q_proj.bias[rows] = query
            first.k_proj.bias[rows] = key
            first.v_proj.weight[rows] = 0
            first.v_proj.weight[rows, :token_dims] = read
            first.o_proj.weight[out, rows] = torch.eye(hd)
        layers[0].mlp.down_proj.weight.zero_()
        copy = layers[1].self_attn
        rows = slice(0, hd)
        slow = [p for p in range(half // 2, half)]  # the slower half of the rotary pairs
        pairs_now, pairs_before = slow[: len(slow) // 2], slow[len(slow) // 2:]
        dims_now = [i for p in pairs_now for i in (p, p + half)]
        dims_before = [i for p in pairs_before for i in (p, p + half)]
        sharp = 6.0
        to_now = torch.linalg.qr(torch.randn(hd, len(dims_now), generator=rng))[0].T
        to_before = torch.linalg.qr(torch.randn(hd, len(dims_before), generator=rng))[0].T
        copy.q_proj.weight[rows] = 0
        copy.k_proj.weight[rows] = 0
        copy.q_proj.weight[dims_now, :token_dims] = sharp * (to_now @ read)  # this token ...
        copy.k_proj.weight[dims_now, prev] = sharp * to_now  # ... was the previous one there
        copy.q_proj.weight[dims_before, prev] = sharp * to_before  # and the token before it ...
        copy.k_proj.weight[dims_before, prev2] = sharp * to_before  # ... the one before that
        copy.v_proj.weight[rows] = 0
        copy.v_proj.weight[rows, :token_dims] = read
        copy.o_proj.weight.zero_()
        copy.o_proj.weight[:token_dims, rows] = 8.0 * read.T
        layers[1].mlp.down_proj.weight.zero_()
        head = model.get_output_embeddings().weight
        head.zero_()
        head[:, :token_dims] = emb[:, :token_dims] / math.sqrt(token_dims)


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


# ---- pretrained models: dtype, LoRA adapters, loading ---------------------------------------

DTYPES = ("auto", "float32", "bfloat16")
"""The values of the trainer's ``dtype`` field."""

LORA_DEFAULT_TARGETS = "all-linear"
"""What LoRA adapts when ``lora_target_modules`` is empty: every linear layer of the decoder blocks (peft finds them
for the architecture: q/k/v/o and the MLP's gate/up/down for Llama, Qwen2 and the like), not the output layer.
Adapting the MLP as well as attention is what lets LoRA match full fine-tuning in RL (Schulman et al., "LoRA
Without Regret", Thinking Machines, 2025)."""

ADAPTER_CONFIG = "adapter_config.json"
"""The file that marks a directory of LoRA adapters (peft's ``save_pretrained``), beside the tokenizer."""


def resolve_dtype(dtype: str, *, pretrained: bool, device: str | torch.device = "cpu") -> torch.dtype:
    """Return the torch dtype a model is built in: ``dtype`` as named, or for ``auto`` bfloat16 for a pretrained
    model on a GPU that supports it and float32 otherwise (a tiny model always: its presets were tuned in float32)."""
    if dtype not in DTYPES:
        raise ValueError(f"config.dtype must be one of {DTYPES}; got {dtype!r}")
    if dtype != "auto":
        return getattr(torch, dtype)
    cuda = torch.cuda.is_available() if str(device) == "auto" else torch.device(device).type == "cuda"
    return torch.bfloat16 if pretrained and cuda and torch.cuda.is_bf16_supported() else torch.float32


def is_adapter_dir(path: str | os.PathLike[str]) -> bool:
    """Return whether ``path`` holds LoRA adapters (over a base model it names) rather than a whole model."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_base(path: str | os.PathLike[str]) -> str:
    """Return the base model an adapter directory names (``base_model_name_or_path``): a directory, or a hub name.

    Raises:
        FileNotFoundError: It names a directory that is gone (the message names it and how to point at it again).
    """
    import json

    base = json.loads((Path(path) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path") or ""
    hub_name = base.count("/") == 1 and not base.startswith((".", "/", "~"))  # owner/name, loaded from the hub
    if not (Path(base).is_dir() or hub_name):
        raise FileNotFoundError(f"{path} holds LoRA adapters over the base model {base!r}, which is not a local "
                                f"directory here; put the base model back there, or set base_model_name_or_path "
                                f"in {Path(path) / ADAPTER_CONFIG} to where it is now")
    return base


def load_pretrained(path: str | os.PathLike[str], dtype: torch.dtype = torch.float32, *, trainable: bool = False):
    """Return (tokenizer, model) from a model directory, or from an adapter directory over the base it names.

    Adapters are merged into the base for sampling and scoring (one model, no adapter overhead per pass);
    with ``trainable`` they stay a ``PeftModel`` whose adapters train on (a run started from an adapter
    checkpoint). The tokenizer is the directory's own (checkpoints save it beside the adapters).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if not is_adapter_dir(path):
        return tokenizer, AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    from peft import PeftModel

    base = AutoModelForCausalLM.from_pretrained(adapter_base(path), dtype=dtype)
    with _peft_wrapping():
        model = PeftModel.from_pretrained(base, path, is_trainable=trainable)
    return tokenizer, (model if trainable else model.merge_and_unload())


@contextlib.contextmanager
def _peft_wrapping() -> Iterator[None]:
    """Wrap a model in peft without transformers' FutureWarning on the ``is_gradient_checkpointing`` that peft reads
    (peft's to change, and printed on every run that adds or loads adapters); other warnings pass."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def add_lora(model: PreTrainedModel, base: str | os.PathLike[str], *, r: int, alpha: float, dropout: float,
             target_modules: list[str] | None = None, layers: int = 0):
    """Wrap ``model`` (loaded from the directory ``base``) in fresh LoRA adapters of rank ``r``; return the ``PeftModel``.

    Only the adapters train; ``with model.disable_adapter():`` gives back the base model's outputs.
    Saved checkpoints name ``base`` (its absolute path), which :func:`load_pretrained` reads. ``layers`` above 0
    puts the adapters in the top ``layers`` decoder blocks only: nothing below the lowest of them needs a gradient,
    so no graph is kept there, as long as checkpointing is enabled after this call, by
    :func:`llm_zoo.policies.compat.enable_checkpointing` (on a model that checkpoints already, peft makes the
    embeddings' output require a gradient, which reentrant checkpointing needs and llm_zoo's non-reentrant one does
    not).

    Raises:
        ValueError: ``layers`` is more than the model's blocks.
    """
    from peft import LoraConfig, get_peft_model

    named = str(Path(base).resolve()) if Path(base).is_dir() else str(base)  # a hub name stays a name
    blocks = int(model.config.num_hidden_layers)
    if layers > blocks:
        raise ValueError(f"lora_layers={layers} is more than the model's {blocks} decoder blocks; set it to at most "
                         f"{blocks}, or 0 for adapters in every block")
    targets: Any = list(target_modules) if target_modules else LORA_DEFAULT_TARGETS
    placed = {}
    if layers:  # peft places adapters by block over a list of names only: all-linear's, read off the blocks
        placed = {"layers_to_transform": list(range(blocks - layers, blocks)), "layers_pattern": "layers"}
        targets = targets if isinstance(targets, list) else sorted(
            {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
             if isinstance(module, torch.nn.Linear) and ".layers." in f".{name}"})
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, task_type="CAUSAL_LM", target_modules=targets,
                        **placed)
    with _peft_wrapping():
        peft_model = get_peft_model(model, config)
    peft_model.peft_config["default"].base_model_name_or_path = named
    return peft_model


# ---- the model a run builds: train and sft alike --------------------------------------------


TOKENIZERS = ("auto", "words", "bpe", "bpe_words")
"""The values of ``model_tokenizer``: how a tiny model's tokenizer is drawn from an env's corpus (``auto``:
``bpe_words`` for an env that declares tools, so a call the model writes comes back byte for byte, else ``words``)."""


def check_model_fields(config: Any, source: str = "config") -> None:
    """Refuse model fields (``dtype``, ``model_tokenizer``, ``lora_*``) that cannot build a model, naming the field
    (``ValueError``)."""
    if config.dtype not in DTYPES:
        raise ValueError(f"{source}.dtype must be one of {DTYPES}; got {config.dtype!r}")
    if config.model_tokenizer not in TOKENIZERS:
        raise ValueError(f"{source}.model_tokenizer must be one of {TOKENIZERS}; got {config.model_tokenizer!r:.60}")
    if int(config.lora_r) < 0 or not config.lora_alpha > 0 or not 0.0 <= config.lora_dropout < 1.0:
        raise ValueError(f"{source}: lora_r must be >= 0 (0: full fine-tuning), lora_alpha > 0 and lora_dropout in "
                         f"[0, 1); got {config.lora_r!r}, {config.lora_alpha!r} and {config.lora_dropout!r}")
    if int(config.lora_layers) < 0 or (config.lora_layers and not config.lora_r):
        raise ValueError(f"{source}.lora_layers must be >= 0 (0: adapters in every block; N: in the top N) and "
                         f"needs lora_r > 0 (adapters to place); got lora_layers={config.lora_layers!r} with "
                         f"lora_r={config.lora_r!r}")
    if config.lora_r and config.model == catalogue.TINY:
        raise ValueError(f"{source}.lora_r={config.lora_r} needs a model directory to adapt (--set model=DIR: the "
                         "checkpoints name it as the adapters' base); the tiny model trains whole: set lora_r=0")


def build_tokenizer_and_model(config: Any, seed: int, spec: EnvSpec | None = None) -> tuple[Any, torch.nn.Module]:
    """Return (tokenizer, model) as ``train`` and ``sft`` build them: a model directory (or adapters over the base
    they name), or the env's tokenizer (:func:`env_tokenizer`) and a tiny model of the configured shape.

    ``config`` is any config with the model fields (``TrainConfig`` or ``SFTConfig``: ``model``, ``model_*``,
    ``dtype``, ``device``, ``gradient_checkpointing``, ``lora_*``, ``env``); ``spec`` is the env's, looked up by
    ``config.env`` when not given; ``seed`` seeds the tiny model's initialisation. One builder for both, so a
    warm start's checkpoint is the model RL would have built.
    """
    path = model_dir(config)
    dtype = resolve_dtype(config.dtype, pretrained=path is not None, device=config.device)
    if path is not None:  # a model directory, or adapters over the base they name (trained on with lora_r)
        tokenizer, model = load_pretrained(path, dtype, trainable=bool(config.lora_r))
    else:
        tokenizer = env_tokenizer(spec or env_spec(config.env), config.model_tokenizer)
        model = build_tiny_model(tokenizer, hidden_size=config.model_hidden_size, num_layers=config.model_layers,
                                 initializer_range=config.model_init_std, seed=seed,
                                 zero_head=config.model_zero_head, copy_heads=config.model_copy_heads)
        # config.json keeps the mark: a warm start's or a run's checkpoint of this model is read as the env's
        # tiny model again (catalogue.is_pretrained), so its preset and tiny-model settings still apply
        setattr(model.config, catalogue.TINY_MARK, True)
        if dtype != torch.float32:
            model.to(dtype)
    if config.lora_r and not is_adapter_dir(path):
        model = add_lora(model, path, r=config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout,
                         target_modules=config.lora_target_modules, layers=int(config.lora_layers))
    if config.gradient_checkpointing:  # recompute each block's activations in the backward pass instead of keeping them
        from llm_zoo.policies.compat import enable_checkpointing

        enable_checkpointing(model)  # after the adapters: frozen blocks below them then build no graph (add_lora)
    return tokenizer, model


def env_tokenizer(spec: EnvSpec, kind: str = "auto") -> PreTrainedTokenizerFast:
    """Return the tokenizer a tiny model of ``spec``'s env gets: drawn from its corpus as ``kind`` (the config's
    ``model_tokenizer``) says (word-level, BPE, or word-bounded BPE; ``auto``: word-bounded BPE where the env declares
    tools, else word-level), or byte-level for an env without a corpus."""
    if kind not in TOKENIZERS:
        raise ValueError(f"config.model_tokenizer must be one of {TOKENIZERS}; got {kind!r:.60}")
    if not spec.corpus:
        return build_byte_tokenizer()
    if kind == "auto":
        kind = "bpe_words" if declares_tools(spec) else "words"
    if kind == "words":
        return build_word_tokenizer(spec.corpus())
    return build_bpe_tokenizer(spec.corpus(), word_bounded=kind == "bpe_words")


def declares_tools(spec: EnvSpec) -> bool:
    """Whether ``spec``'s env is a :class:`~llm_zoo.envs.core.TextEnv` that overrides the ``tools`` hook.

    Word-level decoding puts a space between tokens, so a tool call a tiny model writes with it never parses:
    ``model_tokenizer=auto`` picks a lossless tokenizer for such an env.
    """
    from llm_zoo.envs.core import TextEnv

    env = spec.env()
    try:
        raw = env.unwrapped
        return isinstance(raw, TextEnv) and type(raw).tools is not TextEnv.tools
    finally:
        env.close()


def model_dir(config: Any) -> Path | None:
    """Return what ``config.model`` loads (a directory: a catalogue name's converted on first use; or a hub name),
    or None for the tiny model; ``FileNotFoundError`` for anything else (:func:`llm_zoo.catalogue.model_source`)."""
    if str(config.model) == catalogue.TINY:  # built for the env; any other name (a tiny checkpoint too) is loaded
        return None
    return Path(catalogue.model_source(config.model, field="config.model"))


def model_config(config: Any, spec: EnvSpec | None = None) -> Any:
    """Return the transformers config of the model ``config`` builds (what the memory preflight reads).

    A local model directory's is read from disk without its weights; the tiny model is built (it
    takes well under a second beside the tokenizer).
    """
    path = model_dir(config)
    if path is not None:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(path)
    return build_tokenizer_and_model(config, seed=config.seed, spec=spec)[1].config
