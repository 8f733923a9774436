"""Serve a local transformers model as an OpenAI-compatible endpoint: ``llm-zoo serve``.

::

    llm-zoo serve --model PATH [--host 127.0.0.1] [--port 8000] [--name NAME] [--max-new-tokens N] [--threads N]

When ready it prints one line, ``serving NAME at http://HOST:PORT/v1``, which is the URL to give
:class:`~llm_zoo.policies.openai.OpenAIPolicy`, the official ``openai`` client
(``OpenAI(base_url=URL, api_key="none")``) or ``llm-zoo play --p0 URL``. ``--port 0`` picks a
free port. SIGINT or SIGTERM stops it cleanly.

It runs on Starlette under uvicorn: Starlette rather than FastAPI because the checks and error
objects must be OpenAI's, not FastAPI's 422 (:mod:`llm_zoo.serve.app` has the rest, and what is
added to uvicorn). One worker thread owns the model and batches continuously: requests that arrive
while others are decoding join the batch at the next decode step (:mod:`llm_zoo.serve.engine`).

Routes
------
- ``POST /v1/chat/completions``: ``messages`` (system, developer, user, assistant with
  ``tool_calls``, tool), ``temperature`` (below 1e-5 is greedy), ``top_p``, ``max_tokens`` or
  ``max_completion_tokens`` (capped at ``--max-new-tokens``; more than the context window leaves
  room for is a 400), ``min_tokens`` (vLLM's extension), ``seed`` (repeatable; each choice has its
  own stream; both draw by :mod:`llm_zoo.policies.sampling`, and on the CPU choice 0 of seed ``s``
  samples what ``TransformersPolicy(seed=s)`` samples for the prompt alone), ``n`` (up to 16), ``stream`` with ``stream_options.include_usage`` (server-sent
  events), ``logprobs`` with ``top_logprobs`` (up to 20; the tempered distribution before top-p,
  as :class:`~llm_zoo.policies.transformers.TransformersPolicy` reports), ``tools`` and
  ``tool_choice`` (``auto`` or ``none``). The tools go to the chat template (or, when the template
  takes none, into the system prompt as the envs show them), and the reply's tool calls, read by
  the envs' own grammar (:mod:`llm_zoo.toolcalls`: ``<tool_call>`` blocks, or a Llama 3 JSON
  reply), come back in ``message.tool_calls``, in the order written, with ``finish_reason``
  ``"tool_calls"``; a reply with a malformed call comes back whole as content, as written, so an
  env behind a client reads exactly what the model wrote. ``stop`` (up to 4
  strings; the reply ends before the first, which is not returned). Penalties, ``logit_bias`` and
  ``response_format`` are refused unless left at their no-op values, and a field OpenAI's API does
  not have is refused by name, as OpenAI does.
- ``GET /v1/models`` and ``GET /v1/models/{id}``: the one served model, ``NAME``.
- ``GET /health``: 200 ``{"status": "ok", ...}`` while the worker is alive and stepping; 503
  ``{"status": "unavailable", "reason": ...}`` when it stopped, or made no step for a minute with
  work waiting.

Every request gets a response. A client mistake gets a 4xx with an OpenAI-style error object
``{"error": {"message", "type", "param", "code"}}``: malformed JSON, nesting too deep to parse,
a lone surrogate in a string, a wrong type, a value out of range (``seed`` outside 64 bits,
``top_p`` not in (0, 1], ``n`` above 16), a prompt that does not fit the context window (400
naming the window), a body over 16 MiB (413), a head or body that does not arrive in time (408;
a client sending a partial request is cut off), HTTP that h11 cannot parse (400), a full queue
(429). A 5xx means the server failed.

Only the standard library is imported at the top, because ``llm_zoo.cli`` imports this module to
build its parser; torch, transformers, Starlette and uvicorn load when the server starts.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_zoo.serve.engine import RequestError
from llm_zoo.serve.protocol import parse_request

if TYPE_CHECKING:
    from llm_zoo.policy import Policy
    from llm_zoo.serve.app import ChatServer

__all__ = ["ChatServer", "RequestError", "add_parser", "make_server", "parse_request", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``serve`` subcommand on ``llm-zoo``'s subparsers; return its parser."""
    parser = subparsers.add_parser("serve", help="serve a local model as an OpenAI-compatible endpoint")
    parser.add_argument("--model", required=True, help="model directory (written by save_pretrained), a catalogue "
                        "name (llm-zoo models lists them: smollm2-135m) or a hub name (owner/name)")
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
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's own); 1 is fastest for tiny models on a busy machine",
    )
    parser.set_defaults(func=_serve_command)
    return parser


def _serve_command(args: argparse.Namespace) -> int:
    return run(
        args.model,
        host=args.host,
        port=args.port,
        name=args.name,
        max_new_tokens=args.max_new_tokens,
        threads=args.threads,
    )


def run(
    model: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str | None = None,
    max_new_tokens: int = 256,
    threads: int | None = None,
) -> int:
    """Load the model, serve it until SIGINT or SIGTERM, and return the exit code (0).

    Call it from the main thread: it installs the signal handlers (and restores them on return).

    Args:
        model: Folder written by ``save_pretrained`` (a tokenizer with a chat template included).
        host: Address to bind.
        port: Port to bind; 0 picks a free one.
        name: The model's name in requests and ``/v1/models``; defaults to the folder's name.
        max_new_tokens: Cap on a request's ``max_tokens``, and its default.
        threads: ``torch.set_num_threads`` for the process; ``None`` keeps torch's default.
    """
    _check(port, max_new_tokens)
    if threads is not None and threads < 1:
        raise ValueError(f"serve: --threads must be >= 1, got {threads!r}.")
    import torch

    from llm_zoo.policies.transformers import TransformersPolicy

    if threads is not None:
        torch.set_num_threads(threads)
    policy = TransformersPolicy.from_pretrained(model, max_new_tokens=max_new_tokens)
    name = name or Path(model).resolve().name
    server = make_server(policy, host=host, port=port, name=name, max_new_tokens=max_new_tokens)
    # uvicorn serves from a thread (so it installs no signal handlers, and re-raises none on exit);
    # this thread waits for the signal and stops it
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.start()
        print(f"serving {name} at {server.url}", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"stopped serving {name}", file=sys.stderr, flush=True)
    return 0


def make_server(
    policy: Policy,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    name: str = "model",
    max_new_tokens: int = 256,
    **options: Any,
) -> ChatServer:
    """Bind a :class:`~llm_zoo.serve.app.ChatServer` for ``policy`` (not yet serving: call
    ``serve_forever``, or use ``with make_server(...).start() as server:``).

    A :class:`~llm_zoo.policies.transformers.TransformersPolicy` is served token by token with
    continuous batching; any other policy through batched ``act`` calls (no log-probs).

    Args:
        policy: Writes the replies.
        host, port: Address to bind; port 0 picks a free one.
        name: The model's id in requests and ``/v1/models``.
        max_new_tokens: Cap on a request's ``max_tokens``, and its default.
        **options: ``context_window`` (default: the model config's), ``seed`` (draws of unseeded
            requests), ``stall_s`` (``/health``), ``max_queued``, ``max_batch``; ``head_timeout_s``
            and ``body_timeout_s`` go to the server.

    Raises:
        ValueError: The address cannot be bound (the port is taken, the host is not local).
    """
    _check(port, max_new_tokens)
    from llm_zoo.serve.app import ChatServer, bind, make_engine

    server_keys = ("head_timeout_s", "body_timeout_s")
    server_options = {k: options.pop(k) for k in server_keys if k in options}
    sock = bind(host, port)
    try:
        engine = make_engine(policy, max_new_tokens=max_new_tokens, **options)
    except BaseException:
        sock.close()
        raise
    return ChatServer(sock, engine, name=name, max_new_tokens=max_new_tokens, **server_options)


def _check(port: int, max_new_tokens: int) -> None:
    if max_new_tokens < 1:
        raise ValueError(f"serve: --max-new-tokens must be >= 1, got {max_new_tokens!r}.")
    if not 0 <= port <= 65535:
        raise ValueError(f"serve: --port must be in [0, 65535] (0 picks a free port), got {port!r}.")
