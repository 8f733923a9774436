"""Tests for llm_zoo.serve: ``llm-zoo serve`` on loopback, driven by the official ``openai`` client.

Most tests talk to one in-process server (``make_server(...).start()``) on 127.0.0.1 and an
ephemeral port, serving a tiny byte-level model from :func:`llm_zoo.models.make_tiny_model`; the
CLI tests start the real command as a subprocess and read its ready line. An untrained model
writes noise, which is fine: the tests check the API's shapes, seeds, batching and errors, not
the text. Tool calls need a reply that holds one, so those tests serve a scripted policy.
Requests a client library would refuse to send go over raw sockets.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
openai = pytest.importorskip("openai")

import llm_zoo  # noqa: E402
from llm_zoo.cli import build_parser  # noqa: E402
from llm_zoo.policies import FunctionPolicy, Policy, Reply  # noqa: E402
from llm_zoo.policies.openai import OpenAIPolicy  # noqa: E402
from llm_zoo.policies.registry import load_policy  # noqa: E402
from llm_zoo.serve import RequestError, make_server, parse_request  # noqa: E402
from llm_zoo.serve.protocol import split_tool_calls, tool_call_start  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 120
CONTEXT = 384
"""The in-process server's context window (the tiny model's config says 2048)."""
USER = [{"role": "user", "content": "Hello"}]


# ---- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir) -> Path:
    return tiny_model_dir("tiny-bytes", tokenizer="bytes", hidden_size=32)


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[Any]:
    """An in-process server of the tiny model: context window CONTEXT, --max-new-tokens 320.

    On one torch thread for the module (restored after): on a loaded 2-core machine a second
    intra-op thread makes a tiny model's decode steps several times slower, not faster.
    """
    import torch

    from llm_zoo.policies.transformers import TransformersPolicy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    policy = TransformersPolicy.from_pretrained(model_dir)
    served = make_server(
        policy,
        name="tiny",
        max_new_tokens=320,
        context_window=CONTEXT,
        head_timeout_s=1.0,
        body_timeout_s=1.0,
    )
    try:
        with served.start():
            yield served
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def client(server: Any) -> Iterator[Any]:
    with openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=60) as c:
        yield c


def start_cli(model_dir: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``llm-zoo serve`` on a free loopback port; return the process and its ``/v1`` URL."""
    cmd = [sys.executable, "-m", "llm_zoo.cli", "serve", "--model", str(model_dir), "--port", "0", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=READY_TIMEOUT_S)
    except queue.Empty:
        line = ""
    if not line.startswith("serving "):
        proc.kill()
        raise AssertionError(
            f"no ready line from {cmd}; stdout {line!r}, stderr:\n{proc.stderr.read()[-2000:]}"
        )
    return proc, line.split(" at ", 1)[1].strip()


def stop_cli(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM the server; return its exit code and stderr."""
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


# ---- the chat completions API through the openai client ------------------------------------


def test_chat_completion(client: Any) -> None:
    out = client.chat.completions.create(model="tiny", messages=USER, max_tokens=3, temperature=0)
    assert out.object == "chat.completion" and out.model == "tiny" and len(out.choices) == 1
    choice = out.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length") and choice.logprobs is None
    usage = out.usage
    assert usage.prompt_tokens > 0 and 1 <= usage.completion_tokens <= 3
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_stream_is_the_same_completion_in_pieces(client: Any) -> None:
    body = {"model": "tiny", "messages": USER, "max_tokens": 12, "temperature": 0}
    whole = client.chat.completions.create(**body)
    chunks = list(client.chat.completions.create(**body, stream=True, stream_options={"include_usage": True}))
    assert {c.object for c in chunks} == {"chat.completion.chunk"} and len({c.id for c in chunks}) == 1
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_n_choices_and_seeds_are_repeatable(client: Any) -> None:
    body = {"model": "tiny", "messages": USER, "max_tokens": 16, "n": 3, "seed": 5}
    first = client.chat.completions.create(**body)
    second = client.chat.completions.create(**body)
    assert [c.index for c in first.choices] == [0, 1, 2]
    texts = [c.message.content for c in first.choices]
    assert texts == [c.message.content for c in second.choices]
    assert len(set(texts)) == 3  # each choice draws from its own stream
    assert 3 <= first.usage.completion_tokens <= 3 * 16  # summed over the choices
    other = client.chat.completions.create(**{**body, "seed": 6, "n": 1})
    assert other.choices[0].message.content != texts[0]


def test_a_seeded_request_samples_what_the_policy_samples(model_dir: Path) -> None:
    """Server and policy draw by one rule (llm_zoo.policies.sampling): on the CPU, seed s gives one reply, the policy's."""
    from llm_zoo.policies.transformers import TransformersPolicy

    settings = {"temperature": 0.8, "top_p": 0.9}
    policy = TransformersPolicy.from_pretrained(model_dir, device="cpu", max_new_tokens=24, **settings)
    served = make_server(TransformersPolicy.from_pretrained(model_dir, device="cpu"), name="tiny", max_new_tokens=24)
    with served.start(), openai.OpenAI(base_url=served.url, api_key="none", max_retries=0, timeout=60) as client:
        for seed in (7, 8):
            policy.seed(seed)
            reply = policy.act([{"messages": tuple(USER)}])[0]
            out = client.chat.completions.create(
                model="tiny", messages=USER, max_tokens=24, seed=seed, logprobs=True, **settings
            )
            assert out.choices[0].message.content == reply.text, seed
            served_logprobs = [entry.logprob for entry in out.choices[0].logprobs.content]
            assert served_logprobs and served_logprobs == pytest.approx(reply.logprobs[: len(served_logprobs)], abs=1e-4)


def test_logprobs_with_top_logprobs(client: Any) -> None:
    out = client.chat.completions.create(
        model="tiny", messages=USER, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3
    )
    entries = out.choices[0].logprobs.content
    assert 1 <= len(entries) <= 6
    for entry in entries:
        tops = [t.logprob for t in entry.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True) and all(t <= 0 for t in tops)
        assert entry.logprob == pytest.approx(tops[0])  # greedy: the sampled token is the most likely
        assert entry.token == entry.top_logprobs[0].token and isinstance(entry.bytes, list)
    # the bytes tokenizer: each token is one byte, which "bytes" holds even where the text is U+FFFD
    assert all(len(e.bytes) == 1 for e in entries)
    text = b"".join(bytes(e.bytes) for e in entries).decode("utf-8", "replace")
    assert text == out.choices[0].message.content
    sampled = client.chat.completions.create(model="tiny", messages=USER, max_tokens=4, logprobs=True, seed=1)
    assert all(e.top_logprobs == [] and e.logprob <= 0 for e in sampled.choices[0].logprobs.content)
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(model="tiny", messages=USER, top_logprobs=2)


def test_stop_strings_end_the_reply_whole_and_streamed(client: Any) -> None:
    body = {"model": "tiny", "messages": USER, "max_tokens": 40, "temperature": 0}
    text = client.chat.completions.create(**body).choices[0].message.content
    stop = next(c for c in text[3:] if ord(c) < 128)  # a byte token of the greedy reply, past its start
    expected = text[: text.index(stop)]
    whole = client.chat.completions.create(**body, stop=[stop, "\u2603never"])
    assert whole.choices[0].message.content == expected and whole.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(**body, stop=stop, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]


def test_models_list_and_retrieve(client: Any) -> None:
    assert [m.id for m in client.models.list()] == ["tiny"]
    model = client.models.retrieve("tiny")
    assert (model.id, model.object, model.owned_by) == ("tiny", "model", "llm_zoo")
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.models.retrieve("gpt-9")
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=USER)
    assert info.value.body["code"] == "model_not_found"


def test_prompts_are_checked_against_the_context_window(client: Any) -> None:
    long = [{"role": "user", "content": "x" * CONTEXT}]
    with pytest.raises(openai.BadRequestError, match=f"context window is {CONTEXT} tokens") as info:
        client.chat.completions.create(model="tiny", messages=long, max_tokens=1)
    assert info.value.body["code"] == "context_length_exceeded" and info.value.body["param"] == "messages"
    with pytest.raises(
        openai.BadRequestError, match=r"'max_tokens' is 1000.*at most \d+ completion tokens fit"
    ):
        client.chat.completions.create(model="tiny", messages=USER, max_tokens=1000)
    near = [{"role": "user", "content": "x" * (CONTEXT - 40)}]
    out = client.chat.completions.create(model="tiny", messages=near)  # no max_tokens: what fits
    assert out.usage.prompt_tokens + out.usage.completion_tokens <= CONTEXT


def test_tools_reach_the_prompt(client: Any) -> None:
    tool = {
        "type": "function",
        "function": {"name": "look", "parameters": {"type": "object", "properties": {}}},
    }
    plain = client.chat.completions.create(model="tiny", messages=USER, max_tokens=1)
    with_tools = client.chat.completions.create(model="tiny", messages=USER, max_tokens=1, tools=[tool])
    assert with_tools.usage.prompt_tokens > plain.usage.prompt_tokens + len('"name": "look"')


def test_forty_concurrent_requests_are_batched(server: Any) -> None:
    async def main() -> list[Any]:
        async with openai.AsyncOpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120) as c:
            return await asyncio.gather(
                *[
                    c.chat.completions.create(
                        model="tiny", messages=[{"role": "user", "content": f"n{i}"}], max_tokens=8, seed=i
                    )
                    for i in range(40)
                ]
            )

    before = server.engine.max_batch_seen
    server.engine.max_batch_seen = 0
    try:
        results = asyncio.run(main())
        assert len(results) == 40 and all(len(r.choices) == 1 for r in results)
        assert all(1 <= r.usage.completion_tokens <= 8 for r in results)
        assert len({r.id for r in results}) == 40
        assert server.engine.max_batch_seen > 1  # they shared decode steps
    finally:
        server.engine.max_batch_seen = max(before, server.engine.max_batch_seen)


def test_a_request_joins_a_batch_that_is_running(client: Any) -> None:
    """A short request sent while a long one streams is answered before the long one ends."""
    long_done = threading.Event()
    started = threading.Event()
    pieces: list[str] = []

    def long_request() -> None:
        stream = client.chat.completions.create(
            model="tiny", messages=USER, max_tokens=300, extra_body={"min_tokens": 300}, stream=True
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
                started.set()
        long_done.set()

    thread = threading.Thread(target=long_request)
    thread.start()
    try:
        assert started.wait(60)
        short = client.chat.completions.create(model="tiny", messages=USER, max_tokens=2)
        assert short.usage.completion_tokens <= 2
        assert not long_done.is_set(), "the short request waited for the long one to finish"
    finally:
        thread.join(120)
    assert long_done.is_set() and pieces


def test_a_joining_row_decodes_as_it_would_alone(server: Any, client: Any) -> None:
    """Greedy tokens and log-probs of a request do not depend on the rows it shares steps with.

    The reference is TransformersPolicy's own sampler on the same model. The request runs once
    alone and once in a changing batch: behind a longer prompt (its cache is left-padded to that
    width), while short requests join and leave (rows dropped, all-padding columns trimmed).
    """
    from llm_zoo.policies.transformers import TransformersPolicy

    messages = [{"role": "user", "content": "Tell me about cats."}]
    body = {"model": "tiny", "messages": messages, "max_tokens": 24, "temperature": 0, "logprobs": True}
    greedy = TransformersPolicy(
        server.engine.model, server.engine.tokenizer, temperature=0, max_new_tokens=24
    )
    reference = greedy({"messages": messages})

    def figures(out: Any) -> tuple[str, list[float]]:
        return out.choices[0].message.content, [e.logprob for e in out.choices[0].logprobs.content]

    alone = figures(client.chat.completions.create(**body))
    results: dict[str, Any] = {}
    long_prompt = [{"role": "user", "content": "A much longer prompt that starts first. " * 4}]

    def run(key: str, **fields: Any) -> None:
        results[key] = client.chat.completions.create(model="tiny", **fields)

    ahead = threading.Thread(target=run, args=("ahead",), kwargs={"messages": long_prompt, "max_tokens": 12})
    ahead.start()
    time.sleep(0.05)
    joined = threading.Thread(
        target=run, args=("joined",), kwargs={k: v for k, v in body.items() if k != "model"}
    )
    joined.start()
    shorts = [
        threading.Thread(target=run, args=(f"short{i}",), kwargs={"messages": USER, "max_tokens": 1 + i})
        for i in range(6)
    ]
    for t in shorts:
        t.start()
        time.sleep(0.01)
    for t in [ahead, joined, *shorts]:
        t.join(60)
    together = figures(results["joined"])
    assert alone[0] == together[0] == reference.text
    assert together[1] == pytest.approx(alone[1], abs=1e-4)
    assert alone[1] == pytest.approx(reference.logprobs[: len(alone[1])], abs=1e-4)


def test_a_client_that_leaves_a_stream_frees_its_rows(server: Any, client: Any) -> None:
    stream = client.chat.completions.create(
        model="tiny", messages=USER, max_tokens=300, extra_body={"min_tokens": 300}, stream=True
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    assert server.engine.active >= 1, "the stream's row is not in the batch"
    stream.close()
    deadline = time.monotonic() + 30
    while server.engine.active and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.engine.active == 0, (
        f"{server.engine.active} row(s) still decoding 30 s after the client left"
    )


def test_a_job_cancelled_just_after_a_step_stops_counting_as_active(model_dir: Path) -> None:
    """A client that leaves after a step's own check of its rows (the step goes on to sample them) and before the
    next step: the loop drops the rows at its top, and the engine must then count none, so that /health neither
    shows work nor reports the idle worker stalled. Cancelling from inside the step's end hits that window each time."""
    from llm_zoo.policies.transformers import TransformersPolicy

    served = make_server(TransformersPolicy.from_pretrained(model_dir), name="tiny", max_new_tokens=320,
                         context_window=CONTEXT, stall_s=0.5)
    engine = served.engine
    real_step, armed, fired = engine._step, threading.Event(), threading.Event()

    def step(new: Any) -> None:
        real_step(new)
        if armed.is_set() and engine.rows:
            armed.clear()
            for row in engine.rows:
                row.job.cancelled = True
            fired.set()

    engine._step = step
    with served.start(), openai.OpenAI(base_url=served.url, api_key="none", max_retries=0, timeout=60) as c:
        stream = c.chat.completions.create(
            model="tiny", messages=USER, max_tokens=300, extra_body={"min_tokens": 300}, stream=True
        )
        try:
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    break
            armed.set()
            assert fired.wait(30), "no step ran with the stream's row after it was armed"
            deadline = time.monotonic() + 10
            while engine.active and time.monotonic() < deadline:
                time.sleep(0.02)
            assert engine.active == 0, f"{engine.active} row(s) counted as active after their job was cancelled"
            time.sleep(1.0)  # past stall_s with the worker idle
            ok, info = engine.health()
            assert ok and info["active"] == 0, info
        finally:
            stream.close()


# ---- tool calls (a scripted policy writes them) ---------------------------------------------


TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]


def _tool_writer(obs: Any) -> str:
    return 'Let me look.\n<tool_call>{"name": "read", "arguments": {"path": "a.txt"}}</tool_call>'


def test_tool_calls_come_back_as_tool_calls_whole_and_streamed() -> None:
    with make_server(FunctionPolicy(_tool_writer), name="scripted").start() as served:
        with openai.OpenAI(base_url=served.url, api_key="none", max_retries=0) as c:
            out = c.chat.completions.create(model="scripted", messages=USER, tools=TOOLS)
            choice = out.choices[0]
            assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me look."
            (call,) = choice.message.tool_calls
            assert call.type == "function" and call.id.startswith("call_")
            assert call.function.name == "read" and json.loads(call.function.arguments) == {"path": "a.txt"}
            with c.chat.completions.stream(model="scripted", messages=USER, tools=TOOLS) as stream:
                final = stream.get_final_completion()
            streamed = final.choices[0]
            assert streamed.finish_reason == "tool_calls" and streamed.message.content == "Let me look."
            assert [
                (t.function.name, json.loads(t.function.arguments)) for t in streamed.message.tool_calls
            ] == [("read", {"path": "a.txt"})]
            # without tools in the request the text is returned as written
            plain = c.chat.completions.create(model="scripted", messages=USER)
            assert (
                plain.choices[0].message.content == _tool_writer(None)
                and plain.choices[0].finish_reason == "stop"
            )
            # an assistant turn with tool_calls and the tool's answer go back to the policy as text
            history = [
                *USER,
                {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": "hello"},
            ]
            assert (
                c.chat.completions.create(model="scripted", messages=history, tools=TOOLS)
                .choices[0]
                .message.tool_calls
            )


def test_messages_a_scripted_policy_rejects_are_the_client_s_400_and_only_theirs() -> None:
    """A batch holding a job the policy rejects (400) and one that breaks it (500) still answers the rest."""
    gate = threading.Event()

    def picky(obs: Any) -> str:
        content = obs["messages"][-1]["content"]
        if content == "wait":
            gate.wait(30)
        if content == "bad":
            raise ValueError("expected a move, got 'bad'")
        if content == "boom":
            raise RuntimeError("the policy broke")
        return content

    with make_server(FunctionPolicy(picky), name="picky").start() as served:
        url, engine = served.url + "/chat/completions", served.engine

        def ask(text: str) -> httpx.Response:
            return httpx.post(url, json={"messages": [{"role": "user", "content": text}]}, timeout=60)

        def until(condition: Any) -> None:
            deadline = time.monotonic() + 30
            while not condition() and time.monotonic() < deadline:
                time.sleep(0.02)

        with ThreadPoolExecutor(5) as pool:
            first = pool.submit(ask, "wait")
            until(lambda: engine.active == 1)  # the worker is held in act
            later = [pool.submit(ask, t) for t in ("boom", "fine", "bad", "also fine")]
            until(lambda: engine.queued == 4)  # all four wait for the next act call: one batch
            gate.set()
            boom, good, bad, good2 = (f.result() for f in later)
            assert first.result().status_code == 200
    assert engine.max_batch_seen >= 4
    assert (
        good.status_code == good2.status_code == 200
        and good.json()["choices"][0]["message"]["content"] == "fine"
    )
    assert bad.status_code == 400 and "expected a move" in bad.json()["error"]["message"]
    assert bad.json()["error"]["param"] == "messages"
    assert boom.status_code == 500 and boom.json()["error"]["type"] == "server_error"


def test_stop_strings_with_a_scripted_policy_and_the_hold_back() -> None:
    from llm_zoo.serve.engine import cut_at_stop, stop_prefix_length

    with make_server(FunctionPolicy(lambda obs: "hello STOP world"), name="s").start() as served:
        with openai.OpenAI(base_url=served.url, api_key="none", max_retries=0) as c:
            out = c.chat.completions.create(model="s", messages=USER, stop=["STOP", "world"])
    assert out.choices[0].message.content == "hello " and out.choices[0].finish_reason == "stop"
    assert cut_at_stop("a-b-c", ["-c", "b"]) == ("a-", True) and cut_at_stop("abc", ["x"]) == ("abc", False)
    assert stop_prefix_length("say ST", ["STOP"]) == 2 and stop_prefix_length("say", ["STOP"]) == 0


def test_split_tool_calls_and_the_streaming_hold_back() -> None:
    content, calls = split_tool_calls('a<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>b')
    assert content == "ab" and [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("f", '{"x": 1}')
    ]
    bad = "<tool_call>{not json}</tool_call>"
    assert split_tool_calls(bad) == (bad, [])  # not a call: kept as content
    assert split_tool_calls('<tool_call>{"name": "f", "arguments": {}}</tool_call>')[0] is None
    assert tool_call_start("hello <tool") == len("hello") and tool_call_start("x <tool_call>{") == 1
    assert tool_call_start("a < b") == len("a < b") and tool_call_start("a \n") == 1
    # the Llama 3 form: the whole reply is one JSON call, held back while it may be one
    llama = '{"name": "f", "parameters": {"x": 1}}'
    assert split_tool_calls(llama)[0] is None and len(split_tool_calls(llama)[1]) == 1
    assert tool_call_start('  {"name"') == 0 and tool_call_start("<|python") == 0 and tool_call_start("hi {") == 4
    # a malformed call anywhere keeps the whole reply as written: the API cannot carry it in its place
    mixed = '<tool_call>{"name": "f", "arguments": {}}</tool_call> <tool_call>{oops'
    assert split_tool_calls(mixed) == (mixed, [])


# every reply that once read differently through serve and in the env, and more of their kind
AGREEMENT_REPLIES = [
    'Let me see <tool_call>{"name": "read", "arguments": {"path": "a"}}\n'
    '<tool_call>{"name": "read", "arguments": {"path": "b"}}</tool_call>',
    '<tool_call>{"name": "read", "arguments": {}}</tool_call> and then <tool_call>{oops</tool_call>',
    '<tool_call>{oops}<tool_call>{"name": "read", "arguments": {}}</tool_call>',
    'Text <tool_call>{"name": "read", "arguments": {"path": "a"}}</tool_call> more <tool_call>'
    '{"name": "read", "arguments": {"path": "b"}}</tool_call>',
    '<tool_call>{"name": "read", "arguments": "{\\"path\\": \\"c\\"}"}</tool_call> trailing',
    '<|python_tag|>{"name": "read", "parameters": {"path": "d"}}',
    '<tool_call>{"name": "read", "arguments": {"s": "<\\/tool_call><tool_call>"}}</tool_call>',
]


def test_serve_and_the_env_read_every_reply_alike() -> None:
    """A reply through serve (whole and streamed) and OpenAIPolicy reaches the env with the same calls, in order."""
    from llm_zoo import toolcalls
    from llm_zoo.policies.openai import OpenAIPolicy, reply_text

    replies = iter(AGREEMENT_REPLIES * 2)
    with make_server(FunctionPolicy(lambda obs: next(replies)), name="scripted").start() as served:
        with OpenAIPolicy(served.url, "scripted", extra_body={"tools": TOOLS}, max_retries=0) as policy:
            for reply in AGREEMENT_REPLIES:
                relayed = policy.act([{"messages": USER}])[0]
                assert toolcalls.parse(relayed).calls == toolcalls.parse(reply).calls, reply
        with openai.OpenAI(base_url=served.url, api_key="none", max_retries=0) as c:
            for reply in AGREEMENT_REPLIES:
                with c.chat.completions.stream(model="scripted", messages=USER, tools=TOOLS) as stream:
                    message = stream.get_final_completion().choices[0].message.model_dump()
                assert toolcalls.parse(reply_text(message)).calls == toolcalls.parse(reply).calls, reply


# ---- every request gets an answer -----------------------------------------------------------


def _raw(port: int, data: bytes, *, wait_s: float = 10.0) -> tuple[int | None, dict[str, Any] | None, bool]:
    """Send raw bytes; return (status, JSON body, whether the server closed the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        if data:
            sock.sendall(data)
        out = b""
        closed = False
        try:
            while True:
                part = sock.recv(65536)
                if not part:
                    closed = True
                    break
                out += part
                head, sep, body = out.partition(b"\r\n\r\n")
                lengths = [
                    line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
                ]
                if sep and lengths and len(body) >= int(lengths[0].split(b":")[1]):
                    break
        except TimeoutError:
            pass
    head, _, body = out.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else None
    return status, json.loads(body) if body else None, closed


def _post(body: bytes, extra_headers: bytes = b"") -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + extra_headers
        + b"Content-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def _with(**fields: Any) -> bytes:
    return json.dumps({"model": "tiny", "messages": USER, **fields}).encode()


BAD_REQUESTS: list[tuple[str, bytes, int, str | None, str]] = [
    # (class, raw request, status, param, words of the message)
    ("deep nesting", _post(b"[" * 200_000 + b"]" * 200_000), 400, None, "nests too deeply"),
    (
        "non-ASCII digits in Content-Length",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + "Content-Length: ١٢\r\n\r\n".encode() + b"{}",
        400,
        None,
        "not valid HTTP/1.1",
    ),
    (
        "a Content-Length of 5000 digits",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n{}",
        400,
        None,
        "HTTP/1.1",
    ),
    (
        "a Content-Length of 40 digits",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"9" * 40 + b"\r\n\r\n{}",
        400,
        None,
        "HTTP/1.1",
    ),
    (
        "a signed Content-Length",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}",
        400,
        None,
        "HTTP/1.1",
    ),
    (
        "a lone surrogate",
        _post(b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}'),
        400,
        "messages[0].content",
        "lone surrogate",
    ),
    (
        "bytes that are not UTF-8",
        _post(b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}'),
        400,
        None,
        "not valid JSON",
    ),
    ("not JSON", _post(b"{not json"), 400, None, "not valid JSON"),
    ("NaN", _post(b'{"messages": [{"role": "user", "content": "a"}], "temperature": NaN}'), 400, None, "NaN"),
    ("no body", _post(b""), 400, None, "no body"),
    ("a body that is a list", _post(b"[1, 2]"), 400, None, "must be a JSON object"),
    ("a wrong type", _post(_with(temperature="hot")), 400, "temperature", "must be a number >= 0"),
    (
        "a wrong type in a message",
        _post(_with(messages=[{"role": "user", "content": 3}])),
        400,
        "messages[0].content",
        "must be a string",
    ),
    ("an unknown field", _post(_with(frobnicate=1)), 400, "frobnicate", "unknown field 'frobnicate'"),
    ("an unsupported field", _post(_with(frequency_penalty=0.5)), 400, "frequency_penalty", "not supported"),
    ("five stop strings", _post(_with(stop=list("abcde"))), 400, "stop", "at most 4 non-empty strings"),
    ("an out-of-range seed", _post(_with(seed=2**64)), 400, "seed", "must be an integer in"),
    ("a seed of 400 digits", _post(_with(seed=10**400)), 400, "seed", "an integer of 401 digits"),
    ("top_p of 0", _post(_with(top_p=0)), 400, "top_p", "in (0, 1]"),
    ("a negative top_p", _post(_with(top_p=-0.5)), 400, "top_p", "in (0, 1]"),
    ("n too large", _post(_with(n=10_000)), 400, "n", "in [1, 16]"),
    ("max_tokens too large", _post(_with(max_tokens=10**30)), 400, "max_tokens", "context window"),
    ("max_tokens of 0", _post(_with(max_tokens=0)), 400, "max_tokens", ">= 1"),
    ("empty messages", _post(_with(messages=[])), 400, "messages", "non-empty list"),
    (
        "an unknown role",
        _post(_with(messages=[{"role": "narrator", "content": "x"}])),
        400,
        "messages",
        "chat template rejected",
    ),
    (
        "a prompt beyond the context window",
        _post(_with(messages=[{"role": "user", "content": "y" * 5000}])),
        400,
        "messages",
        f"context window is {CONTEXT} tokens",
    ),
    (
        "5000 empty messages",
        _post(_with(messages=[{"role": "user", "content": ""}] * 5000)),
        400,
        "messages",
        "which cannot hold them",
    ),
    (
        "a prompt of 8 MB",
        _post(_with(messages=[{"role": "user", "content": "z" * 8_000_000}])),
        400,
        "messages",
        "cannot fit",
    ),
    (
        "a body over the size limit",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
        + str(10**9).encode()
        + b"\r\n\r\n{",
        413,
        None,
        "the limit is",
    ),
    (
        "a GET of the chat route",
        b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n",
        405,
        None,
        "not allowed",
    ),
    ("an unknown route", b"GET /v2/everything HTTP/1.1\r\nHost: x\r\n\r\n", 404, None, "no route"),
    ("a request line that is not HTTP", b"HELLO\r\n\r\n", 400, None, "not valid HTTP/1.1"),
    (
        "a path that is not ASCII",
        b"GET /v1/models/\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
        400,
        None,
        "HTTP/1.1",
    ),
    (
        "a control character in a header",
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
        400,
        None,
        "HTTP/1.1",
    ),
    (
        "a partial request line and headers (slowloris)",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le",
        408,
        None,
        "did not arrive within",
    ),
    (
        "a body that stops short",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
        408,
        None,
        "did not arrive within",
    ),
    ("a connection that sends nothing", b"", 408, None, "did not arrive within"),
]


@pytest.mark.parametrize(
    ("kind", "data", "status", "param", "words"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS]
)
def test_every_bad_request_gets_a_4xx_error_object(
    server: Any, kind: str, data: bytes, status: int, param: str | None, words: str
) -> None:
    port = server.socket.getsockname()[1]
    got, body, _ = _raw(port, data)
    assert got == status, f"{kind}: HTTP {got}, {body}"
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert words in error["message"] and error["param"] == param


def test_after_every_bad_request_the_server_still_answers(server: Any, client: Any) -> None:
    port = server.socket.getsockname()[1]
    results = {}
    threads = [
        threading.Thread(target=lambda k=kind, d=data: results.__setitem__(k, _raw(port, d)[0]))
        for kind, data, *_ in BAD_REQUESTS
    ]
    for t in threads:  # all at once, slow ones included
        t.start()
    for t in threads:
        t.join(60)
    assert {k: s for k, s in results.items()} == {k: s for k, _, s, *_ in BAD_REQUESTS}
    health = httpx.get(server.url.removesuffix("/v1") + "/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    out = client.chat.completions.create(model="tiny", messages=USER, max_tokens=4, top_p=1e-300, seed=1)
    assert out.choices[0].finish_reason in ("stop", "length") and out.usage.completion_tokens >= 1
    again = client.chat.completions.create(model="tiny", messages=USER, max_tokens=4, top_p=1e-300, seed=2)
    assert again.choices[0].message.content == out.choices[0].message.content  # a vanishing top_p is greedy


FIELDS = [
    "model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "min_tokens", "seed",
    "n", "stream", "stream_options", "logprobs", "top_logprobs", "tools", "tool_choice", "stop", "user", "x",
]  # fmt: skip


def test_fuzzed_bodies_never_get_a_5xx(model_dir: Path) -> None:
    """Random values in every field (and random fields): the answer is a 2xx or a 4xx error object."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    import torch

    from llm_zoo.policies.transformers import TransformersPolicy

    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=20)
    )
    values = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
        max_leaves=8,
    )
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "tool", "x"]), "content": values}
    )
    bodies = st.dictionaries(st.sampled_from(FIELDS), values, max_size=6).flatmap(
        lambda body: st.just(body) | st.lists(message, max_size=3).map(lambda m: {**body, "messages": m})
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    served = make_server(
        TransformersPolicy.from_pretrained(model_dir), name="tiny", max_new_tokens=3, context_window=CONTEXT
    )
    try:
        with served.start(), httpx.Client(timeout=60) as http:

            @hypothesis.settings(max_examples=50, deadline=None, database=None)
            @hypothesis.given(bodies)
            def check(body: dict[str, Any]) -> None:
                response = http.post(served.url + "/chat/completions", json=body)
                assert response.status_code < 500, (body, response.text)
                if response.status_code >= 400:
                    assert set(response.json()["error"]) == {"message", "type", "param", "code"}

            check()
            ok = http.post(served.url + "/chat/completions", json={"messages": USER})
            assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] in ("stop", "length")
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("depth", [50, 240, 480, 2000])
def test_deeply_nested_tool_schemas_are_answered_without_a_5xx(server: Any, client: Any, depth: int) -> None:
    # written out by hand: json.dumps itself cannot nest this deep
    schema = '{"type": "object", "properties": {"x": ' * depth + '{"type": "object"}' + "}}" * depth
    tool = '{"type": "function", "function": {"name": "deep", "parameters": ' + schema + "}}"
    body = (
        '{"model": "tiny", "messages": ' + json.dumps(USER) + ', "max_tokens": 2, "tools": [' + tool + "]}"
    ).encode()
    status, payload, _ = _raw(server.socket.getsockname()[1], _post(body))
    assert status is not None and status < 500, payload
    assert status == 200 or set(payload["error"]) == {"message", "type", "param", "code"}
    assert client.chat.completions.create(model="tiny", messages=USER, max_tokens=2).choices


def test_the_slowloris_client_is_cut_off(server: Any) -> None:
    port = server.socket.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        start = time.monotonic()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
        trickled, closed = 0, False
        try:
            while time.monotonic() - start < 8:  # one header byte every 0.1 s, past the 1 s deadline
                sock.sendall(b"X")
                trickled += 1
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        data = sock.recv(65536) if not closed else b""
    assert closed or data.startswith(b"HTTP/1.1 408"), data[:100]
    assert trickled < 70  # cut off well before the client gave up


class _Gate(Policy):
    """Blocks in act until released: a worker that makes no progress."""

    name = "gate"

    def __init__(self) -> None:
        self.release = threading.Event()

    def act(self, observations: Sequence[Any]) -> list[Reply]:
        self.release.wait(30)
        return [Reply("done") for _ in observations]


def test_health_is_not_ok_while_the_worker_cannot_serve() -> None:
    gate = _Gate()
    served = make_server(gate, name="gate", stall_s=0.3).start()
    health = served.url.removesuffix("/v1") + "/health"
    try:
        assert httpx.get(health).json()["status"] == "ok"
        pending = threading.Thread(
            target=lambda: httpx.post(served.url + "/chat/completions", json={"messages": USER}, timeout=60)
        )
        pending.start()
        deadline = time.monotonic() + 20
        while httpx.get(health).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        stalled = httpx.get(health)
        assert stalled.status_code == 503 and stalled.json()["status"] == "unavailable"
        assert "no generation step" in stalled.json()["reason"]
        gate.release.set()
        pending.join(30)
        assert httpx.get(health).status_code == 200
        served.engine.close()  # the worker is gone: not ok, and requests get 503
        stopped = httpx.get(health)
        assert stopped.status_code == 503 and "worker stopped" in stopped.json()["reason"]
        refused = httpx.post(served.url + "/chat/completions", json={"messages": USER})
        assert refused.status_code == 503 and refused.json()["error"]["type"] == "server_error"
    finally:
        gate.release.set()
        served.shutdown()
        served.server_close()


# ---- the command ----------------------------------------------------------------------------


def test_cli_ready_line_health_and_clean_shutdown_on_sigterm(model_dir: Path) -> None:
    proc, url = start_cli(model_dir, "--threads", "1")
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1") and not url.endswith(":0/v1")
        assert httpx.get(url.removesuffix("/v1") + "/health").json()["status"] == "ok"
        assert httpx.get(url + "/models").json()["data"][0]["id"] == "tiny-bytes"  # the folder's name
        player = load_policy(url, "kuhn_poker_v0")
        assert isinstance(player, OpenAIPolicy) and player.model == "tiny-bytes"
        nash = load_policy("nash", "kuhn_poker_v0", seed=0)
        env = llm_zoo.make_env("kuhn_poker_v0")
        policies = {"player_0": player, "player_1": nash}
        finished = 0
        for episode in range(3):
            env.reset(seed=episode)
            for agent in env.agent_iter(max_iter=50):
                obs, _, term, trunc, _ = env.last()
                env.step(None if term or trunc else policies[agent](obs))
            finished += not env.agents
        assert finished == 3 and player.usage["requests"] >= 3 and player.usage["completion_tokens"] > 0
        cmd = [sys.executable, "-m", "llm_zoo.cli", "play", "kuhn_poker_v0", "--p0", url, "--p1", "nash",
               "--episodes", "2", "--seed", "0"]  # fmt: skip
        summary = json.loads(
            subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120, check=True).stdout
        )
        assert summary["episodes"] == 2 and summary["players"]["player_0"]["policy"] == url
    finally:
        code, err = stop_cli(proc)
    assert code == 0 and "stopped serving tiny-bytes" in err


def test_cli_has_the_serve_subcommand() -> None:
    args = build_parser().parse_args(
        ["serve", "--model", "m", "--port", "0", "--name", "x", "--max-new-tokens", "4"]
    )
    assert (args.model, args.host, args.port, args.name, args.max_new_tokens) == ("m", "127.0.0.1", 0, "x", 4)
    assert (
        args.threads is None
        and build_parser().parse_args(["serve", "--model", "m", "--threads", "2"]).threads == 2
    )
    code = "import sys, llm_zoo.cli; llm_zoo.cli.build_parser(); print('torch' in sys.modules, 'uvicorn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    assert out == "False False"


def test_a_taken_port_is_a_value_error_naming_the_flag() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ValueError, match=rf"cannot listen on 127.0.0.1:{port} .*pick another --port"):
            make_server(FunctionPolicy(str), port=port)


# ---- request parsing, without a server ------------------------------------------------------


def test_parse_request_fills_defaults_and_maps_messages() -> None:
    request = parse_request({"messages": USER, "max_completion_tokens": 9, "stream": False}, name="m")
    assert (request.temperature, request.top_p, request.max_tokens, request.seed, request.n) == (
        1.0,
        1.0,
        9,
        None,
        1,
    )
    assert request.top_logprobs is None and request.tools is None and not request.stream
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]},
        {"role": "tool", "tool_call_id": "c", "content": "1"},
    ]  # fmt: skip
    assert parse_request({"messages": messages}, name="m").messages == [
        {"role": "system", "content": "ab"},
        {"role": "assistant", "content": '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'},
        {"role": "tool", "content": "1"},
    ]
    with pytest.raises(RequestError, match="'tool_choice' must be 'auto' or 'none'"):
        parse_request({"messages": USER, "tool_choice": "required"}, name="m")
    with pytest.raises(RequestError, match="reports no log-probs"):
        parse_request({"messages": USER, "logprobs": True}, name="m", token_level=False)
    with pytest.raises(RequestError, match="leave out min_tokens"):
        parse_request({"messages": USER, "min_tokens": 2}, name="m", token_level=False)
    assert (
        parse_request({"messages": USER, "user": "u", "metadata": {}}, name="m").messages == USER
    )  # ignored fields
