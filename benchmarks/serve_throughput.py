"""Serving throughput: requests/s and tokens/s of ``llm-zoo serve`` against the server it replaced, side by side.

Both servers run in this process on 127.0.0.1, each with its own copy of one tiny byte-level
llama from :func:`llm_zoo.models.make_tiny_model`, and both are driven by the official ``openai``
client from ``C`` threads, each sending its next request as soon as its last is answered (``C``
requests in flight). The requests are the same list for both: short chats, temperature 1, a
``max_tokens`` drawn between ``--min-tokens`` and ``--max-tokens`` (an untrained model seldom ends
a turn early, so most replies are that long).

- ``legacy``: the stdlib ``ThreadingHTTPServer`` with a batcher that waits 5 ms for requests with
  equal sampling fields and answers them with one ``TransformersPolicy.act`` call; requests that
  come while a batch runs wait for all of it. Its listen backlog is raised from 5 to 128, so that
  many clients connecting at once are not reset. Its code is ``llm_zoo/serve.py`` as of commit
  a093de3, read from this repository's git history at run time (``git show``) into a temporary
  directory and imported from there; no copy of it is kept in the tree. So the race needs a clone
  that holds that commit: from an sdist, a shallow clone (``git fetch --unshallow`` fixes it) or a
  squash-merged history the benchmark stops and says so.
- ``new``: ``llm_zoo.serve`` (Starlette under uvicorn, continuous batching at each decode step).

The two alternate in rounds, after a warm-up of each, so a busy neighbour slows both alike; the
ratio (new / legacy) is the figure to read.

    python -m benchmarks.serve_throughput             # concurrency 1, 8 and 32; 3 rounds of 64 requests each
    python -m benchmarks.serve_throughput --quick     # concurrency 8; 1 round of 16 short requests: seconds
    python -m benchmarks.serve_throughput --concurrency 4 16 --rounds 5

The last line printed is a JSON object: ``requests_per_s_new``, ``requests_per_s_legacy``,
``tokens_per_s_new``, ``tokens_per_s_legacy`` and ``ratio`` (requests/s, new / legacy) at the
highest concurrency, then ``by_concurrency`` with the same figures for each level, and ``seconds``
(the whole run).
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness

LEGACY_COMMIT = "a093de396073e0105d50691371600f70bc0698a3"
"""The commit whose ``llm_zoo/serve.py`` (the stdlib server with its own batcher) is the baseline."""
LEGACY_PATH = "llm_zoo/serve.py"
REPO = Path(__file__).resolve().parents[1]
WORDS = "the cat sat on a mat and looked at the dog who ran past with a ball in its mouth".split()


def load_legacy() -> Any:
    """Import the legacy server: ``llm_zoo/serve.py`` at :data:`LEGACY_COMMIT`, read from git history.

    Raises:
        SystemExit: git is missing, or this checkout does not hold the commit (a shallow clone, an sdist).
    """
    try:
        source = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{LEGACY_COMMIT}:{LEGACY_PATH}"],
            capture_output=True, text=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", None) or str(exc)
        raise SystemExit(
            f"serve_throughput: the legacy server is {LEGACY_PATH} at commit {LEGACY_COMMIT[:7]}, read from git "
            f"history, and `git show` could not read it from {REPO} ({detail.strip()[:200]}); run the benchmark "
            "from a full clone of the repository (in a shallow one: git fetch --unshallow)."
        ) from None
    with tempfile.TemporaryDirectory(prefix="llm-zoo-legacy-serve-") as folder:
        path = Path(folder) / "legacy_serve.py"
        path.write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location("llm_zoo_legacy_serve", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return module


def workload(count: int, low: int, high: int, seed: int) -> list[tuple[list[dict[str, str]], int]]:
    """Return ``count`` (messages, max_tokens) requests, the same for a given seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        out.append(([{"role": "user", "content": text}], rng.randint(low, high)))
    return out


def drive(
    url: str, requests: Sequence[tuple[list[dict[str, str]], int]], concurrency: int
) -> tuple[float, int]:
    """Send every request with ``concurrency`` in flight; return (seconds, completion tokens)."""
    import openai

    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
    tokens = 0
    lock = threading.Lock()

    def one(request: tuple[list[dict[str, str]], int]) -> None:
        nonlocal tokens
        messages, max_tokens = request
        try:
            out = client.chat.completions.create(model="tiny", messages=messages, max_tokens=max_tokens)
        except openai.APIError as exc:
            raise RuntimeError(f"{url}: the request failed: {exc!r}") from exc
        if not out.choices or not isinstance(out.choices[0].message.content, str):
            raise RuntimeError(f"{url}: no completion in {out!r:.200}")
        with lock:
            tokens += out.usage.completion_tokens

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one, requests))
    seconds = time.perf_counter() - start
    client.close()
    return seconds, tokens


class Servers:
    """Both servers on loopback, each with its own copy of the model."""

    def __init__(self, model_dir: Path, max_new_tokens: int) -> None:
        from llm_zoo.policies.transformers import TransformersPolicy
        from llm_zoo.serve import make_server

        legacy = load_legacy()
        # socketserver listens with a backlog of 5; 32 clients connecting at once can then be reset.
        # The backlog is about admitting connections, not serving them, so it is raised (uvicorn's is 2048).
        legacy.ChatServer.request_queue_size = 128
        self.legacy = legacy.make_server(
            TransformersPolicy.from_pretrained(model_dir, max_new_tokens=max_new_tokens),
            name="tiny",
            max_new_tokens=max_new_tokens,
        )
        self._thread = threading.Thread(target=self.legacy.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        self.new = make_server(
            TransformersPolicy.from_pretrained(model_dir, max_new_tokens=max_new_tokens),
            name="tiny",
            max_new_tokens=max_new_tokens,
        ).start()
        self.urls = {"legacy": self.legacy.url, "new": self.new.url}

    def close(self) -> None:
        self.legacy.shutdown()
        self.legacy.server_close()
        self.new.shutdown()
        self.new.server_close()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; print the table and the JSON line, and return the figures."""
    parser = harness.parser(__doc__, quick="concurrency 8, 1 round of 16 requests of 2-8 tokens (the test's setting)")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 8, 32], help="requests in flight (default: 1 8 32)"
    )
    parser.add_argument(
        "--requests", type=int, default=64, help="requests per round and concurrency (default: 64)"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds of legacy and new (default: 3)"
    )
    parser.add_argument(
        "--min-tokens", type=int, default=4, help="least max_tokens of a request (default: 4)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=64, help="most max_tokens of a request (default: 64)"
    )
    parser.add_argument("--hidden-size", type=int, default=64, help="the tiny model's width (default: 64)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument("--seed", type=int, default=0, help="model init and workload seed (default: 0)")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    if args.quick:
        args.concurrency, args.requests, args.rounds, args.min_tokens, args.max_tokens = [8], 16, 1, 2, 8
        args.hidden_size = 32
    if min(args.concurrency) < 1 or args.requests < 1 or args.rounds < 1:
        parser.error("--concurrency, --requests and --rounds must be >= 1")
    if not 1 <= args.min_tokens <= args.max_tokens:
        parser.error(f"need 1 <= --min-tokens <= --max-tokens, got {args.min_tokens} and {args.max_tokens}")

    import torch

    from llm_zoo.models import make_tiny_model

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_model(
            Path(tmp) / "tiny", tokenizer="bytes", hidden_size=args.hidden_size, seed=args.seed
        )
        servers = Servers(model_dir, max_new_tokens=args.max_tokens)
        try:
            warm = workload(4, args.min_tokens, args.max_tokens, seed=-1)
            for url in servers.urls.values():
                drive(url, warm, 4)
            totals = {
                (c, s): [0.0, 0, 0] for c in args.concurrency for s in servers.urls
            }  # seconds, requests, tokens
            for rnd in range(args.rounds):
                for c in args.concurrency:
                    requests = workload(
                        args.requests, args.min_tokens, args.max_tokens, seed=args.seed * 1000 + rnd
                    )
                    order = list(servers.urls.items())
                    if rnd % 2:
                        order.reverse()
                    for system, url in order:
                        seconds, tokens = drive(url, requests, c)
                        total = totals[(c, system)]
                        total[0] += seconds
                        total[1] += len(requests)
                        total[2] += tokens
        finally:
            servers.close()

    by_concurrency: dict[str, dict[str, float]] = {}
    print(
        f"serve throughput: tiny llama (hidden {args.hidden_size}), {args.rounds} round(s) of {args.requests} "
        f"requests, max_tokens {args.min_tokens}-{args.max_tokens}, torch threads {args.threads}\n"
    )
    print(f"{'in flight':>9}  {'system':<7} {'requests/s':>11} {'tokens/s':>10} {'ratio':>7}")
    for c in args.concurrency:
        row = {}
        for system in ("legacy", "new"):
            seconds, count, tokens = totals[(c, system)]
            row[f"requests_per_s_{system}"] = count / seconds
            row[f"tokens_per_s_{system}"] = tokens / seconds
        row["ratio"] = row["requests_per_s_new"] / row["requests_per_s_legacy"]
        by_concurrency[str(c)] = row
        for system in ("legacy", "new"):
            ratio = f"{row['ratio']:.2f}x" if system == "new" else ""
            print(
                f"{c:>9}  {system:<7} {row[f'requests_per_s_{system}']:>11.2f} "
                f"{row[f'tokens_per_s_{system}']:>10.1f} {ratio:>7}"
            )
    top = by_concurrency[str(max(args.concurrency))]
    figures = {
        **{k: round(v, 4) for k, v in top.items()},
        "concurrency": max(args.concurrency),
        "by_concurrency": {c: {k: round(v, 4) for k, v in row.items()} for c, row in by_concurrency.items()},
    }
    figures["seconds"] = round(time.perf_counter() - began, 1)
    print()
    return harness.emit(figures)


if __name__ == "__main__":
    main()
