"""The chat completions wire format of ``llm-zoo serve``: request checks and the response objects.

Pure functions of plain data (no model, no HTTP), so each rule is tested on its own.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_zoo import toolcalls
from llm_zoo.serve.engine import RequestError

MAX_N = 16
"""Most choices one request may ask for."""
MAX_TOP_LOGPROBS = 20
"""Most alternatives per token, as in OpenAI's API."""
MAX_STOP = 4
"""Most stop strings, as in OpenAI's API."""
MAX_STOP_CHARS = 256
"""Longest stop string."""
SEED_RANGE = (-(2**63), 2**64 - 1)
"""Seeds a request may send (what ``torch.Generator.manual_seed`` takes)."""

IGNORED_FIELDS = frozenset(
    {
        "user",
        "metadata",
        "store",
        "service_tier",
        "parallel_tool_calls",
        "prompt_cache_key",
        "safety_identifier",
    }
)
"""Fields accepted and ignored: they change nothing in what the model writes."""
_DEFAULT_ONLY = {  # fields this server cannot honour: accepted only at their no-op value
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "response_format": (None, {"type": "text"}),
    "modalities": (None, ["text"]),
}
_FIELDS = frozenset(
    {
        "model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "min_tokens",
        "seed", "n", "stream", "stream_options", "logprobs", "top_logprobs", "tools", "tool_choice", "stop",
    }
) | IGNORED_FIELDS | frozenset(_DEFAULT_ONLY)  # fmt: skip

@dataclass
class ChatRequest:
    """A checked chat completions request: the engine's settings plus the response's shape."""

    messages: list[dict[str, str]]
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    min_tokens: int = 0
    seed: int | None = None
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False


def parse_request(body: Any, *, name: str, token_level: bool = True) -> ChatRequest:
    """Check a chat completions body; raise :class:`RequestError` naming the bad field.

    Args:
        body: The parsed JSON body.
        name: The served model's id; a request for another model gets 404.
        token_level: Whether the engine generates token by token (a model, not a scripted
            policy); when not, asking for log-probs or ``min_tokens`` is a 400.
    """
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(body).__name__}.")
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise RequestError(
            f"unknown field {unknown[0]!r:.80}; this server understands {sorted(_FIELDS)}.",
            param=unknown[0][:80],
        )
    for key, allowed in _DEFAULT_ONLY.items():
        if key in body and body[key] not in allowed:
            raise RequestError(
                f"{key!r} is not supported by this server; leave it out (got {_short(body[key])}).", param=key
            )
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError(f"'model' must be a string, got {_short(model)}.", param="model")
    if model is not None and model != name:
        raise RequestError(
            f"model {model!r:.100} is not served here; this server serves {name!r} (GET /v1/models).",
            param="model",
            status=404,
            code="model_not_found",
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(
            f"'messages' must be a non-empty list of {{role, content}} objects, got {_short(messages)}.",
            param="messages",
        )
    request = ChatRequest([_message(m, i) for i, m in enumerate(messages)])
    request.temperature = float(_number(body, "temperature", 1.0, lambda v: v >= 0, ">= 0"))
    request.top_p = float(_number(body, "top_p", 1.0, lambda v: 0 < v <= 1, "in (0, 1]"))
    key = "max_tokens" if body.get("max_tokens") is not None else "max_completion_tokens"
    request.max_tokens = _integer(body, key, None, lambda v: v >= 1, ">= 1")
    request.min_tokens = _integer(body, "min_tokens", 0, lambda v: v >= 0, ">= 0")
    if request.max_tokens is not None and request.min_tokens > request.max_tokens:
        raise RequestError(
            f"'min_tokens' ({request.min_tokens}) must not exceed {key!r} ({request.max_tokens}).",
            param="min_tokens",
        )
    if request.min_tokens and not token_level:
        raise RequestError(
            "this server's backend cannot hold off the end of a reply; leave out min_tokens.",
            param="min_tokens",
        )
    low, high = SEED_RANGE
    request.seed = _integer(body, "seed", None, lambda v: low <= v <= high, f"in [{low}, {high}]")
    request.n = _integer(body, "n", 1, lambda v: 1 <= v <= MAX_N, f"in [1, {MAX_N}]")
    request.stream = _boolean(body, "stream")
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise RequestError(
                f"'stream_options' must be {{'include_usage': bool}}, got {_short(options)}.",
                param="stream_options",
            )
        if not request.stream:
            raise RequestError("'stream_options' needs stream=true.", param="stream_options")
        request.include_usage = _boolean(options, "include_usage", "stream_options.include_usage")
    if _boolean(body, "logprobs"):
        if not token_level:
            raise RequestError(
                "this server's backend reports no log-probs; send logprobs=false.", param="logprobs"
            )
        request.top_logprobs = _integer(
            body, "top_logprobs", 0, lambda v: 0 <= v <= MAX_TOP_LOGPROBS, f"in [0, {MAX_TOP_LOGPROBS}]"
        )
    elif body.get("top_logprobs") is not None:
        raise RequestError("'top_logprobs' needs logprobs=true.", param="top_logprobs")
    request.tools = _tools(body.get("tools"), body.get("tool_choice"))
    request.stop = _stop(body.get("stop"))
    return request


def _stop(stop: Any) -> tuple[str, ...]:
    strings = [stop] if isinstance(stop, str) else stop
    if stop is None or strings == [""]:
        return ()
    if (
        not isinstance(strings, list)
        or len(strings) > MAX_STOP
        or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in strings)
    ):
        raise RequestError(
            f"'stop' must be a string or a list of at most {MAX_STOP} non-empty strings of at most "
            f"{MAX_STOP_CHARS} characters, got {_short(stop)}.",
            param="stop",
        )
    return tuple(strings)


def _message(message: Any, index: int) -> dict[str, str]:
    """Map an API message to the envs' ``{role, content}`` form (tool calls as ``<tool_call>`` text)."""
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise RequestError(
            f"{param} must be an object with 'role' and 'content', got {_short(message)}.", param=param
        )
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise RequestError(
            f"{param}.role must be a non-empty string, got {_short(role)}.", param=f"{param}.role"
        )
    if role == "developer":  # OpenAI's newer name for the system role
        role = "system"
    content = message.get("content")
    if isinstance(content, list):  # content parts: only text is understood
        texts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise RequestError(
                    f"{param}.content parts must be {{'type': 'text', 'text': str}}, got {_short(part)}.",
                    param=f"{param}.content",
                )
            texts.append(part["text"])
        content = "".join(texts)
    elif content is None:
        content = ""
    elif not isinstance(content, str):
        raise RequestError(
            f"{param}.content must be a string, got {_short(content)}.", param=f"{param}.content"
        )
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise RequestError(
                f"{param}.tool_calls must be a list, on an assistant message; got {_short(calls)} on role {role!r}.",
                param=f"{param}.tool_calls",
            )
        lines = [content] if content else []
        for j, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            arguments = function.get("arguments", "{}") if isinstance(function, dict) else None
            if not isinstance(name, str) or not isinstance(arguments, str):
                raise RequestError(
                    f"{param}.tool_calls[{j}] must be {{'function': {{'name': str, 'arguments': str}}}}, "
                    f"got {_short(call)}.",
                    param=f"{param}.tool_calls[{j}]",
                )
            # read by the envs' grammar, as OpenAIPolicy reads a completion: what it refuses stays as sent
            lines.append(toolcalls.format_api_call(name, arguments))
        content = "\n".join(lines)
    return {"role": role, "content": content}


def _tools(tools: Any, choice: Any) -> list[dict[str, Any]] | None:
    if choice not in (None, "auto", "none"):
        raise RequestError(
            f"'tool_choice' must be 'auto' or 'none' here (this server cannot force a call), got {_short(choice)}.",
            param="tool_choice",
        )
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise RequestError(f"'tools' must be a list of function tools, got {_short(tools)}.", param="tools")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type") != "function"
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("parameters", {}), dict)
        ):
            raise RequestError(
                f"tools[{i}] must be {{'type': 'function', 'function': {{'name': str, 'parameters': object}}}}, "
                f"got {_short(tool)}.",
                param=f"tools[{i}]",
            )
    return tools if tools and choice != "none" else None


def _number(body: Mapping[str, Any], key: str, default: Any, ok: Any, expected: str) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not ok(value)
    ):
        raise RequestError(f"{key!r} must be a number {expected}, got {_short(value)}.", param=key)
    return value


def _integer(body: Mapping[str, Any], key: str, default: Any, ok: Any, expected: str) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not ok(value):
        raise RequestError(f"{key!r} must be an integer {expected}, got {_short(value)}.", param=key)
    return value


def _boolean(body: Mapping[str, Any], key: str, param: str | None = None) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"{key!r} must be true or false, got {_short(value)}.", param=param or key)
    return value


def _short(value: Any) -> str:
    text = (
        repr(value)
        if not isinstance(value, int) or abs(value) < 10**30
        else f"an integer of {len(str(abs(value)))} digits"
    )
    return text if len(text) <= 120 else text[:117] + "..."


def find_lone_surrogate(value: Any) -> str | None:
    """Return the JSON path of the first string (key or value) holding a lone surrogate, else None.

    JSON's ``\\ud800`` escapes decode to such strings, which no tokenizer can encode. Iterative, so
    any depth the JSON parser accepted is walked without recursion.
    """
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return path or "(body)"
        elif isinstance(item, dict):
            for key, sub in item.items():
                if _has_surrogate(key):
                    return f"{path}.{key!a}".lstrip(".")
                stack.append((f"{path}.{key}".lstrip("."), sub))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", sub) for i, sub in enumerate(item))
    return None


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# ---- responses ------------------------------------------------------------------------------


def error_body(err: RequestError | Exception) -> dict[str, Any]:
    """Return the OpenAI-style error object for ``err``."""
    if isinstance(err, RequestError):
        kind = "invalid_request_error" if err.status < 500 else "server_error"
        return {"error": {"message": str(err), "type": kind, "param": err.param, "code": err.code}}
    message = f"generation failed: {type(err).__name__}: {err}"
    return {
        "error": {"message": message[:2000], "type": "server_error", "param": None, "code": "internal_error"}
    }


def split_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Split a reply into its content and its tool calls as API ``tool_calls``, by :mod:`llm_zoo.toolcalls`.

    The calls keep the order written; the content is the text outside them (``None`` when empty).
    A reply with a malformed call, which the API's format cannot carry in its place, comes back
    whole as content, as written, so that whoever reads it parses exactly what the model wrote.
    """
    parsed = toolcalls.parse(text)
    if not parsed.calls or not parsed.ok:
        return text, []
    calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c in parsed.calls
    ]
    return parsed.content or None, calls


def tool_call_start(text: str) -> int:
    """Return how much of ``text`` can be streamed as content before a tool call may begin.

    Trailing whitespace is held back too, since :func:`split_tool_calls` drops it before a call;
    a reply that may be a Llama 3 JSON call (it opens with ``{`` or ``<|python_tag|>``) is held
    back whole until it ends.
    """
    head = text.lstrip()
    if head.startswith(("{", toolcalls.PYTHON_TAG)) or (head and toolcalls.PYTHON_TAG.startswith(head)):
        return 0
    at = text.find(toolcalls.OPEN)
    if at < 0:
        at = len(text)
        for k in range(min(len(text), len(toolcalls.OPEN) - 1), 0, -1):
            if toolcalls.OPEN.startswith(text[-k:]):
                at = len(text) - k
                break
    return len(text[:at].rstrip())


def completion_id() -> str:
    """Return a fresh ``chatcmpl-`` id."""
    return f"chatcmpl-{uuid.uuid4().hex}"


def completion(
    *, cid: str, model: str, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """Return a ``chat.completion`` object."""
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage(prompt_tokens, completion_tokens),
        "system_fingerprint": None,
    }


def chunk(*, cid: str, model: str, created: int, choices: list[dict[str, Any]], **extra: Any) -> str:
    """Return one server-sent event holding a ``chat.completion.chunk``."""
    payload = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
        "system_fingerprint": None,
        **extra,
    }
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """Return a ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
