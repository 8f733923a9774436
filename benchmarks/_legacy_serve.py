# The baseline of benchmarks/serve_throughput.py, and nothing else: llm_zoo/serve.py as of commit a093de3
# (the stdlib server with its own batcher), copied verbatim below this comment. Not part of the package;
# `llm-zoo bench` skips files whose names start with an underscore.
"""Serve a local transformers model as an OpenAI-compatible endpoint: ``llm-zoo serve``.

::

    llm-zoo serve --model PATH [--host 127.0.0.1] [--port 8000] [--name NAME] [--max-new-tokens N]

When ready it prints one line, ``serving NAME at http://HOST:PORT/v1``, which is the URL to give
:class:`~llm_zoo.policies.openai.OpenAIPolicy` (or ``llm-zoo play --p0 URL``). ``--port 0``
picks a free port. SIGINT or SIGTERM stops it cleanly.

Routes:

- ``POST /v1/chat/completions``: ``messages`` (roles as the model's chat template allows),
  ``temperature`` (0 is greedy), ``top_p``, ``max_tokens`` (or ``max_completion_tokens``; capped
  at ``--max-new-tokens``), ``seed``, ``n`` (only 1). Other fields are ignored. The answer is the
  standard ``chat.completion`` object, with ``finish_reason`` ``"stop"`` or ``"length"`` and
  ``usage`` counting prompt and completion tokens.
- ``GET /v1/models``: the one served model, ``NAME``.
- ``GET /health``: ``{"status": "ok"}``.

A malformed request gets 400 and an OpenAI-style error object whose ``param`` names the field.

Requests arriving within a few milliseconds of each other are generated in one batch (one
:meth:`~llm_zoo.policies.base.Policy.act` call) when they share their sampling fields; a request
with a ``seed`` is generated alone with the generator reseeded, so it is repeatable.

Only the standard library is imported at the top, because ``llm_zoo.cli`` imports this module to
build its parser; torch and transformers load when the server starts.
"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from llm_zoo.policies.base import Policy, Reply

MAX_BODY_BYTES = 16 * 2**20
"""Largest request body accepted; a bigger one gets 413."""
BATCH_WAIT_S = 0.005
"""How long the batcher waits after a request for others to join its batch."""
MAX_BATCH = 32
"""Most requests generated in one batch."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``serve`` subcommand on ``llm-zoo``'s subparsers; return its parser."""
    parser = subparsers.add_parser("serve", help="serve a local model as an OpenAI-compatible endpoint")
    parser.add_argument("--model", required=True, help="model directory (written by save_pretrained)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8000, help="port to bind; 0 picks a free one (default: 8000)"
    )
    parser.add_argument(
        "--name",
        default=None,
        help="model name clients send and /v1/models lists (default: the directory's name)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=256,
        help="cap on max_tokens; also the default when a request omits it (default: 256)",
    )
    parser.set_defaults(func=_serve_command)
    return parser


def _serve_command(args: argparse.Namespace) -> int:
    return run(args.model, host=args.host, port=args.port, name=args.name, max_new_tokens=args.max_new_tokens)


def run(
    model: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str | None = None,
    max_new_tokens: int = 256,
) -> int:
    """Load the model, serve it until SIGINT or SIGTERM, and return the exit code (0).

    Call it from the main thread: it installs the signal handlers (and restores them on return).

    Args:
        model: Folder written by ``save_pretrained`` (a tokenizer with a chat template included).
        host: Address to bind.
        port: Port to bind; 0 picks a free one.
        name: The model's name in requests and ``/v1/models``; defaults to the folder's name.
        max_new_tokens: Cap on a request's ``max_tokens``, and its default.
    """
    if max_new_tokens < 1:
        raise ValueError(f"serve: --max-new-tokens must be >= 1, got {max_new_tokens!r}.")
    if not 0 <= port <= 65535:
        raise ValueError(f"serve: --port must be in [0, 65535] (0 picks a free port), got {port!r}.")
    from llm_zoo.policies.transformers import TransformersPolicy

    policy = TransformersPolicy.from_pretrained(model, max_new_tokens=max_new_tokens)
    name = name or Path(model).resolve().name
    server = make_server(policy, host=host, port=port, name=name, max_new_tokens=max_new_tokens)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=server.serve_forever, name="llm-zoo-serve", daemon=True)
    thread.start()
    print(f"serving {name} at {server.url}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"stopped serving {name}", file=sys.stderr, flush=True)
    return 0


def make_server(
    policy: Policy, *, host: str = "127.0.0.1", port: int = 0, name: str = "model", max_new_tokens: int = 256
) -> ChatServer:
    """Bind a :class:`ChatServer` for ``policy`` (not yet serving: call ``serve_forever``).

    Raises:
        ValueError: The address cannot be bound (the port is taken, the host is not local).
    """
    try:
        return ChatServer((host, port), policy, name=name, max_new_tokens=max_new_tokens)
    except OSError as exc:
        raise ValueError(
            f"serve: cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port "
            "(--port 0 picks a free one) or --host."
        ) from exc


class ChatServer(ThreadingHTTPServer):
    """An HTTP server answering chat completions with ``policy``, through a batching worker.

    ``policy`` reads each observation's ``messages``; when it has ``temperature``, ``top_p``,
    ``max_new_tokens`` attributes (as :class:`~llm_zoo.policies.transformers.TransformersPolicy`
    does) they are set per batch from the requests, and its ``encode_prompts`` (when present)
    checks each request's messages before it is queued.

    Args:
        address: ``(host, port)``; port 0 picks a free one.
        policy: Writes the replies. Only the batching worker calls it.
        name: The served model's name.
        max_new_tokens: Cap on a request's ``max_tokens``, and its default.
    """

    daemon_threads = True

    def __init__(self, address: tuple[str, int], policy: Policy, *, name: str, max_new_tokens: int) -> None:
        self.policy = policy
        self.name = name
        self.max_new_tokens = max_new_tokens
        self.created = int(time.time())
        self.batcher = _Batcher(policy)  # before binding: a failed bind calls server_close, which stops it
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        """The API root clients use: ``http://HOST:PORT/v1``."""
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def server_close(self) -> None:
        """Close the socket and stop the batching worker."""
        super().server_close()
        self.batcher.close()


# ---- requests -------------------------------------------------------------------------------


class RequestError(ValueError):
    """A client mistake, answered with an OpenAI-style error object."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.status = status
        self.code = code


@dataclass
class _Job:
    """One chat completion waiting for the batcher."""

    messages: list[dict[str, str]]
    temperature: float
    top_p: float
    max_new_tokens: int
    seed: int | None
    future: Future = field(default_factory=Future)

    @property
    def key(self) -> tuple[Any, ...]:
        """Jobs with equal keys can share a batch; a seeded job never shares."""
        return (
            self.temperature,
            self.top_p,
            self.max_new_tokens,
            id(self) if self.seed is not None else None,
        )


def parse_request(body: Any, *, name: str, max_new_tokens: int) -> _Job:
    """Validate a chat completions body into a job; raise :class:`RequestError` naming the bad field."""
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(body).__name__}.")
    model = body.get("model")
    if model is not None and model != name:
        raise RequestError(
            f"model {model!r} is not served here; this server serves {name!r} (GET /v1/models).",
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
    clean = [_parse_message(m, i) for i, m in enumerate(messages)]
    temperature = _number(body, "temperature", 1.0, lambda v: v >= 0, ">= 0")
    top_p = _number(body, "top_p", 1.0, lambda v: 0 < v <= 1, "in (0, 1]")
    key = "max_tokens" if body.get("max_tokens") is not None else "max_completion_tokens"
    max_tokens = _integer(body, key, max_new_tokens, lambda v: v >= 1, ">= 1")
    seed = _integer(body, "seed", None, lambda v: True, "an integer")
    _integer(body, "n", 1, lambda v: v == 1, "1 (this server writes one choice per request)")
    if body.get("stream"):
        raise RequestError("'stream' is not supported; send stream=false or leave it out.", param="stream")
    return _Job(clean, float(temperature), float(top_p), min(int(max_tokens), max_new_tokens), seed)


def _parse_message(message: Any, index: int) -> dict[str, str]:
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
    return {"role": role, "content": content}


def _number(body: Mapping[str, Any], key: str, default: Any, ok: Any, expected: str) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
        raise RequestError(f"'{key}' must be a number {expected}, got {_short(value)}.", param=key)
    return value


def _integer(body: Mapping[str, Any], key: str, default: Any, ok: Any, expected: str) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not ok(value):
        raise RequestError(f"'{key}' must be an integer {expected}, got {_short(value)}.", param=key)
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


# ---- batching -------------------------------------------------------------------------------


class _Batcher:
    """Gathers jobs that arrive within :data:`BATCH_WAIT_S` and answers them with batched ``act`` calls."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="llm-zoo-batcher", daemon=True)
        self._thread.start()

    def submit(self, job: _Job) -> Future:
        """Queue ``job``; its future resolves to the :class:`Reply`."""
        self._queue.put(job)
        return job.future

    def close(self) -> None:
        """Stop the worker after the queued jobs."""
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs, deadline, stopping = [job], time.monotonic() + BATCH_WAIT_S, False
            while len(jobs) < MAX_BATCH:
                try:
                    more = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                jobs.append(more)
            groups: dict[tuple[Any, ...], list[_Job]] = {}
            for j in jobs:
                groups.setdefault(j.key, []).append(j)
            for group in groups.values():
                self._generate(group)
            if stopping:
                return

    def _generate(self, jobs: Sequence[_Job]) -> None:
        first = jobs[0]
        policy = self.policy
        try:
            for attr, value in (
                ("temperature", first.temperature),
                ("top_p", first.top_p),
                ("max_new_tokens", first.max_new_tokens),
            ):
                if hasattr(policy, attr):
                    setattr(policy, attr, value)
            if first.seed is not None:
                policy.seed(first.seed)
            replies = policy.act([{"messages": j.messages} for j in jobs])
        except Exception as exc:  # the clients get a 500 naming it; the server keeps serving
            for j in jobs:
                j.future.set_exception(exc)
            return
        for j, reply in zip(jobs, replies, strict=True):
            j.future.set_result(reply)


# ---- HTTP -----------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            self._send(200, {"status": "ok"})
        elif path == "/v1/models":
            model = {
                "id": self.server.name,
                "object": "model",
                "created": self.server.created,
                "owned_by": "llm_zoo",
            }
            self._send(200, {"object": "list", "data": [model]})
        elif path == "/v1/chat/completions":
            self._error(RequestError("use POST for /v1/chat/completions.", status=405))
        else:
            self._not_found(path)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0].rstrip("/")
        if path != "/v1/chat/completions":
            self._drain()
            self._not_found(path)
            return
        try:
            job = parse_request(
                self._read_json(), name=self.server.name, max_new_tokens=self.server.max_new_tokens
            )
            self._check_prompt(job)
        except RequestError as err:
            self._error(err)
            return
        try:
            reply = self.server.batcher.submit(job).result()
        except Exception as exc:
            self._error(
                RequestError(
                    f"generation failed: {type(exc).__name__}: {exc}", status=500, code="internal_error"
                )
            )
            return
        self._send(200, self._completion(reply, job))

    def _read_json(self) -> Any:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            raise RequestError(
                "the request needs a Content-Length header with the body's size in bytes.", status=411
            )
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            raise RequestError(
                f"the request body is {length} bytes; the limit is {MAX_BODY_BYTES}.", status=413
            )
        raw = self.rfile.read(int(length))
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RequestError(
                f"the request body is not valid JSON ({exc}); got {_short(raw[:200])}."
            ) from None

    def _check_prompt(self, job: _Job) -> None:
        """Encode the messages now, so a chat-template error is this request's 400 and not its batch's 500."""
        encode = getattr(self.server.policy, "encode_prompts", None)
        if encode is None:
            return
        try:
            encode([{"messages": job.messages}])
        except Exception as exc:
            raise RequestError(
                f"the model's chat template rejected 'messages': {exc}", param="messages"
            ) from None

    def _completion(self, reply: Reply, job: _Job) -> dict[str, Any]:
        prompt_ids = getattr(reply, "prompt_ids", None) or []
        completion_ids = getattr(reply, "completion_ids", None) or []
        eos = set(getattr(self.server.policy, "eos_token_ids", ()))
        stopped = bool(completion_ids) and completion_ids[-1] in eos
        finish = "stop" if stopped or len(completion_ids) < job.max_new_tokens else "length"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.server.name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": str(reply)},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(completion_ids),
                "total_tokens": len(prompt_ids) + len(completion_ids),
            },
        }

    def _drain(self) -> None:
        length = self.headers.get("Content-Length", "")
        if length.isdigit() and int(length) <= MAX_BODY_BYTES:
            self.rfile.read(int(length))
        else:
            self.close_connection = True

    def _not_found(self, path: str) -> None:
        self._error(
            RequestError(
                f"no route {path!r}; this server has POST /v1/chat/completions, "
                "GET /v1/models and GET /health.",
                status=404,
            )
        )

    def _error(self, err: RequestError) -> None:
        kind = "invalid_request_error" if err.status < 500 else "server_error"
        self._send(
            err.status, {"error": {"message": str(err), "type": kind, "param": err.param, "code": err.code}}
        )

    def _send(self, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass  # quiet: the ready line is the server's only output on stdout
