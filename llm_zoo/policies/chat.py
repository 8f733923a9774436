"""The part of a model-backed policy before generation: chat template, prompt ids, legal paths.

:class:`ChatTemplatePolicy` is the base of :class:`~llm_zoo.policies.transformers.TransformersPolicy`
and :class:`~llm_zoo.policies.vllm.VLLMPolicy`, which differ only in what generates: both open
:meth:`~llm_zoo.policy.Policy.act` with :meth:`ChatTemplatePolicy.prompts_and_paths`, so the
two send a model the same token ids for an observation and constrain it to the same token paths.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2 import meta
from transformers import PreTrainedTokenizerBase

from llm_zoo.policies.constraints import legal_paths
from llm_zoo.policy import Observation, Policy, PromptTooLong

__all__ = ["ChatTemplatePolicy", "split_declared_tools", "template_takes_tools"]


class ChatTemplatePolicy(Policy):
    """A policy that prompts a chat model through its tokenizer's chat template.

    A subclass calls :meth:`_set_up_chat` in its constructor and sets ``name``, ``max_new_tokens``,
    ``max_prompt_tokens``, ``constrain`` and ``eos_token_ids``; its :meth:`act` starts with
    :meth:`prompts_and_paths` and generates from what that returns.

    Each observation's ``messages`` go through the chat template with the generation prompt;
    control tokens written inside a message (say a player typing ``<|im_end|>``) are encoded as
    plain text, so only the template opens and closes turns. Where the template takes a ``tools``
    argument (Qwen's, Llama 3.1's, Hermes'), an env's tools declared at the end of the system
    message in the env's standard form (:func:`llm_zoo.envs.core.tools_prompt`) are given to it as
    JSON schemas instead, so the model reads them in its own convention (:func:`split_declared_tools`);
    a template without one (SmolLM2's, the tiny models') keeps the env's text.
    """

    name: str
    tokenizer: PreTrainedTokenizerBase
    max_new_tokens: int
    max_prompt_tokens: int | None
    constrain: bool
    eos_token_ids: list[int]

    def _set_up_chat(self, tokenizer: PreTrainedTokenizerBase) -> None:
        """Take ``tokenizer`` (with a chat template, checked by the caller) and start the prompt memo."""
        self.tokenizer = tokenizer
        # Chat-template token ids by conversation. Rendering and tokenising cost more than a small
        # model's forward pass, and env prompts repeat (a game state recurs across episodes). A
        # template that reads the clock (strftime_now) renders differently over time: not memoised.
        self._prompt_memo: dict[Hashable, tuple[int, ...]] | None = (
            None if "strftime_now" in str(tokenizer.chat_template) else {}
        )
        self.template_takes_tools = template_takes_tools(tokenizer.chat_template)
        """Whether the chat template reads a ``tools`` argument: the env's declared tools then go there."""

    def prompts_and_paths(
        self, observations: Sequence[Observation]
    ) -> tuple[list[list[int]], list[tuple[tuple[int, ...], ...] | None]]:
        """Open :meth:`act`: check the batch, encode each prompt, refuse long ones, and build the legal paths.

        Returns each observation's prompt ids and, when ``constrain`` is set, its legal token paths
        (:meth:`legal_paths`; None for an observation that lists no legal replies, and for every
        observation when ``constrain`` is off).

        Raises:
            ValueError: an observation has no ``messages``, or they are not a non-empty sequence.
            PromptTooLong: a prompt is longer than ``max_prompt_tokens``.
        """
        self.check_batch(observations, key="messages")
        if not observations:
            return [], []
        prompts = self.encode_prompts(observations)
        PromptTooLong.check(self.name, prompts, self.max_prompt_tokens)
        if not self.constrain:
            return prompts, [None] * len(prompts)
        paths_of: dict[int, tuple[tuple[tuple[int, ...], ...] | None]] = {}  # a batch shows a few states many times
        paths = []
        for obs in observations:  # (observations holds each one: an id is its own)
            found = paths_of.get(id(obs))
            if found is None:
                found = paths_of[id(obs)] = (self.legal_paths(obs),)
            paths.append(found[0])
        return prompts, paths

    def encode_prompts(self, observations: Sequence[Observation]) -> list[list[int]]:
        """Return the chat-template token ids of each observation's messages, with the generation prompt.

        Results are memoised by conversation (up to ``_PROMPT_MEMO_SIZE`` of them), which assumes
        the tokenizer and its chat template are not changed after the policy is built.
        """
        memo = self._prompt_memo
        conversations: list[Sequence[Mapping[str, Any]]] = []
        keys: list[Hashable | None] = []
        ids: list[Sequence[int] | None] = []
        frozen = self.__dict__.setdefault("_frozen_memo", {})
        remember = []
        for i, obs in enumerate(observations):
            messages = _messages(obs, i)
            key = row = None
            # read-only views (what the trainer's rollout memo shows): the same tuple always holds the same
            # conversation, so it is found by identity, without hashing its text (the entry keeps it alive, and
            # holds only tuples of views: the same tuple holds the same views)
            seen = frozen.get(id(messages))
            if seen is not None and seen[0] is messages:
                conversations.append(messages)
                keys.append(None)
                ids.append(seen[1])
                continue
            if memo is not None and type(messages) is tuple and all(type(m) is MappingProxyType for m in messages):
                remember.append(i)
            if memo is not None:
                try:  # the key is the conversation's (role, content, ...) items; the memo hashes it
                    key = tuple([tuple(m.items()) for m in messages])
                    row = memo.get(key)
                except (AttributeError, TypeError):  # not mappings, or unhashable content
                    key = None
            if key is None:
                # other mappings are read as dicts (and a non-mapping fails here, as dict() says)
                messages = [dict(m) for m in messages]
            conversations.append(messages)
            keys.append(key)
            ids.append(row)
        missing = [i for i, row in enumerate(ids) if row is None]
        if missing:
            # the template gets copies: a memoised prompt never copies its messages at all
            encoded = self._apply_template([[dict(m) for m in conversations[i]] for i in missing])
            if memo is not None and len(memo) + len(missing) > _PROMPT_MEMO_SIZE:
                memo.clear()
            for i, row in zip(missing, encoded, strict=True):
                row_ids = ids[i] = tuple(map(int, row))  # plain ints, as act's replies take them unchecked
                if memo is not None and keys[i] is not None:
                    memo[keys[i]] = row_ids
        if remember and len(frozen) + len(remember) > _PROMPT_MEMO_SIZE:
            frozen.clear()
        for i in remember:
            frozen[id(conversations[i])] = (conversations[i], ids[i])
        return [list(row) for row in ids]

    def _apply_template(self, conversations: list[list[dict[str, Any]]]) -> list[list[int]]:
        """Return the chat template's token ids of each conversation (copies the caller gave), with tools moved
        from the system message to the template's ``tools`` argument where it takes one."""
        rows: list[list[int] | None] = [None] * len(conversations)
        plain = list(range(len(conversations)))
        if self.template_takes_tools:
            plain = []
            for i, messages in enumerate(conversations):
                split = split_declared_tools(messages[0]["content"]) if messages[0].get("role") == "system" else None
                if split is None:
                    plain.append(i)
                    continue
                messages[0]["content"], tools = split
                rows[i] = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                                             tokenize=True, return_dict=False,
                                                             sanitize_control_tokens=True)
        if plain:
            # sanitize_control_tokens (transformers >= 5) encodes control tokens typed inside messages
            # as text; older versions hand the flag to the template, which ignores it
            encoded = self.tokenizer.apply_chat_template([conversations[i] for i in plain], add_generation_prompt=True,
                                                         tokenize=True, return_dict=False, sanitize_control_tokens=True)
            for i, row in zip(plain, encoded, strict=True):
                rows[i] = row
        return rows  # type: ignore[return-value]

    def legal_paths(self, observation: Observation) -> tuple[tuple[int, ...], ...] | None:
        """Return the token paths of the observation's legal replies, or None when it lists none.

        Memoised: observations with the same legal replies get the same tuple.
        """
        replies = observation.get("legal_actions")
        if not replies:
            return None
        key = (tuple(replies), self.max_new_tokens)
        cache = self.__dict__.setdefault("_paths_memo", {})  # a batch repeats a few legal-reply sets
        if key not in cache:
            if len(cache) > 4096:
                cache.clear()
            cache[key] = tuple(legal_paths(self.tokenizer, replies, self.eos_token_ids[0], self.max_new_tokens))
        return cache[key]


def template_takes_tools(template: str | None) -> bool:
    """Return whether a Jinja chat template reads a ``tools`` variable (found by jinja2's own parse of it)."""
    if not template:
        return False
    environment = jinja2.Environment(extensions=["jinja2.ext.loopcontrols", _GenerationBlocks])
    return "tools" in meta.find_undeclared_variables(environment.parse(template))


class _GenerationBlocks(jinja2.ext.Extension):
    """Parse transformers' ``{% generation %}`` blocks (the assistant-token marks), so any template parses."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def split_declared_tools(system: str) -> tuple[str, list[dict[str, Any]]] | None:
    """Return (the system message without its tools, the tools' JSON schemas), or None when it declares none.

    Only the env's standard declaration counts, as :func:`llm_zoo.envs.core.tools_prompt` writes it at the end of
    the system message: the schemas are read from its ``<tools>`` block and the block is accepted only if
    ``tools_prompt`` of those schemas is, byte for byte, how the message ends. Anything else (a compact listing
    of an env's own, a clipped or sanitised message, text that merely looks like a declaration) stays text.
    """
    from llm_zoo.envs.core import Tool, tools_prompt

    start = system.rfind("\n<tools>\n")
    end = system.rfind("\n</tools>\n")
    if start < 0 or end < start:
        return None
    tools = []
    for line in system[start + len("\n<tools>\n"):end].split("\n"):
        try:
            schema = json.loads(line)
            function = schema["function"]
            tools.append(Tool(function["name"], function["description"], function["parameters"], fn=_never_called))
        except (json.JSONDecodeError, KeyError, TypeError):
            return None
    block = tools_prompt(tools)
    if not system.endswith(block):
        return None
    return system[: len(system) - len(block)], [t.schema() for t in tools]


def _never_called(**_: Any) -> None:
    raise AssertionError("a tool read back from a system prompt only declares it")


def _messages(obs: Observation, index: int) -> Sequence[Mapping[str, Any]]:
    messages = obs["messages"]
    if type(messages) is tuple and messages:  # what TextEnv.observe gives: skip the ABC checks
        return messages
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError(
            f"observation {index}: 'messages' should be a non-empty sequence of {{'role', 'content'}} "
            f"dicts, got {type(messages).__name__}: {repr(messages)[:200]}."
        )
    return messages


_PROMPT_MEMO_SIZE = 4096
"""Most conversations whose token ids a policy remembers; the memo starts over when full."""
