"""Tests for llm_zoo.serve: ``llm-zoo serve`` on loopback with a tiny model, played through OpenAIPolicy.

The model tests start the real command as a subprocess (``python -m llm_zoo.cli serve --port 0``)
on a tiny byte-level model from :func:`llm_zoo.models.make_tiny_model` and read its ready line.
An untrained model mostly writes invalid replies, which is fine: the tests check that episodes
finish, that requests are served, and what the server reports. The request parsing and batching
tests need no model.
"""

from __future__ import annotations

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
from pathlib import Path
from typing import Any

import httpx
import pytest

import llm_zoo
from llm_zoo.cli import build_parser
from llm_zoo.policies import Policy, Reply
from llm_zoo.policies.openai import OpenAIPolicy
from llm_zoo.policies.registry import load_policy
from llm_zoo.serve import RequestError, _Batcher, _Job, make_server, parse_request

REPO = Path(__file__).resolve().parents[1]
MAX_NEW_TOKENS = 8
READY_TIMEOUT_S = 120
USER = [{"role": "user", "content": "Hello"}]


def start_server(model_dir: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
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


def stop_server(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM the server; return its exit code and stderr."""
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from llm_zoo.models import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-bytes", tokenizer="bytes", hidden_size=32)


@pytest.fixture(scope="module")
def served(model_dir: Path) -> Iterator[str]:
    proc, url = start_server(model_dir, "--name", "tiny", "--max-new-tokens", str(MAX_NEW_TOKENS))
    yield url
    stop_server(proc)


def post(url: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(url + "/chat/completions", content=content, timeout=30)


# ---- the served model -----------------------------------------------------------------------


def test_ready_line_and_clean_shutdown_on_sigterm(model_dir: Path) -> None:
    proc, url = start_server(model_dir)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1") and not url.endswith(":0/v1")
    assert httpx.get(url.removesuffix("/v1") + "/health").json() == {"status": "ok"}
    assert httpx.get(url + "/models").json()["data"][0]["id"] == "tiny-bytes"  # the folder's name
    code, err = stop_server(proc)
    assert code == 0 and "stopped serving tiny-bytes" in err


def test_chat_completion_response(served: str) -> None:
    data = post(served, {"model": "tiny", "messages": USER, "max_tokens": 3, "temperature": 0}).json()
    assert data["object"] == "chat.completion" and data["model"] == "tiny"
    choice = data["choices"][0]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    usage = data["usage"]
    assert usage["prompt_tokens"] > 0 and 1 <= usage["completion_tokens"] <= 3
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # max_tokens is capped at --max-new-tokens
    long = post(served, {"messages": USER, "max_tokens": 1000}).json()
    assert long["usage"]["completion_tokens"] <= MAX_NEW_TOKENS


def test_a_seed_makes_a_reply_repeatable(served: str) -> None:
    body = {"messages": USER, "seed": 11, "max_tokens": MAX_NEW_TOKENS}
    assert post(served, body).json()["choices"][0] == post(served, body).json()["choices"][0]


@pytest.mark.parametrize(
    ("body", "param", "match"),
    [
        (b"{not json", None, "not valid JSON"),
        ([1, 2], None, "must be a JSON object"),
        ({}, "messages", "'messages' must be a non-empty list"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content", "must be a string"),
        ({"messages": USER, "temperature": -1}, "temperature", "'temperature' must be a number >= 0"),
        ({"messages": USER, "top_p": "high"}, "top_p", "'top_p' must be a number in"),
        ({"messages": USER, "max_tokens": 0}, "max_tokens", "'max_tokens' must be an integer >= 1"),
        ({"messages": USER, "n": 2}, "n", "'n' must be an integer 1"),
        ({"messages": [{"role": "narrator", "content": "x"}]}, "messages", "chat template rejected"),
    ],
)
def test_bad_requests_get_400_naming_the_field(served: str, body: Any, param: str | None, match: str) -> None:
    response = post(served, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and match in error["message"]


def test_unknown_model_and_route(served: str) -> None:
    response = post(served, {"model": "gpt-9", "messages": USER})
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
    assert httpx.get(served + "/nothing").status_code == 404


def test_kuhn_poker_through_openai_policy(served: str) -> None:
    player = load_policy(served, "kuhn_poker_v0")
    assert isinstance(player, OpenAIPolicy) and player.model == "tiny"
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
    assert finished == 3
    assert player.usage["requests"] >= 3
    assert player.usage["prompt_tokens"] > 0 and player.usage["completion_tokens"] > 0


def test_concurrent_requests_are_all_served(served: str) -> None:
    with OpenAIPolicy(served, "tiny", max_concurrency=6, max_tokens=4) as policy:
        replies = policy.act([{"messages": [{"role": "user", "content": f"n{i}"}]} for i in range(6)])
    assert len(replies) == 6 and policy.usage["requests"] == 6


def test_cli_play_against_the_served_model(served: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "llm_zoo.cli",
        "play",
        "kuhn_poker_v0",
        "--p0",
        served,
        "--p1",
        "nash",
        "--episodes",
        "2",
        "--seed",
        "0",
    ]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120, check=True).stdout
    summary = json.loads(out)
    assert summary["episodes"] == 2
    stats = summary["players"]["player_0"]
    assert stats["policy"] == served and {"win_rate", "mean_payoff", "invalid_reply_rate"} <= set(stats)


# ---- without a model ------------------------------------------------------------------------


def test_cli_has_the_serve_subcommand() -> None:
    args = build_parser().parse_args(
        ["serve", "--model", "m", "--port", "0", "--name", "x", "--max-new-tokens", "4"]
    )
    assert (args.model, args.host, args.port, args.name, args.max_new_tokens) == ("m", "127.0.0.1", 0, "x", 4)
    code = "import sys, llm_zoo.cli; llm_zoo.cli.build_parser(); print('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
    )


def test_parse_request_fills_defaults_and_caps_max_tokens() -> None:
    job = parse_request(
        {"messages": USER, "max_completion_tokens": 99, "stream": False}, name="m", max_new_tokens=16
    )
    assert (job.temperature, job.top_p, job.max_new_tokens, job.seed) == (1.0, 1.0, 16, None)
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert parse_request({"messages": parts}, name="m", max_new_tokens=16).messages == [
        {"role": "user", "content": "ab"}
    ]
    with pytest.raises(RequestError, match="'stream' is not supported"):
        parse_request({"messages": USER, "stream": True}, name="m", max_new_tokens=16)


class RecordingPolicy(Policy):
    """Echoes the last message and records the size of every batch it was asked for."""

    name = "recorder"

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.temperature = 1.0
        self.top_p = 1.0
        self.max_new_tokens = 1

    def act(self, observations: Sequence[Any]) -> list[Reply]:
        self.batches.append(len(observations))
        time.sleep(0.02)  # long enough for the next requests to queue up
        return [Reply(obs["messages"][-1]["content"]) for obs in observations]


def test_batcher_gathers_concurrent_requests_into_one_act_call() -> None:
    policy = RecordingPolicy()
    batcher = _Batcher(policy)
    try:
        jobs = [_Job([{"role": "user", "content": f"m{i}"}], 1.0, 1.0, 4, None) for i in range(8)]
        jobs.append(_Job(USER, 0.0, 1.0, 4, None))  # other sampling fields: a batch of its own
        jobs.append(_Job(USER, 1.0, 1.0, 4, 7))  # seeded: alone
        futures = [batcher.submit(job) for job in jobs]
        results = [f.result(timeout=10) for f in futures]
    finally:
        batcher.close()
    assert results == [f"m{i}" for i in range(8)] + ["Hello", "Hello"]
    assert max(policy.batches) > 1 and sum(policy.batches) == 10 and policy.batches.count(1) >= 2


def test_a_taken_port_is_a_value_error_naming_the_flag() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ValueError, match=rf"cannot listen on 127.0.0.1:{port} .*pick another --port"):
            make_server(RecordingPolicy(), port=port)
