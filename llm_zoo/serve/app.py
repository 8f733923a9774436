"""The HTTP side of ``llm-zoo serve``: a Starlette app under uvicorn, and the server object that runs it.

Starlette rather than FastAPI: the API is four routes whose checks and error objects must follow
OpenAI's shape (FastAPI's pydantic layer would answer 422 with its own error format, to be undone
by handlers); Starlette gives the routing and the streamed responses, and uvicorn the HTTP/1.1.

uvicorn runs with its pure-Python h11 protocol, subclassed in :class:`_Protocol` for two things
uvicorn does not do: a deadline on each request's head (a client that trickles a request line and
headers, or connects and sends nothing, is answered 408 and cut off), and a JSON error object with
a response for every request h11 cannot parse (uvicorn answers some with plain text and drops the
connection on others, such as a Content-Length of thousands of digits). The body is read with its
own deadline and size cap in the app.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import h11
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from llm_zoo.serve import protocol
from llm_zoo.serve.engine import Engine, Job, ModelEngine, PolicyEngine, RequestError

MAX_BODY_BYTES = 16 * 2**20
"""Largest request body accepted; a bigger one gets 413."""
HEAD_TIMEOUT_S = 10.0
"""Time a client has to send a request's line and headers, from its first byte (or from connecting)."""
BODY_TIMEOUT_S = 30.0
"""Time a client has to send a request's body, once its headers are in."""
KEEP_ALIVE_S = 5.0
"""How long an idle keep-alive connection is held open."""


class ChatServer:
    """``llm-zoo serve`` bound to a socket: an engine for the model and the app in front of it.

    Use :meth:`serve_forever` (blocks) with :meth:`shutdown` and :meth:`server_close`, or
    ``with server.start():`` to serve from a background thread for the block's duration.

    Args:
        sock: A bound socket (not yet listening).
        engine: Writes the replies.
        name: The served model's id.
        max_new_tokens: Cap on a choice's completion, and the default.
        head_timeout_s, body_timeout_s: Deadlines of a request's head and of its body.
    """

    def __init__(
        self,
        sock: socket.socket,
        engine: Engine,
        *,
        name: str,
        max_new_tokens: int,
        head_timeout_s: float = HEAD_TIMEOUT_S,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        self.socket = sock
        self.engine = engine
        self.name = name
        self.max_new_tokens = max_new_tokens
        self.body_timeout_s = body_timeout_s
        self.created = int(time.time())
        self.app = build_app(self)
        protocol_class = type("Protocol", (_Protocol,), {"head_timeout_s": head_timeout_s})
        config = uvicorn.Config(
            self.app,
            http=protocol_class,
            lifespan="off",
            log_level="error",
            access_log=False,
            timeout_keep_alive=int(max(1, KEEP_ALIVE_S)),
            timeout_graceful_shutdown=5,
            limit_concurrency=4096,
            backlog=2048,
        )
        self._server = uvicorn.Server(config)
        self._done = threading.Event()
        self._done.set()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The API root clients use: ``http://HOST:PORT/v1``."""
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}/v1"

    def serve_forever(self, poll_interval: float | None = None) -> None:
        """Serve until :meth:`shutdown` (or a signal, in the main thread)."""
        del poll_interval  # accepted for socketserver's signature
        self._done.clear()
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self._done.set()

    def shutdown(self) -> None:
        """Ask :meth:`serve_forever` to stop, and wait until it has."""
        self._server.should_exit = True
        self._done.wait(timeout=30)

    def server_close(self) -> None:
        """Close the socket and stop the engine."""
        self.socket.close()
        self.engine.close()

    def start(self) -> ChatServer:
        """Serve from a background thread; return self, a context manager that stops and closes it."""
        self._thread = threading.Thread(target=self.serve_forever, name="llm-zoo-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.01)
        if not self._server.started:
            raise RuntimeError(f"serve: the server at {self.url} did not start within 30 s.")
        return self

    def __enter__(self) -> ChatServer:
        return self if self._server.started else self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


def make_engine(policy: Any, *, max_new_tokens: int, **kwargs: Any) -> Engine:
    """Return a :class:`ModelEngine` for a transformers policy, else a :class:`PolicyEngine`."""
    if all(
        hasattr(policy, a) for a in ("model", "tokenizer", "encode_prompts", "eos_token_ids", "pad_token_id")
    ):
        return ModelEngine(policy, max_new_tokens=max_new_tokens, **kwargs)
    kwargs.pop("context_window", None)
    kwargs.pop("seed", None)
    return PolicyEngine(policy, max_new_tokens=max_new_tokens, **kwargs)


# ---- the app --------------------------------------------------------------------------------


def build_app(server: ChatServer) -> Starlette:
    """Return the Starlette app answering for ``server``."""

    async def chat(request: Request) -> Response:
        try:
            body = await _read_json(request, server.body_timeout_s)
            chat_request = protocol.parse_request(
                body, name=server.name, token_level=isinstance(server.engine, ModelEngine)
            )
        except RequestError as err:
            return _error(err)
        return await _answer(server, chat_request)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [_model(server)]})

    async def model(request: Request) -> Response:
        wanted = request.path_params["model"]
        if wanted != server.name:
            return _error(
                RequestError(
                    f"model {wanted!r:.100} is not served here; this server serves {server.name!r}.",
                    param="model",
                    status=404,
                    code="model_not_found",
                )
            )
        return JSONResponse(_model(server))

    async def health(request: Request) -> Response:
        ok, info = server.engine.health()
        return JSONResponse({"status": "ok" if ok else "unavailable", **info}, status_code=200 if ok else 503)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        if status == 404:
            message = (
                f"no route {request.url.path!r:.200}; this server has POST /v1/chat/completions, "
                "GET /v1/models, GET /v1/models/{id} and GET /health."
            )
        elif status == 405:
            message = f"{request.method} is not allowed on {request.url.path!r:.200}."
        else:
            message = str(getattr(exc, "detail", "")) or "the request failed."
        return _error(RequestError(message, status=status))

    async def server_error(request: Request, exc: Exception) -> Response:
        return JSONResponse(protocol.error_body(exc), status_code=500)

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: server_error})


def _model(server: ChatServer) -> dict[str, Any]:
    return {"id": server.name, "object": "model", "created": server.created, "owned_by": "llm_zoo"}


def _error(err: RequestError) -> JSONResponse:
    headers = {"Retry-After": "1"} if err.status == 429 else None
    return JSONResponse(protocol.error_body(err), status_code=err.status, headers=headers)


async def _read_json(request: Request, timeout_s: float) -> Any:
    """Read the body (with a deadline and a size cap) and parse it as JSON; raise RequestError."""
    length = request.headers.get("content-length")
    if length is not None and int(length) > MAX_BODY_BYTES:  # h11 let only ASCII digits through
        raise RequestError(
            f"the request body is {length:.30} bytes; the limit is {MAX_BODY_BYTES}.", status=413
        )

    async def read() -> bytes:
        parts, size = [], 0
        async for part in request.stream():
            size += len(part)
            if size > MAX_BODY_BYTES:
                raise RequestError(
                    f"the request body is over the limit of {MAX_BODY_BYTES} bytes.", status=413
                )
            parts.append(part)
        return b"".join(parts)

    try:
        raw = await asyncio.wait_for(read(), timeout_s)
    except ClientDisconnect:  # nobody will read the answer; it still is one
        raise RequestError("the client closed the connection before the body ended.") from None
    except asyncio.TimeoutError:
        raise RequestError(
            f"the request body did not arrive within {timeout_s:g} s.", status=408, code="timeout"
        ) from None
    if not raw:
        raise RequestError("the request has no body; send a JSON object with 'messages'.")
    try:
        body = json.loads(raw, parse_constant=_no_constants)
    except RecursionError:
        raise RequestError("the request body nests too deeply to parse.") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(
            f"the request body is not valid JSON ({str(exc)[:200]}); got {raw[:100]!r}."
        ) from None
    where = protocol.find_lone_surrogate(body)
    if where is not None:
        raise RequestError(
            f"the string at {where[:200]} holds a lone surrogate (an unpaired \\ud800-\\udfff escape), "
            "which is not text; send valid UTF-16 pairs.",
            param=where[:200],
        )
    return body


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


async def _answer(server: ChatServer, request: protocol.ChatRequest) -> Response:
    """Submit the request to the engine and answer it, streamed or whole."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()

    def sink(event: tuple[Any, ...]) -> None:
        loop.call_soon_threadsafe(events.put_nowait, event)

    # the engine's settings are the request's fields of the same names (the rest shape the response)
    shared = {f.name for f in dataclasses.fields(Job)} & {f.name for f in dataclasses.fields(request)}
    job = Job(sink=sink, **{name: getattr(request, name) for name in shared})
    try:
        server.engine.check_running()
        try:
            await loop.run_in_executor(server.engine.pool, server.engine.prepare, job)
        except RequestError:
            raise
        except RuntimeError:  # prepare raises only RequestError: the pool shut down since the check
            raise RequestError("the server is shutting down.", status=503, code="unavailable") from None
        server.engine.submit(job)
        first = await events.get()
    except RequestError as err:
        return _error(err)
    except asyncio.CancelledError:
        job.cancelled = True
        raise
    if first[0] == "error":
        err = first[1]
        return _error(err) if isinstance(err, RequestError) else JSONResponse(protocol.error_body(err), 500)
    prompt_tokens = first[1]
    cid = protocol.completion_id()
    if request.stream:
        return StreamingResponse(
            _stream(server, request, job, events, cid, prompt_tokens),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    try:
        return await _whole(server, request, events, cid, prompt_tokens)
    finally:
        job.cancelled = True  # done, or the client went away: nothing more to generate either way


async def _whole(
    server: ChatServer, request: protocol.ChatRequest, events: asyncio.Queue, cid: str, prompt_tokens: int
) -> Response:
    texts = [""] * request.n
    logprobs: list[list[dict[str, Any]]] = [[] for _ in range(request.n)]
    finish: list[str | None] = [None] * request.n
    completion_tokens = 0
    while any(f is None for f in finish):
        event = await events.get()
        if event[0] == "delta":
            texts[event[1]] += event[2]
            logprobs[event[1]].extend(event[3])
        elif event[0] == "done":
            finish[event[1]] = event[2]
            completion_tokens += event[3]
        elif event[0] == "error":
            err = event[1]
            return (
                _error(err) if isinstance(err, RequestError) else JSONResponse(protocol.error_body(err), 500)
            )
    choices = []
    for i in range(request.n):
        content, calls = protocol.split_tool_calls(texts[i]) if request.tools else (texts[i], [])
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if calls:
            message["tool_calls"] = calls
        choices.append(
            {
                "index": i,
                "message": message,
                "logprobs": {"content": logprobs[i], "refusal": None}
                if request.top_logprobs is not None
                else None,
                "finish_reason": "tool_calls" if calls else finish[i],
            }
        )
    return JSONResponse(
        protocol.completion(
            cid=cid,
            model=server.name,
            choices=choices,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )
    )


async def _stream(
    server: ChatServer,
    request: protocol.ChatRequest,
    job: Job,
    events: asyncio.Queue,
    cid: str,
    prompt_tokens: int,
) -> AsyncIterator[str]:
    """Yield the response as server-sent events; content that may begin a tool call is held back."""
    created = int(time.time())

    def event(choices: list[dict[str, Any]], **extra: Any) -> str:
        return protocol.chunk(cid=cid, model=server.name, created=created, choices=choices, **extra)

    texts = [""] * request.n
    sent = [0] * request.n  # characters of texts[i] already streamed as content
    open_choices = set(range(request.n))
    completion_tokens = 0
    try:
        for i in range(request.n):
            yield event(
                [
                    {
                        "index": i,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ]
            )
        while open_choices:
            item = await events.get()
            if item[0] == "delta":
                _, i, text, entries = item
                texts[i] += text
                upto = protocol.tool_call_start(texts[i]) if request.tools else len(texts[i])
                piece, sent[i] = texts[i][sent[i] : max(upto, sent[i])], max(upto, sent[i])
                if piece or entries:
                    logprobs = (
                        {"content": entries, "refusal": None} if request.top_logprobs is not None else None
                    )
                    yield event(
                        [
                            {
                                "index": i,
                                "delta": {"content": piece},
                                "logprobs": logprobs,
                                "finish_reason": None,
                            }
                        ]
                    )
            elif item[0] == "done":
                _, i, finish, count = item
                completion_tokens += count
                open_choices.discard(i)
                calls: list[dict[str, Any]] = []
                if request.tools:
                    content, calls = protocol.split_tool_calls(texts[i])
                    rest = (
                        (content or "")[sent[i] :] if (content or "").startswith(texts[i][: sent[i]]) else ""
                    )
                    if rest:
                        yield event(
                            [
                                {
                                    "index": i,
                                    "delta": {"content": rest},
                                    "logprobs": None,
                                    "finish_reason": None,
                                }
                            ]
                        )
                    if calls:
                        deltas = [{"index": k, **call} for k, call in enumerate(calls)]
                        yield event(
                            [
                                {
                                    "index": i,
                                    "delta": {"tool_calls": deltas},
                                    "logprobs": None,
                                    "finish_reason": None,
                                }
                            ]
                        )
                reason = "tool_calls" if calls else finish
                yield event([{"index": i, "delta": {}, "logprobs": None, "finish_reason": reason}])
            elif item[0] == "error":
                yield f"data: {json.dumps(protocol.error_body(item[1]), ensure_ascii=False)}\n\n"
                return
        if request.include_usage:
            yield event([], usage=protocol.usage(prompt_tokens, completion_tokens))
        yield "data: [DONE]\n\n"
    finally:
        job.cancelled = True


# ---- HTTP/1.1 with deadlines ----------------------------------------------------------------


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's head and JSON answers to bad HTTP."""

    head_timeout_s = HEAD_TIMEOUT_S
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._arm()
        try:
            super().data_received(data)
        except Exception as exc:  # noqa: BLE001 - h11 raised something other than a protocol error
            self._reject(
                400, f"the request could not be parsed as HTTP/1.1 ({type(exc).__name__}: {str(exc)[:200]})."
            )
            return
        if self.conn.their_state is not h11.IDLE:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._disarm()  # uvicorn's keep-alive timer takes over until the next byte

    def send_400_response(self, msg: str) -> None:
        self._reject(
            400, f"the request is not valid HTTP/1.1 ({msg.rstrip('.')}); check the request line and headers."
        )

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timeout)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._reject(
                408, f"the request line and headers did not arrive within {self.head_timeout_s:g} s."
            )

    def _reject(self, status: int, message: str) -> None:
        """Write an error response by hand (h11's state may be broken) and close the connection."""
        self._disarm()
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            if self.cycle.response_started:  # a response is on the wire: all we can do is close
                self.transport.close()
                return
        kind = "invalid_request_error"
        body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}}).encode()
        phrase = {400: "Bad Request", 408: "Request Timeout"}[status]
        head = (
            f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()


def bind(host: str, port: int) -> socket.socket:
    """Return a socket bound to ``(host, port)``; raise ValueError naming the flags when it cannot."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if sys.platform != "win32":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ValueError(
            f"serve: cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port "
            "(--port 0 picks a free one) or --host."
        ) from exc
    return sock
