"""Tests for llm_zoo.policies.openai: requests, retries, errors and concurrency against loopback servers.

A stdlib fake endpoint on 127.0.0.1 plays the scripted server; the last tests talk to llm_zoo's
own server (:mod:`llm_zoo.serve`), with a scripted policy and with a tiny transformers model
behind it. The policy sends through the official ``openai`` client, which the headers show.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from llm_zoo.envs.core import parse_tool_calls
from llm_zoo.policies import FunctionPolicy, Reply
from llm_zoo.policies.openai import EndpointError, OpenAIPolicy, _retry_after, reply_text, to_chat_messages
from llm_zoo.policies.registry import load_policy

OBS = {"messages": ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"})}


def completion(content: str | None = "ok", **message: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, **message},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


class FakeEndpoint:
    """A scripted OpenAI-compatible server on 127.0.0.1, run in a thread.

    Each POST takes the next ``(status, headers, payload)`` from ``script``; once it is used up
    the answer is 200 with the last message's content echoed back. It records every request body
    and header set, and the most requests ever in flight at once.
    """

    def __init__(
        self,
        script: list[tuple[int, dict[str, str], Any]] | None = None,
        *,
        delay_s: float = 0.0,
        models: list[str] | None = None,
    ) -> None:
        self.script = list(script or [])
        self.delay_s = delay_s
        self.models = models if models is not None else ["fake-model"]
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                fake._write(self, 200, {}, {"object": "list", "data": [{"id": m} for m in fake.models]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.bodies.append(body)
                    fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                    step = fake.script.pop(0) if fake.script else None
                try:
                    time.sleep(fake.delay_s)
                finally:
                    # counted out before the reply leaves: once the client has it, it may send its
                    # next request, which must not meet this one still counted
                    with fake.lock:
                        fake.in_flight -= 1
                try:
                    if step is None:
                        step = (200, {}, completion("echo: " + body["messages"][-1]["content"]))
                    fake._write(self, *step)
                except OSError:  # the client gave up (timeout tests)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @staticmethod
    def _write(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], payload: Any) -> None:
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        handler.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def __enter__(self) -> FakeEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def no_api_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield


def policy_for(fake: FakeEndpoint, **kwargs: Any) -> OpenAIPolicy:
    kwargs = {"backoff_s": 0.01, "timeout_s": 5.0, **kwargs}
    return OpenAIPolicy(fake.url, "fake-model", **kwargs)


# ---- requests and replies -------------------------------------------------------------------


def test_request_body_headers_and_reply(no_api_key: None) -> None:
    with (
        FakeEndpoint() as fake,
        policy_for(fake, temperature=0.5, max_tokens=7, extra_body={"top_k": 3}) as policy,
    ):
        reply = policy(OBS)
    assert isinstance(reply, Reply) and reply == "echo: Hi"
    assert reply.policy == "fake-model" and reply.completion_ids is None and reply.logprobs is None
    body = fake.bodies[0]
    assert body["model"] == "fake-model" and body["messages"] == list(OBS["messages"])
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["top_k"]) == (0.5, 1.0, 7, 3)
    assert "seed" not in body
    assert "authorization" not in fake.headers[0]  # no key: fine for local servers
    assert fake.headers[0]["x-stainless-lang"] == "python"  # sent by the official openai client
    assert policy.usage == {"requests": 1, "prompt_tokens": 5, "completion_tokens": 2}


def test_api_key_is_read_from_the_named_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-test")
    with FakeEndpoint() as fake, policy_for(fake, api_key_env="MY_KEY") as policy:
        policy(OBS)
    assert fake.headers[0]["authorization"] == "Bearer sk-test"


def test_seeded_requests_are_repeatable(no_api_key: None) -> None:
    with FakeEndpoint() as fake, policy_for(fake, seed=3) as policy:
        policy.act([OBS, OBS])
        policy.seed(3)
        policy.act([OBS, OBS])
    seeds = [b["seed"] for b in fake.bodies]
    assert len(set(seeds[:2])) == 2 and sorted(seeds[:2]) == sorted(seeds[2:])


def test_roles_are_mapped_for_strict_servers() -> None:
    messages = (
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": '<tool_call>{"name": "ls", "arguments": {}}</tool_call>'},
        {"role": "tool", "content": "a.txt"},
        {"role": "user", "content": "Your move."},
        {"role": "system", "content": "Hurry."},
    )
    assert to_chat_messages(messages) == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_2_0", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_2_0", "content": "a.txt"},  # a tool message, never user text
        {"role": "user", "content": "Your move.\n\nSystem: Hurry."},
    ]
    with pytest.raises(
        ValueError, match="observation 2, message 0: role must be system, user, assistant or tool"
    ):
        to_chat_messages([{"role": "narrator", "content": "x"}], 2)


def test_structured_tool_calls_become_tool_call_text(no_api_key: None) -> None:
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.txt"}'}},
        {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": ""}},
    ]
    script = [
        (200, {}, completion("Let me look.", tool_calls=calls)),
        (200, {}, completion(None, tool_calls=calls[:1])),
    ]
    with FakeEndpoint(script) as fake, policy_for(fake) as policy:
        with_content, without_content = policy(OBS), policy(OBS)
    assert with_content == (
        'Let me look.\n<tool_call>{"name": "read", "arguments": {"path": "a.txt"}}</tool_call>\n'
        '<tool_call>{"name": "ls", "arguments": {}}</tool_call>'
    )
    assert without_content == '<tool_call>{"name": "read", "arguments": {"path": "a.txt"}}</tool_call>'
    parsed = parse_tool_calls(with_content)  # the env reads them back
    assert [(c.name, c.arguments) for c in parsed] == [("read", {"path": "a.txt"}), ("ls", {})]
    # arguments that are not JSON stay a string, for the env to report to the agent
    bad = reply_text({"content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]})
    assert bad == '<tool_call>{"name": "f", "arguments": "{oops"}</tool_call>'


def test_from_spec_reads_the_query_and_asks_for_the_default_model(no_api_key: None) -> None:
    with FakeEndpoint(models=["first", "second"]) as fake:
        root = fake.url.removesuffix("/v1")
        policy = OpenAIPolicy.from_spec(root + "?temperature=0&max_tokens=9", max_concurrency=2)
        assert (policy.model, policy.name, policy.url) == ("first", "first", fake.url + "/chat/completions")
        assert (policy.temperature, policy.max_tokens, policy.max_concurrency) == (0.0, 9, 2)
        named = load_policy(fake.url + "?model=mine&name=bot", "kuhn_poker_v0")
        assert isinstance(named, OpenAIPolicy) and (named.model, named.name) == ("mine", "bot")
    with pytest.raises(ValueError, match="unknown query key 'temp'"):
        OpenAIPolicy.from_spec("http://127.0.0.1:1/v1?model=m&temp=0")
    with pytest.raises(ValueError, match="max_tokens='many' should be a int"):
        OpenAIPolicy.from_spec("http://127.0.0.1:1/v1?model=m&max_tokens=many")


def test_constructor_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="max_concurrency must be >= 1, got 0"):
        OpenAIPolicy("http://127.0.0.1:1/v1", "m", max_concurrency=0)
    with pytest.raises(ValueError, match="base_url must be an http"):
        OpenAIPolicy("127.0.0.1:8000/v1", "m")


# ---- retries and errors ---------------------------------------------------------------------


def test_retries_429_with_retry_after_and_503_then_succeeds(no_api_key: None) -> None:
    script = [(429, {"Retry-After": "1"}, {"error": {"message": "slow down"}}), (503, {}, "overloaded")]
    with FakeEndpoint(script) as fake, policy_for(fake) as policy:
        start = time.monotonic()
        reply = policy(OBS)
        elapsed = time.monotonic() - start
    assert reply == "echo: Hi" and len(fake.bodies) == 3
    assert elapsed >= 1.0  # Retry-After wins over the 0.01 s backoff


def test_backoff_s_sets_the_wait_between_retries(no_api_key: None) -> None:
    script = [(503, {}, "overloaded"), (503, {}, "overloaded")]
    with FakeEndpoint(script) as fake, policy_for(fake, backoff_s=0.4, max_retries=2) as policy:
        start = time.monotonic()
        assert policy(OBS) == "echo: Hi"
        elapsed = time.monotonic() - start
    # waits of 0.4 s and 0.8 s, each less at most 25% jitter: at least 0.9 s in all
    assert len(fake.bodies) == 3 and elapsed >= 0.9
    with FakeEndpoint(list(script)) as fake, policy_for(fake, backoff_s=0.0, max_retries=2) as policy:
        assert policy(OBS) == "echo: Hi" and len(fake.bodies) == 3


def test_no_retry_on_400_and_the_error_names_url_status_body(no_api_key: None) -> None:
    script = [(400, {}, {"error": {"message": "unknown field 'top_q'"}})]
    with FakeEndpoint(script) as fake, policy_for(fake) as policy:
        with pytest.raises(EndpointError) as info:
            policy(OBS)
    assert len(fake.bodies) == 1
    message = str(info.value)
    assert (
        fake.url + "/chat/completions" in message
        and "HTTP 400" in message
        and "unknown field" in message
        and "top_q" in message
    )
    assert (info.value.status, info.value.url) == (400, fake.url + "/chat/completions")


def test_5xx_exhausts_the_retries(no_api_key: None) -> None:
    script = [(500, {}, "boom")] * 3
    with FakeEndpoint(script) as fake, policy_for(fake, max_retries=2) as policy:
        with pytest.raises(
            EndpointError, match=r"HTTP 500 after 3 attempt\(s\): body: boom\. The server is overloaded"
        ):
            policy(OBS)
    assert len(fake.bodies) == 3


def test_a_timeout_becomes_an_endpoint_error_after_retries(no_api_key: None) -> None:
    with FakeEndpoint(delay_s=1.0) as fake, policy_for(fake, timeout_s=0.2, max_retries=1) as policy:
        with pytest.raises(
            EndpointError, match=r"got no response after 2 attempt\(s\).*timeout_s=0.2"
        ) as info:
            policy(OBS)
    assert len(fake.bodies) == 2 and info.value.status is None


def test_connection_refused_is_retried_then_named(no_api_key: None) -> None:
    with socket.socket() as sock:  # a port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    policy = OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "m", max_retries=2, backoff_s=0.0)
    with pytest.raises(
        EndpointError, match=rf"POST http://127.0.0.1:{port}/v1/chat/completions got no response"
    ):
        policy(OBS)


def test_a_malformed_completion_is_an_endpoint_error(no_api_key: None) -> None:
    with FakeEndpoint([(200, {}, {"choices": []}), (200, {}, "<html>")]) as fake, policy_for(fake) as policy:
        with pytest.raises(EndpointError, match="no chat completion"):
            policy(OBS)
        with pytest.raises(EndpointError, match="not JSON: body: <html>"):
            policy(OBS)


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert _retry_after("2") == 2.0 and _retry_after(None) is None and _retry_after("soon") is None
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: no wait


# ---- concurrency ----------------------------------------------------------------------------


def test_concurrency_never_exceeds_max_concurrency(no_api_key: None) -> None:
    observations = [{"messages": ({"role": "user", "content": f"obs {i}"},)} for i in range(12)]
    with FakeEndpoint(delay_s=0.05) as fake, policy_for(fake, max_concurrency=3) as policy:
        replies = policy.act(observations)
        # two threads sharing one policy share its limit too
        threads = [threading.Thread(target=policy.act, args=(observations[:6],)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert replies == [f"echo: obs {i}" for i in range(12)]  # in observation order
    assert 2 <= fake.max_in_flight <= 3


# ---- against llm_zoo's own server -----------------------------------------------------------


def test_round_trip_through_llm_zoo_serve(no_api_key: None) -> None:
    from llm_zoo.serve import make_server

    def shout(obs: Any) -> str:
        return obs["messages"][-1]["content"].upper()

    server = make_server(FunctionPolicy(shout, name="shout"), name="shouter")
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        with OpenAIPolicy.from_spec(server.url, max_concurrency=4) as policy:
            assert policy.model == "shouter"
            replies = policy.act([{"messages": ({"role": "user", "content": w},)} for w in ("a", "b", "c")])
            assert replies == ["A", "B", "C"]
            bad = OpenAIPolicy(server.url, "other-model")
            with pytest.raises(EndpointError, match="HTTP 404.*'other-model' is not served here"):
                bad(OBS)
            rejected = OpenAIPolicy(server.url, "shouter", extra_body={"top_k": 3})
            with pytest.raises(EndpointError, match=r"HTTP 400: .*unknown field 'top_k'.*It is not retried"):
                rejected(OBS)
    finally:
        server.shutdown()
        server.server_close()


def test_served_tool_calls_come_back_as_tool_call_text(no_api_key: None) -> None:
    from llm_zoo.serve import make_server

    def caller(obs: Any) -> str:
        return 'Reading.\n<tool_call>{"name": "read", "arguments": {"path": "b.txt"}}</tool_call>'

    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    with make_server(FunctionPolicy(caller), name="caller").start() as server:
        with OpenAIPolicy(server.url, "caller", extra_body={"tools": tools}) as policy:
            reply = policy(OBS)
    # the server split the call out into message.tool_calls; the policy writes it back as text
    assert reply == 'Reading.\n<tool_call>{"name": "read", "arguments": {"path": "b.txt"}}</tool_call>'
    assert [(c.name, c.arguments) for c in parse_tool_calls(reply)] == [("read", {"path": "b.txt"})]


def test_against_a_served_tiny_model(no_api_key: None, tmp_path: Any, tiny_model_dir) -> None:
    pytest.importorskip("torch")
    import torch

    from llm_zoo.policies.transformers import TransformersPolicy
    from llm_zoo.serve import make_server

    model = TransformersPolicy.from_pretrained(tiny_model_dir("tiny", hidden_size=32))
    observations = [{"messages": ({"role": "user", "content": f"say {i}"},)} for i in range(5)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model's decode steps are slower, not faster, on two threads
    try:
        with make_server(model, name="tiny", max_new_tokens=6).start() as server:
            with OpenAIPolicy.from_spec(server.url + "?max_tokens=6&seed=3&max_concurrency=5") as policy:
                first = policy.act(observations)
                policy.seed(3)
                again = policy.act(observations)
    finally:
        torch.set_num_threads(threads)
    assert first == again and all(isinstance(r, Reply) and r.policy == "tiny" for r in first)
    assert policy.usage["requests"] == 10 and 10 <= policy.usage["completion_tokens"] <= 60
