"""Tool calls in a model's reply: the one grammar that the envs and ``llm-zoo serve`` both read.

A reply is text with tool calls in it. :func:`parse` splits it into its ``content`` (the text
outside the calls) and its ``calls``, in the order written; :func:`render` writes a parsed reply
back as text that parses to the same calls and content; :func:`format_api_call` writes a call that
came in the OpenAI message format (a request's history, a completion) after reading its arguments
by this grammar. Every reader in the package (the envs' :class:`~llm_zoo.envs.core.TextEnv`, the
server's request and response, the OpenAI-compatible policy's history) goes through these
functions, so a reply means the same thing wherever it travels.

## The grammar

Two forms are read, the native formats of common chat models:

* **Hermes / Qwen blocks** (the envs' own form): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  any number of them, anywhere in the reply. A block runs from ``<tool_call>`` to the first
  ``</tool_call>``; where the closing tag is missing it ends at the next ``<tool_call>`` or at the
  end of the reply (a stop string may have eaten the tag), so a block never swallows the one after
  it. Its body, less surrounding whitespace, must be exactly one JSON object.
* **Llama 3 JSON**: the whole reply (less surrounding whitespace, optionally after
  ``<|python_tag|>``) is one JSON object ``{"name": ..., "parameters": {...}}``. It is read only when
  the reply holds no ``<tool_call>``; a reply that is a JSON object without both a ``"name"`` and a
  ``"parameters"`` (or ``"arguments"``) key is plain content, not a call, while after the tag
  anything but a call is a call with an error.

A call object has a non-empty string ``"name"`` and its arguments under ``"arguments"`` or
``"parameters"`` (exactly one of the two; ``{}`` for none), and no other key. The arguments
are a JSON object, or a string holding one (OpenAI's wire format encodes them so, and models
trained on it write them that way). The JSON is strict: no ``NaN`` or ``Infinity``, no number
that overflows to infinity, no duplicate key at any depth, no lone surrogate (a ``\\ud800``
escape), at most :data:`MAX_DEPTH` levels deep. A block that breaks a rule is still a call, with
``error`` saying what was wrong and how to write it, so an env can tell the agent; it is never
silently dropped nor read as content.

The text between calls is commentary: an env acts on the calls, in order, and the content's place
among them carries no meaning, which is why the OpenAI message format (content, then
``tool_calls``) can carry a reply without changing what it does. A reply with a malformed call
cannot be carried that way (the format has no place for a call without a name or JSON arguments),
so ``llm-zoo serve`` returns such a reply as plain content, as written, and the env on the other
side reads it exactly as it would have read the model's own text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CLOSE", "MAX_DEPTH", "OPEN", "PYTHON_TAG", "ParsedReply", "ToolCall", "api_arguments", "format_api_call",
           "format_call", "parse", "parse_tool_calls", "render"]

OPEN = "<tool_call>"
"""Opens a Hermes / Qwen tool-call block."""
CLOSE = "</tool_call>"
"""Closes a Hermes / Qwen tool-call block."""
PYTHON_TAG = "<|python_tag|>"
"""May open a Llama 3 reply that is one JSON tool call."""
MAX_DEPTH = 64
"""Deepest nesting of objects and arrays a call may hold."""
_SHOWN = 200  # characters of an offending body quoted back in an error


@dataclass(frozen=True)
class ToolCall:
    """One tool call read from a reply: a name and arguments, or the reason it could not be read.

    ``name`` is ``""`` when the call's name could not be read. ``source`` is the call as written
    (a block's body, or the whole Llama-form reply); it is not part of equality.
    """

    name: str
    arguments: dict[str, Any]
    error: str | None = None
    source: str = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class ParsedReply:
    """A reply split into its text and its tool calls."""

    content: str
    """The text outside the calls, in order; without trailing whitespace when the reply has calls."""
    calls: tuple[ToolCall, ...]
    """Every call, in the order written, malformed ones included (with ``error`` set)."""

    @property
    def ok(self) -> bool:
        """True when every call was read without error."""
        return all(c.error is None for c in self.calls)


def parse(reply: str) -> ParsedReply:
    """Split ``reply`` into its content and its tool calls by the grammar of the module docstring."""
    if OPEN not in reply:
        return _parse_llama(reply)
    texts: list[str] = []
    calls: list[ToolCall] = []
    at = 0
    while True:
        start = reply.find(OPEN, at)
        if start < 0:
            texts.append(reply[at:])
            break
        texts.append(reply[at:start])
        body_at = start + len(OPEN)
        close, after = reply.find(CLOSE, body_at), reply.find(OPEN, body_at)
        if close >= 0 and (after < 0 or close < after):
            body, at = reply[body_at:close], close + len(CLOSE)
        else:  # unterminated: it ends where the next block begins, or with the reply
            at = after if after >= 0 else len(reply)
            body = reply[body_at:at]
        calls.append(_read_call(body))
    return ParsedReply("".join(texts).rstrip(), tuple(calls))


def parse_tool_calls(reply: str) -> list[ToolCall]:
    """Return the tool calls of ``reply``, in order (:func:`parse`'s ``calls``)."""
    return list(parse(reply).calls)


def format_call(name: str, arguments: Mapping[str, Any] | str) -> str:
    """Write one call as a ``<tool_call>`` block that :func:`parse` reads back to the same call.

    The tags never appear inside the JSON (their ``<`` is escaped as ``\\u003c``), so arguments
    holding ``</tool_call>`` cannot end the block early.
    """
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    payload = payload.replace(OPEN, "\\u003c" + OPEN[1:]).replace(CLOSE, "\\u003c" + CLOSE[1:])
    return OPEN + payload + CLOSE


def format_api_call(name: str, arguments: str | Mapping[str, Any] | None) -> str:
    """Write a call given in the OpenAI message format (``function.name``, ``function.arguments``) as a block.

    The arguments are read by this grammar: a JSON string (or an object) it accepts is written as
    the object; blank or ``None`` is ``{}``; anything it refuses (not JSON, a duplicate key, ``NaN``)
    stays as sent, so the block reads back with the same error the model's own text would get.
    Both directions of the API use it: ``llm-zoo serve`` for a request's history, the
    OpenAI-compatible policy for a completion.
    """
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        arguments = {}
    read = parse(format_call(name, arguments)).calls[0]
    return format_call(name, read.arguments if read.error is None else arguments)


def api_arguments(call: ToolCall) -> str:
    """Return the OpenAI-format ``arguments`` string of a parsed call, which :func:`format_api_call` reads back
    to the same call: its arguments as JSON, or for a malformed call its text, as written where that text is
    no JSON object, else as a JSON string of it (never an object), so that it reads back malformed as well.

    The text of a malformed call is the whole call (``{"name": "f"}`` without arguments, a key twice inside an
    arguments string, an unknown key): sent as it is, it would read back as the arguments of a call that is
    not malformed, and a history would show a call the env never ran.
    """
    if call.error is None:
        return json.dumps(call.arguments, ensure_ascii=False)
    text = call.source.strip()
    try:
        read = _loads(text)
    except _Refused:
        return text
    return json.dumps(text, ensure_ascii=False) if isinstance(read, dict) else text


def render(content: str | None, calls: Iterable[ToolCall]) -> str:
    """Write a reply as text: the content, then each call as a block on its own line.

    ``parse(render(content, calls))`` gives back the calls and the content (less trailing
    whitespace where there are calls; without calls the content is the text). A call with an error is written as the model wrote it (its ``source``, with any
    ``</tool_call>`` in it escaped, which changes no JSON value), so it reads back with an error.
    """
    calls = tuple(calls)
    if not calls:
        return content or ""
    lines = [content.rstrip()] if content and content.strip() else []
    for call in calls:
        if call.error is None:
            lines.append(format_call(call.name, call.arguments))
        else:
            lines.append(OPEN + call.source.strip().replace(CLOSE, "\\u003c" + CLOSE[1:]) + CLOSE)
    return "\n".join(lines)


# ---- reading ----------------------------------------------------------------------------------


class _Refused(ValueError):
    """A JSON text this grammar refuses (a rule of the module docstring), with the reason."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"the key {key!r:.60} appears twice in one object; write each key once")
        out[key] = value
    return out


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:40]} is too large for a float; write a smaller one")
    return value


def _constant(text: str) -> Any:
    raise _Refused(f"{text} is not JSON; write a number or null")


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_float=_finite, parse_constant=_constant)


def _loads(text: str) -> Any:
    """Decode strict JSON, or raise :class:`_Refused` saying why not."""
    try:
        value = _DECODER.decode(text)
    except _Refused:
        raise
    except RecursionError:
        raise _Refused(f"it nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, or an integer past Python's digit limit
        raise _Refused(f"it is not valid JSON ({str(exc)[:120]})") from None
    problem = _check_value(value)
    if problem:
        raise _Refused(problem)
    return value


def _check_value(value: Any) -> str | None:
    """Return what breaks the depth or lone-surrogate rules in a decoded value, else None (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not _is_text(item):
                return "a string holds a lone surrogate (a \\ud800-style escape); write the character itself"
        elif isinstance(item, (dict, list)):
            if depth >= MAX_DEPTH:
                return f"it nests deeper than {MAX_DEPTH} levels"
            if isinstance(item, dict):
                for key, sub in item.items():
                    if not _is_text(key):
                        return "a key holds a lone surrogate (a \\ud800-style escape); write the character itself"
                    stack.append((sub, depth + 1))
            else:
                stack.extend((sub, depth + 1) for sub in item)
    return None


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_EXPECTED = 'expected {"name": <tool name>, "arguments": {...}}'


def _read_call(body: str) -> ToolCall:
    """Read one call object from ``body`` (a block's body, or a Llama-form reply)."""
    text = body.strip()
    shown = f"{text[:_SHOWN]!r}" + (" …" if len(text) > _SHOWN else "")
    try:
        data = _loads(text)
    except _Refused as exc:
        return ToolCall("", {}, f"the tool call cannot be read: {exc}; {_EXPECTED}; got {shown}", body)
    if not isinstance(data, dict):
        return ToolCall("", {}, f"the tool call must be a JSON object, {_EXPECTED}; got {shown}", body)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall("", {}, f'the tool call needs a non-empty string "name", {_EXPECTED}; got {shown}', body)
    extra = sorted(set(data) - {"name", "arguments", "parameters"})
    if extra:
        return ToolCall(name, {}, f"the tool call has an unknown key {extra[0]!r:.60}; {_EXPECTED} and nothing "
                                  "else", body)
    if "arguments" in data and "parameters" in data:
        return ToolCall(name, {}, 'the tool call has both "arguments" and "parameters"; write one of them', body)
    if "arguments" not in data and "parameters" not in data:
        return ToolCall(name, {}, 'the tool call has no "arguments"; write "arguments": {...} ({} for none)', body)
    arguments = data["arguments"] if "arguments" in data else data["parameters"]
    if isinstance(arguments, str):  # OpenAI's wire format: the object encoded as a JSON string
        try:
            arguments = _loads(arguments)
        except _Refused as exc:
            return ToolCall(name, {}, f'"arguments" is a string that is not a JSON object ({exc}); write the '
                                      "object itself", body)
    if not isinstance(arguments, dict):
        return ToolCall(name, {}, f'"arguments" must be a JSON object; got {json.dumps(arguments)[:_SHOWN]}', body)
    return ToolCall(name, arguments, None, body)


def _parse_llama(reply: str) -> ParsedReply:
    """Read a reply without ``<tool_call>``: one Llama 3 JSON call, or plain content."""
    text = reply.strip()
    tagged = text.startswith(PYTHON_TAG)
    if tagged:
        text = text[len(PYTHON_TAG):].strip()
    elif not (text.startswith("{") and text.endswith("}")):
        return ParsedReply(reply, ())
    if not tagged:  # a JSON object is a call only when it has the keys of one
        try:
            data = _loads(text)
        except _Refused:
            return ParsedReply(reply, ())
        if not (isinstance(data, dict) and "name" in data and ("parameters" in data or "arguments" in data)):
            return ParsedReply(reply, ())
    return ParsedReply("", (_read_call(text),))
