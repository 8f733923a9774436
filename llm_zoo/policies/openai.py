"""A policy that asks any OpenAI-compatible ``/v1/chat/completions`` endpoint for its replies.

Use it for frozen roles played by a served model: vLLM's or SGLang's server, a hosted API, or
``llm-zoo serve`` (:mod:`llm_zoo.serve`). From the command line or a config it is named by a spec::

    http://127.0.0.1:8000/v1                      # the server's only (or first) model
    http://127.0.0.1:8000/v1?model=NAME           # a named model
    https://api.example.com/v1?model=NAME&temperature=0.7&max_tokens=64

The part before ``?`` is the base URL (a bare ``http://host:port`` means ``http://host:port/v1``);
the query sets constructor arguments by name (see :meth:`OpenAIPolicy.from_spec`).

Messages
--------
An env's transcript uses the roles system, user, assistant and tool, but its tool messages carry
no ``tool_call_id``, which strict servers require. So each observation's ``messages`` are sent as:

- ``system``: kept when it opens the transcript; a later system message becomes a user message
  starting ``"System: "`` (many chat templates allow the system role only first);
- ``user`` and ``assistant``: kept;
- ``assistant``: a reply with tool calls (read by :mod:`llm_zoo.toolcalls`) becomes an assistant
  message with structured ``tool_calls`` (ids ``call_<message>_<k>``) and the reply's other text
  as its content; calls that no tool message answers (past the env's budget) are left out;
- ``tool``: a tool message answering the next unanswered call (``tool_call_id``), never user text,
  so nothing another agent writes can pass for a tool's result;
- then consecutive user (or plain assistant) messages are merged into one, joined by a blank
  line, so user and assistant turns alternate as strict templates demand.

Replies
-------
A reply is the message's ``content``; each structured tool call the server returns
(``message.tool_calls[i].function``) is appended as a line
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (:func:`llm_zoo.toolcalls.format_call`),
the form llm_zoo envs parse. A
:class:`~llm_zoo.policy.Reply` here has no token ids and so no log-probs (the API returns
neither in a form the trainer can use); HTTP policies play frozen roles. Token counts the server
reports add up in :attr:`OpenAIPolicy.usage`.

Transport
---------
Requests go through the official ``openai`` client (``openai.OpenAI``): its connection pool,
timeouts, and retries with exponential backoff and jitter that honour ``Retry-After``. The policy
reads each raw response itself (``with_raw_response``), so a server that answers something other
than a chat completion gets an :class:`EndpointError` that names the URL, the status and the body
rather than a half-filled object.
"""

from __future__ import annotations

import email.utils
import os
import random
import sys
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

try:
    import openai
except ImportError as err:  # pragma: no cover - openai comes with the `llm` extra
    raise ImportError(
        f"llm_zoo.policies.openai needs the openai client ({err}); install it with `pip install 'llm_zoo[llm]'`."
    ) from err
try:
    from openai._constants import INITIAL_RETRY_DELAY  # the client's first backoff delay
except ImportError:  # pragma: no cover - moved in some release: its long-standing value
    INITIAL_RETRY_DELAY = 0.5

from llm_zoo import toolcalls
from llm_zoo.policy import Observation, Policy, Reply

if sys.version_info >= (3, 12):
    from typing import override
else:
    from typing_extensions import override

RETRY_STATUSES = frozenset({408, 409, 429})
"""4xx statuses worth retrying (timeout, conflict, rate limit); every 5xx is retried too (the client's rule)."""
MAX_WAIT_S = 60.0
"""Longest single wait between attempts, whatever ``Retry-After`` or the backoff asks for."""
_BODY_CHARS = 500
_SPEC_FIELDS: dict[str, type] = {
    "model": str,
    "name": str,
    "api_key_env": str,
    "temperature": float,
    "top_p": float,
    "max_tokens": int,
    "max_concurrency": int,
    "timeout_s": float,
    "max_retries": int,
    "backoff_s": float,
    "seed": int,
}
_NO_KEY = "unused"
"""The key given to the client when none is set; its Authorization header is then left out."""


class EndpointError(RuntimeError):
    """An OpenAI-compatible endpoint failed: an error status, no response, or a malformed body.

    Attributes:
        url: The URL that was requested.
        status: The HTTP status, or ``None`` when no response came.
        body: The response body, truncated, or ``None`` when no response came.
    """

    def __init__(self, message: str, *, url: str, status: int | None = None, body: str | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status
        self.body = body


class _Client(openai.OpenAI):
    """The official client, with its first backoff delay set by the policy's ``backoff_s``.

    ``openai`` starts its backoff at a fixed 0.5 s (doubling, at most 8 s, minus up to 25% jitter);
    this scales those delays by ``backoff_s / 0.5``. Waits that the server asked for with
    ``Retry-After`` are kept as they are; every wait is capped at :data:`MAX_WAIT_S`.
    """

    backoff_scale = 1.0

    def _calculate_retry_timeout(
        self, remaining_retries: int, options: Any, response_headers: Any = None
    ) -> float:
        delay = super()._calculate_retry_timeout(remaining_retries, options, response_headers)
        headers = response_headers if response_headers is not None else {}
        asked = _retry_after(headers.get("retry-after")) is not None or headers.get("retry-after-ms")
        return min(MAX_WAIT_S, delay if asked else delay * self.backoff_scale)


class OpenAIPolicy(Policy):
    """Replies through an OpenAI-compatible chat completions endpoint, one request per observation.

    :meth:`act` sends the requests of a batch at once, at most ``max_concurrency`` in flight (a
    limit shared by every thread using this policy). The official ``openai`` client sends them: a
    request that gets 408, 409, 429 or a 5xx, a connection error or a timeout is retried up to
    ``max_retries`` times; before each retry it waits ``Retry-After`` when the server sends it,
    else an exponential backoff from ``backoff_s`` with jitter (:class:`_Client`), never longer
    than :data:`MAX_WAIT_S`. Any other 4xx fails at once. Failures raise :class:`EndpointError`
    naming the URL, the status and the body.

    Args:
        base_url: The API root, e.g. ``"http://127.0.0.1:8000/v1"``; requests go to
            ``{base_url}/chat/completions``. A URL with no path gets ``/v1``.
        model: The ``model`` field of each request.
        api_key_env: Environment variable holding the API key, read once here; when it is unset or
            empty no ``Authorization`` header is sent (fine for local servers).
        name: Shown in ``Reply.policy``; defaults to ``model``.
        temperature: Sampling temperature sent with each request.
        top_p: Nucleus sampling mass sent with each request.
        max_tokens: Longest reply, in tokens.
        max_concurrency: Most requests in flight at once.
        timeout_s: Timeout of each attempt (connect, read, write), in seconds.
        max_retries: Retries after the first attempt of a request.
        backoff_s: First backoff delay, in seconds; it doubles with each retry.
        extra_body: More request fields (``{"top_k": 20}``, ``{"stop": [...]}``); they override
            the fields above.
        seed: When set, each request carries a ``seed`` drawn from a private RNG seeded with it, so
            a run is repeatable where the server honours seeds; ``None`` sends no seed.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        name: str | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_tokens: int = 256,
        max_concurrency: int = 8,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        extra_body: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"OpenAIPolicy needs a model name (the request's 'model' field), got {model!r}.")
        checks = [
            ("temperature", temperature, temperature >= 0, ">= 0"),
            ("top_p", top_p, 0 < top_p <= 1, "in (0, 1]"),
            ("max_tokens", max_tokens, max_tokens >= 1, ">= 1"),
            ("max_concurrency", max_concurrency, max_concurrency >= 1, ">= 1"),
            ("timeout_s", timeout_s, timeout_s > 0, "> 0"),
            ("max_retries", max_retries, max_retries >= 0, ">= 0"),
            ("backoff_s", backoff_s, backoff_s >= 0, ">= 0"),
        ]
        for field, value, ok, expected in checks:
            if not ok:
                raise ValueError(f"OpenAIPolicy: {field} must be {expected}, got {value!r}.")
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise TypeError(
                f"OpenAIPolicy: extra_body must be a dict of request fields, got {type(extra_body).__name__}."
            )
        self.base_url = normalize_base_url(base_url)
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.name = name if name is not None else model
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_tokens = int(max_tokens)
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.extra_body = dict(extra_body or {})
        self.api_key_env = api_key_env
        self.usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
        """Totals over every successful request: requests made and the token counts servers reported."""
        self._key = _api_key(api_key_env)
        self._client = _client(
            self.base_url, self._key, timeout_s=self.timeout_s, max_retries=self.max_retries
        )
        self._client.backoff_scale = self.backoff_s / INITIAL_RETRY_DELAY
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._lock = threading.Lock()
        self._seeds = random.Random(seed)
        self._send_seed = seed is not None

    @classmethod
    def from_spec(cls, spec: str, **kwargs: Any) -> OpenAIPolicy:
        """Build a policy from ``"http(s)://HOST[:PORT][/PATH][?KEY=VALUE&...]"``.

        The query sets constructor arguments by name: ``model``, ``name``, ``api_key_env``,
        ``temperature``, ``top_p``, ``max_tokens``, ``max_concurrency``, ``timeout_s``,
        ``max_retries``, ``backoff_s`` and ``seed``; ``kwargs`` override them. Without ``model``
        the server's ``/models`` list is asked and its only (or first) model is used.
        """
        if not isinstance(spec, str) or not spec.startswith(("http://", "https://")):
            raise ValueError(f"OpenAIPolicy.from_spec expects an http(s):// URL, got {spec!r}.")
        parts = urllib.parse.urlsplit(spec)
        options: dict[str, Any] = {}
        for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
            if key not in _SPEC_FIELDS:
                raise ValueError(
                    f"endpoint spec {spec!r}: unknown query key {key!r}; expected some of {sorted(_SPEC_FIELDS)}."
                )
            try:
                options[key] = _SPEC_FIELDS[key](value)
            except ValueError:
                raise ValueError(
                    f"endpoint spec {spec!r}: {key}={value!r} should be a {_SPEC_FIELDS[key].__name__}."
                ) from None
        options.update(kwargs)
        base_url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        if not options.get("model"):
            options["model"] = default_model(
                base_url,
                api_key_env=options.get("api_key_env", "OPENAI_API_KEY"),
                timeout_s=options.get("timeout_s", 60.0),
            )
        return cls(base_url, **options)

    # ---- the policy -------------------------------------------------------------------------

    @override
    def seed(self, seed: int | None) -> None:
        """Reseed the RNG that draws each request's ``seed``; ``None`` stops sending seeds."""
        self._seeds.seed(seed)
        self._send_seed = seed is not None

    @override
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations, key="messages")
        # Bodies (and their seeds) are built in observation order, so a seeded run is repeatable
        # however the requests interleave.
        bodies = [self.request_body(obs, i) for i, obs in enumerate(observations)]
        if not bodies:
            return []
        if len(bodies) == 1:
            return [self._complete(bodies[0])]
        with ThreadPoolExecutor(max_workers=min(len(bodies), self.max_concurrency)) as pool:
            futures = [pool.submit(self._complete, body) for body in bodies]
            try:
                return [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                raise

    def request_body(self, obs: Observation, index: int = 0) -> dict[str, Any]:
        """Return the JSON body of the chat completions request for one observation."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_chat_messages(obs["messages"], index),
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        if self._send_seed:
            body["seed"] = self._seeds.randrange(2**31)
        body.update(self.extra_body)
        return body

    def close(self) -> None:
        """Close the HTTP connections; the policy cannot be used after."""
        self._client.close()

    def __enter__(self) -> OpenAIPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, url={self.url!r})"

    # ---- HTTP -----------------------------------------------------------------------------

    def _complete(self, body: dict[str, Any]) -> Reply:
        """POST one request (the client retries) and turn the completion into a reply."""
        with self._slots:
            response = self._post(body)
        data = _json_body(response, self.url)
        try:
            message = data["choices"][0]["message"]
            if not isinstance(message, Mapping):
                raise TypeError("message is not an object")
            text = reply_text(message)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise EndpointError(
                f"POST {self.url} returned HTTP {response.status_code} but no chat completion "
                f"(choices[0].message: {exc}); {_body(response)}. Is this an "
                "OpenAI-compatible /v1 endpoint?",
                url=self.url,
                status=response.status_code,
                body=_clip(response.text),
            ) from None
        usage = data.get("usage") if isinstance(data.get("usage"), Mapping) else {}
        with self._lock:
            self.usage["requests"] += 1
            for key in ("prompt_tokens", "completion_tokens"):
                if isinstance(usage.get(key), int):
                    self.usage[key] += usage[key]
        return Reply(text, policy=self.name)

    def _post(self, body: dict[str, Any]) -> Any:
        """Send ``body`` through the client; return the raw 2xx response, or raise EndpointError."""
        fields = {k: v for k, v in body.items() if k not in ("model", "messages")}
        attempts = self.max_retries + 1
        try:
            raw = self._client.chat.completions.with_raw_response.create(
                model=body["model"],
                messages=body["messages"],
                extra_body=fields,
                extra_headers=_auth(self._key),
            )
        except openai.APIStatusError as exc:
            response, status = exc.response, exc.status_code
            if status in RETRY_STATUSES or status >= 500:
                raise EndpointError(
                    f"POST {self.url} failed with HTTP {status} after {attempts} attempt(s): "
                    f"{_body(response)}. The server is overloaded or failing; lower "
                    "max_concurrency, raise max_retries, or retry later.",
                    url=self.url,
                    status=status,
                    body=_clip(response.text),
                ) from None
            raise EndpointError(
                f"POST {self.url} failed with HTTP {status}: {_body(response)}. {_hint(status, self)}",
                url=self.url,
                status=status,
                body=_clip(response.text),
            ) from None
        except openai.APIConnectionError as exc:  # connection refused or reset, timeouts
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            raise EndpointError(
                f"POST {self.url} got no response after {attempts} attempt(s): {cause!r} "
                f"(timeout_s={self.timeout_s}); check that the server is up at {self.base_url}, "
                "or raise timeout_s / max_retries.",
                url=self.url,
            ) from exc
        return raw.http_response


# ---- helpers --------------------------------------------------------------------------------


def to_chat_messages(messages: Sequence[Mapping[str, Any]], index: int = 0) -> list[dict[str, Any]]:
    """Map an env transcript to messages a strict chat completions server accepts (module docstring).

    Args:
        messages: ``{"role", "content"}`` dicts with roles system, user, assistant or tool.
        index: Position of the observation in its batch, named in errors.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError(
            f"observation {index}: 'messages' should be a non-empty sequence of {{'role', 'content'}} dicts, "
            f"got {type(messages).__name__}: {_clip(repr(messages), 200)}."
        )
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # ids of the last assistant message's calls that no tool message answered yet
    texts: dict[int, str] = {}  # id() of an assistant message with calls -> the reply as written
    for j, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, str):
            raise ValueError(
                f"observation {index}, message {j}: expected a dict with a str 'content', "
                f"got {_clip(repr(message), 200)}."
            )
        if role not in ("system", "user", "assistant", "tool"):
            raise ValueError(
                f"observation {index}, message {j}: role must be system, user, assistant or tool, got {role!r}."
            )
        if role == "tool":
            if not pending:
                raise ValueError(
                    f"observation {index}, message {j}: a tool message must answer a tool call of the assistant "
                    "message before it; this one answers none."
                )
            out.append({"role": "tool", "tool_call_id": pending.pop(0), "content": content})
            continue
        _drop_unanswered(out, pending, texts)
        pending = []
        if role == "system" and not all(m["role"] == "system" for m in out):
            role, content = "user", "System: " + content
        if role == "assistant":
            parsed = toolcalls.parse(content)
            if parsed.calls:
                calls = [_api_call(f"call_{j}_{k}", call) for k, call in enumerate(parsed.calls)]
                out.append({"role": "assistant", "content": parsed.content or None, "tool_calls": calls})
                texts[id(out[-1])] = content
                pending = [c["id"] for c in calls]
                continue
        if out and out[-1]["role"] == role and "tool_calls" not in out[-1]:
            out[-1]["content"] += "\n\n" + content
        else:
            out.append({"role": role, "content": content})
    _drop_unanswered(out, pending, texts)
    return out


def _api_call(call_id: str, call: toolcalls.ToolCall) -> dict[str, Any]:
    """One parsed call as an API ``tool_calls`` entry; a malformed one keeps its text (``toolcalls.api_arguments``)."""
    function = {"name": call.name, "arguments": toolcalls.api_arguments(call)}
    return {"id": call_id, "type": "function", "function": function}


def _drop_unanswered(out: list[dict[str, Any]], pending: list[str], texts: dict[int, str]) -> None:
    """Drop the calls no tool message answered, which strict servers refuse: those past the env's budget,
    or all of a reply the env did not read for calls (an agent without tools), which stays the text written."""
    if not pending:
        return
    last = next(m for m in reversed(out) if m["role"] == "assistant")
    last["tool_calls"] = [c for c in last["tool_calls"] if c["id"] not in pending]
    if not last["tool_calls"]:
        del last["tool_calls"]
        last["content"] = texts[id(last)]


def reply_text(message: Mapping[str, Any]) -> str:
    """Return a completion message as reply text: its content, then one ``<tool_call>`` block per tool call."""
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    if content is not None and not isinstance(content, str):
        raise TypeError(f"content should be a string, got {type(content).__name__}")
    lines = [content] if content else []
    for call in message.get("tool_calls") or ():
        function = call["function"]
        # read by the one grammar; arguments it refuses stay as sent, for the env to report to the agent
        lines.append(toolcalls.format_api_call(function["name"], function.get("arguments")))
    return "\n".join(lines)


def normalize_base_url(base_url: str) -> str:
    """Return ``base_url`` without a trailing slash or ``/chat/completions``, with ``/v1`` if it had no path."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(
            f"OpenAIPolicy: base_url must be an http(s):// URL such as http://127.0.0.1:8000/v1, got {base_url!r}."
        )
    parts = urllib.parse.urlsplit(base_url)
    if not parts.netloc:
        raise ValueError(
            f"OpenAIPolicy: base_url {base_url!r} has no host; expected http(s)://HOST[:PORT]/v1."
        )
    path = parts.path.rstrip("/")
    path = path.removesuffix("/chat/completions") or "/v1"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def default_model(base_url: str, *, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 60.0) -> str:
    """Return the id of the only (or first) model that ``GET {base_url}/models`` lists."""
    base_url = normalize_base_url(base_url)
    url = base_url + "/models"
    key = _api_key(api_key_env)
    with _client(base_url, key, timeout_s=timeout_s, max_retries=2) as client:
        try:
            response = client.models.with_raw_response.list(extra_headers=_auth(key)).http_response
        except openai.APIStatusError as exc:
            response = exc.response
            raise EndpointError(
                f"GET {url} failed with HTTP {response.status_code}: {_body(response)}; "
                "name the model in the spec instead (?model=NAME).",
                url=url,
                status=response.status_code,
                body=_clip(response.text),
            ) from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            raise EndpointError(
                f"GET {url} got no response: {cause!r}; check that the server is up, or name the model in "
                "the spec (?model=NAME).",
                url=url,
            ) from exc
    data = _json_body(response, url)
    models = data.get("data") if isinstance(data, Mapping) else None
    ids = [m["id"] for m in models or () if isinstance(m, Mapping) and isinstance(m.get("id"), str)]
    if not ids:
        raise EndpointError(
            f"GET {url} listed no models: {_body(response)}; name one in the spec (?model=NAME).",
            url=url,
            status=response.status_code,
            body=_clip(response.text),
        )
    return ids[0]


def _api_key(api_key_env: str) -> str:
    """Return the key held in ``$api_key_env``, or ``""`` when it is unset or empty."""
    return os.environ.get(api_key_env, "") if api_key_env else ""


def _client(base_url: str, key: str, *, timeout_s: float, max_retries: int) -> _Client:
    """Return an ``openai`` client for ``base_url``; with no key it sends no Authorization header."""
    client = _Client(
        base_url=base_url,
        api_key=key or _NO_KEY,
        timeout=timeout_s,
        max_retries=max_retries,
    )
    return client


def _auth(key: str) -> dict[str, Any]:
    """Return the per-request headers: none with a key, else the Authorization header left out."""
    return {} if key else {"Authorization": openai.Omit()}


def _json_body(response: Any, url: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise EndpointError(
            f"{response.request.method} {url} returned HTTP {response.status_code} with a body that "
            f"is not JSON: {_body(response)}. Is this an OpenAI-compatible /v1 endpoint?",
            url=url,
            status=response.status_code,
            body=_clip(response.text),
        ) from None


def _retry_after(value: str | None) -> float | None:
    """Read a ``Retry-After`` header (seconds or an HTTP date) as seconds to wait, if it parses."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _hint(status: int, policy: OpenAIPolicy) -> str:
    if status in (401, 403):
        where = f"${policy.api_key_env} is {'set' if policy._key else 'unset'}"
        return (
            f"The server refused the credentials ({where}); set api_key_env to the variable holding the key."
        )
    if status == 404:
        return (
            f"Check the base URL (requests go to {policy.url}) and the model name {policy.model!r}; "
            f"GET {policy.base_url}/models lists the served models."
        )
    return "The server rejected the request; check the sampling fields and extra_body. It is not retried."


def _body(response: Any) -> str:
    """Quote a response body for an error message: one line, truncated.

    Not ``!r``: bodies are mostly JSON, whose quotes ``repr`` would escape into noise.
    """
    text = " ".join(response.text.split())
    return f"body: {_clip(text) or '(empty)'}"


def _clip(text: str, limit: int = _BODY_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
