"""The generation side of ``llm-zoo serve``: one worker thread that owns the model and batches every request.

Two engines share one interface (:meth:`Engine.submit`, :meth:`Engine.health`, :meth:`Engine.close`):

- :class:`ModelEngine`, for a transformers model (a :class:`~llm_zoo.policies.transformers.TransformersPolicy`):
  continuous batching at the level of decode steps. Every sequence being generated is one row of
  a left-padded batch whose KV cache the engine keeps between steps; a request that arrives while
  others decode is prefilled at the next step and its rows join the batch, and a row that finishes
  leaves it at once. Each row samples with its own temperature, top-p and ``torch.Generator``, so
  requests with different settings share every forward pass.
- :class:`PolicyEngine`, for any other :class:`~llm_zoo.policy.Policy` (a scripted player, a
  test double): requests that arrive while an ``act`` call runs are answered together by the next one.

Why a loop of our own and not transformers' ``ContinuousBatchingManager``: that manager (paged
attention, experimental in transformers 5) reports only the sampled token's log-prob, has no
per-request seed, and sets top-p per manager rather than per request, and the API needs all three.

The model runs on the worker thread only, and so does decoding. Prompts are encoded before a job
is queued, on a second thread with a copy of the tokenizer (:meth:`ModelEngine.prepare`), so a long
prompt never holds up the decode steps, and no tokenizer is used from two threads at once. Results go back through the
``sink`` callable of each :class:`Job` as events (plain tuples), called from the worker thread:

- ``("start", prompt_tokens)``: the prompt was accepted; generation begins.
- ``("delta", choice, text, logprobs)``: new text of one choice, and one log-prob entry per new
  token (``[]`` unless the job asked for log-probs).
- ``("done", choice, finish_reason, completion_tokens)``: that choice ended, ``"stop"`` or ``"length"``.
- ``("error", exc)``: the job failed; a :class:`RequestError` is the client's mistake (4xx).
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from llm_zoo.policy import Policy

MAX_BATCH = 64
"""Most sequences decoded in one step; more wait in the queue."""
MAX_QUEUED = 1024
"""Most sequences waiting for a place in the batch; past it a request gets 429."""
STALL_S = 60.0
"""``/health`` reports unavailable when work is waiting and the worker made no step for this long."""
GREEDY_BELOW = 1e-5
"""A temperature below this decodes greedily (dividing logits by it would overflow)."""


class RequestError(ValueError):
    """A client mistake, answered with an OpenAI-style error object and a 4xx status."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.status = status
        self.code = code


@dataclass
class Job:
    """One chat completion request: ``n`` choices of one prompt, written to ``sink`` as events.

    ``max_tokens`` is the client's limit (``None``: as many as the context window and the
    server's cap allow); ``max_new_tokens`` the server's cap.
    """

    messages: list[dict[str, str]]
    sink: Callable[[tuple[Any, ...]], None]
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = None
    min_tokens: int = 0
    seed: int | None = None
    top_logprobs: int | None = None
    """``None``: no log-probs; ``k``: the sampled token's log-prob and the ``k`` most likely."""
    tools: list[dict[str, Any]] | None = None
    stop: tuple[str, ...] = ()
    """The reply ends before the first of these strings (which is not returned)."""
    prompt: list[int] | None = None
    """Token ids of the prompt, set by :meth:`Engine.prepare` (model engines only)."""
    limit: int = 0
    """Most completion tokens of each choice, set by :meth:`Engine.prepare` (model engines only)."""
    cancelled: bool = False
    """Set by the HTTP side when the client went away; its rows are dropped at the next step."""

    @property
    def key(self) -> tuple[Any, ...]:
        """Jobs with equal keys can share one ``act`` call (:class:`PolicyEngine`); a seeded job never shares."""
        return (self.temperature, self.top_p, self.max_tokens, id(self) if self.seed is not None else None)


class Engine:
    """The worker thread and its queue; subclasses write :meth:`_loop`."""

    def __init__(self, *, stall_s: float = STALL_S, max_queued: int = MAX_QUEUED) -> None:
        self.stall_s = stall_s
        self.max_queued = max_queued
        self.queued = 0  # sequences submitted and not yet admitted
        self.active = 0  # sequences being generated
        self.steps = 0
        self.max_batch_seen = 0
        self.last_progress = time.monotonic()
        self.failure: str | None = None  # set when the worker died
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="llm-zoo-serve-engine", daemon=True)
        self._thread.start()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm-zoo-serve-prepare")
        """The one thread that runs :meth:`prepare`, beside the worker."""

    def check_running(self) -> None:
        """Raise :class:`RequestError` (503) when the worker is stopping or stopped."""
        if self._stopping or not self._thread.is_alive():
            raise RequestError(
                "the server is shutting down or its worker stopped.", status=503, code="unavailable"
            )

    def prepare(self, job: Job) -> None:
        """Check ``job`` before it is queued (off the worker thread, in :attr:`pool`); raise RequestError."""

    def submit(self, job: Job) -> None:
        """Queue ``job``; raise :class:`RequestError` (429) when the queue is full, (503) when stopped."""
        self.check_running()
        with self._lock:
            if self.queued + job.n > self.max_queued:
                raise RequestError(
                    f"the server is busy ({self.queued} sequences queued, limit {self.max_queued}); retry later.",
                    status=429,
                    code="rate_limit_exceeded",
                )
            self.queued += job.n
        self._queue.put(job)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Return whether the engine can serve now, and the figures behind the answer."""
        info = {"queued": self.queued, "active": self.active, "steps": self.steps}
        if self.failure is not None or not self._thread.is_alive():
            return False, {**info, "reason": f"the generation worker stopped: {self.failure or 'exited'}"}
        stalled = time.monotonic() - self.last_progress
        if (self.queued or self.active) and stalled > self.stall_s:
            return False, {**info, "reason": f"no generation step for {stalled:.0f} s with work waiting"}
        return True, info

    def close(self) -> None:
        """Stop the worker: queued jobs get an error, and the thread is joined."""
        self._stopping = True
        self._queue.put(None)
        self._thread.join(timeout=30)
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - recorded for /health, then the thread ends
            self.failure = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._drain_queue()

    def _loop(self) -> None:
        raise NotImplementedError

    def _take(self, block: bool, limit: int) -> list[Job]:
        """Take up to ``limit`` sequences' worth of jobs (at least one job when ``block``)."""
        jobs: list[Job] = []
        room = limit
        while room > 0 and not self._stopping:
            try:
                job = self._queue.get(timeout=0.2) if block and not jobs else self._queue.get_nowait()
            except queue.Empty:
                if block and not jobs:
                    continue
                break
            if job is None:
                self._stopping = True
                break
            with self._lock:
                self.queued -= job.n
            if job.cancelled:
                continue
            jobs.append(job)
            room -= job.n
        return jobs

    def _drain_queue(self) -> None:
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                _send(job, ("error", RequestError("the server stopped.", status=503, code="unavailable")))


def _send(job: Job, event: tuple[Any, ...]) -> None:
    try:
        job.sink(event)
    except Exception:  # noqa: BLE001 - a sink whose client went away must not stop the worker
        job.cancelled = True


# ---- any policy -----------------------------------------------------------------------------


class PolicyEngine(Engine):
    """Answers jobs with batched ``policy.act`` calls: jobs that arrive during a call join the next.

    ``policy`` reads each observation's ``messages``; when it has ``temperature``, ``top_p``,
    ``max_new_tokens`` attributes they are set per call from the jobs, which are grouped by
    :attr:`Job.key`. Log-probs are not available through this engine.
    """

    def __init__(self, policy: Policy, *, max_new_tokens: int, **kwargs: Any) -> None:
        self.policy = policy
        self.max_new_tokens = max_new_tokens
        super().__init__(**kwargs)

    def _loop(self) -> None:
        while not self._stopping:
            jobs = self._take(block=True, limit=MAX_BATCH)
            self.last_progress = time.monotonic()
            groups: dict[tuple[Any, ...], list[Job]] = {}
            for job in jobs:
                groups.setdefault(job.key, []).append(job)
            for group in groups.values():
                self.active = sum(j.n for j in group)
                self.max_batch_seen = max(self.max_batch_seen, self.active)
                self._generate(group)
                self.steps += 1
                self.active = 0
                self.last_progress = time.monotonic()

    def _generate(self, jobs: Sequence[Job]) -> None:
        first, policy = jobs[0], self.policy
        cap = min(first.max_tokens or self.max_new_tokens, self.max_new_tokens)
        try:
            for attr, value in (
                ("temperature", first.temperature),
                ("top_p", first.top_p),
                ("max_new_tokens", cap),
            ):
                if hasattr(policy, attr):
                    setattr(policy, attr, value)
            if first.seed is not None:
                policy.seed(first.seed)
            observations = [{"messages": j.messages} for j in jobs for _ in range(j.n)]
            replies = policy.act(observations)
        except Exception as exc:  # noqa: BLE001 - answered per job below; the server keeps serving
            if len(jobs) > 1:  # one job's messages must not fail the others: each job alone
                for j in jobs:
                    self._generate([j])
                return
            if isinstance(exc, (TypeError, ValueError)):  # the policy contract: malformed observations
                message = f"the policy rejected 'messages': {type(exc).__name__}: {str(exc)[:500]}"
                exc = RequestError(message, param="messages")
            _send(jobs[0], ("error", exc))  # anything else is the server's failure: a 500 naming it
            return
        eos = set(getattr(policy, "eos_token_ids", ()))
        it = iter(replies)
        for j in jobs:
            mine = [next(it) for _ in range(j.n)]
            _send(j, ("start", len(getattr(mine[0], "prompt_ids", None) or [])))
            for choice, reply in enumerate(mine):
                ids = getattr(reply, "completion_ids", None) or []
                finish = "length" if ids and len(ids) >= cap and ids[-1] not in eos else "stop"
                text, stopped = cut_at_stop(str(reply), j.stop)
                finish = "stop" if stopped else finish
                _send(j, ("delta", choice, text, []))
                _send(j, ("done", choice, finish, len(ids)))


# ---- a transformers model -------------------------------------------------------------------


@dataclass
class _Row:
    """One sequence being generated: a choice of a job."""

    job: Job
    choice: int
    generator: Any  # torch.Generator
    prompt_len: int
    limit: int  # most completion tokens
    prompt: list[int] | None = None  # on a job's first row until the prefill reads it
    ids: list[int] = field(default_factory=list)
    text: str = ""  # text sent so far
    done: bool = False


class ModelEngine(Engine):
    """Continuous batching over a transformers causal LM (module docstring).

    Args:
        policy: A :class:`~llm_zoo.policies.transformers.TransformersPolicy`; the engine uses its
            model, tokenizer, chat-template encoding and end-of-turn ids, not its sampler.
        max_new_tokens: Cap on any choice's completion.
        context_window: Longest prompt plus completion; defaults to the model config's
            ``max_position_embeddings``.
        seed: Seeds the draws of requests that send no seed; ``None`` draws fresh entropy.
    """

    def __init__(
        self,
        policy: Any,
        *,
        max_new_tokens: int,
        context_window: int | None = None,
        seed: int | None = None,
        max_batch: int = MAX_BATCH,
        **kwargs: Any,
    ) -> None:
        import torch

        from llm_zoo.policies import sampling

        self.torch = torch
        self.sampling = sampling
        self.policy = policy
        self.model = policy.model
        self.tokenizer = policy.tokenizer
        self.device = policy.device
        self.max_new_tokens = max_new_tokens
        self.max_batch = max_batch
        self.context_window = int(context_window or context_window_of(self.model))
        self.eos = list(policy.eos_token_ids)
        self.pad = int(policy.pad_token_id)
        self._rng = random.Random(seed)
        self._token_text: dict[int, tuple[str, list[int]]] = {}
        decoder = getattr(getattr(self.tokenizer, "backend_tokenizer", None), "decoder", None)
        self._byte_level = type(decoder).__name__ == "ByteLevel"
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.2x
        self._template_has_tools = "tools" in str(getattr(self.tokenizer, "chat_template", "") or "")
        # prompts are encoded on the prepare thread with a tokenizer of their own: a fast tokenizer
        # used from two threads at once can fail ("Already borrowed"), and the worker decodes
        self._encoder = copy.deepcopy(self.tokenizer)
        longest = max((len(t) for t in self.tokenizer.get_vocab()), default=1)
        self.max_prompt_chars = self.context_window * max(1, longest)
        """More characters of messages than this cannot fit the context window (no token is longer)."""
        # the batch: rows, their KV cache, attention mask [rows, width], next position and pending token
        self.rows: list[_Row] = []
        self.cache: Any = None
        self.mask: Any = None
        self.positions: Any = None
        self.pending: Any = None
        super().__init__(**kwargs)

    # ---- the loop ---------------------------------------------------------------------------

    def _loop(self) -> None:
        torch = self.torch
        self.model.eval()
        with torch.inference_mode():
            while not self._stopping:
                jobs = self._take(block=not self.rows, limit=self.max_batch - len(self.rows))
                self.last_progress = time.monotonic()
                new = self._admit(jobs)
                self._drop_cancelled()
                # a client that left after the last step's own check is dropped here: its rows no longer count
                self.active = len(self.rows) + len(new)
                if not self.rows and not new:
                    continue
                try:  # the rows are counted as work while the step runs (/health)
                    self._step(new)
                except Exception as exc:  # noqa: BLE001 - a failed step fails its rows, not the server
                    for job in {id(r.job): r.job for r in [*self.rows, *new]}.values():
                        _send(job, ("error", exc))
                    self.rows, self.cache, self.mask, self.positions, self.pending = (
                        [],
                        None,
                        None,
                        None,
                        None,
                    )
                self.steps += 1
                self.active = len(self.rows)
                self.last_progress = time.monotonic()

    def prepare(self, job: Job) -> None:
        """Encode the job's prompt and check it against the context window, before it is queued."""
        if len(job.messages) > self.context_window:  # a template spends a token or more on each
            raise RequestError(
                f"'messages' holds {len(job.messages)} messages; this model's context window is "
                f"{self.context_window} tokens, which cannot hold them. Send fewer messages.",
                param="messages",
                code="context_length_exceeded",
            )
        try:
            tools_text = json.dumps(job.tools or [], ensure_ascii=False)
        except (RecursionError, ValueError):
            raise RequestError("'tools' nests too deeply to render.", param="tools") from None
        chars = sum(len(m["content"]) for m in job.messages) + len(tools_text)
        if chars > self.max_prompt_chars:
            raise RequestError(
                f"the messages hold {chars} characters; this model's context window is {self.context_window} "
                f"tokens, and no token is longer than {self.max_prompt_chars // self.context_window} characters, "
                "so they cannot fit. Shorten 'messages'.",
                param="messages",
                code="context_length_exceeded",
            )
        try:
            prompt = self._encode(job)
        except Exception as exc:  # noqa: BLE001 - the template raised: the messages are at fault
            raise RequestError(
                f"the model's chat template rejected 'messages': {exc}", param="messages"
            ) from None
        job.limit = self._limit(job, len(prompt))
        job.prompt = prompt

    def _admit(self, jobs: Sequence[Job]) -> list[_Row]:
        """Start each prepared job: report its prompt's length and return its new rows."""
        rows = []
        for job in jobs:
            prompt = job.prompt
            if prompt is None:
                _send(job, ("error", RuntimeError("a job reached the model without prepare()")))
                continue
            _send(job, ("start", len(prompt)))
            for choice in range(job.n):
                generator = self.torch.Generator()
                if job.seed is None:
                    generator.manual_seed(self._rng.getrandbits(63))
                else:  # choice c of a seeded job draws from its own stream, repeatably
                    generator.manual_seed((job.seed + choice * 0x9E3779B97F4A7C15) % 2**64)
                rows.append(
                    _Row(job, choice, generator, len(prompt), job.limit, prompt if choice == 0 else None)
                )
        return rows

    def _encode(self, job: Job) -> list[int]:
        messages = [dict(m) for m in job.messages]
        kwargs: dict[str, Any] = {}
        if job.tools and self._template_has_tools:
            kwargs["tools"] = job.tools
        elif job.tools:  # the env convention: tools shown in the system prompt, as OpenAI function schemas
            listing = 'You can call these tools, one per <tool_call>{"name": ..., "arguments": {...}}</tool_call> block:\n'
            listing += "\n".join(json.dumps(t, ensure_ascii=False) for t in job.tools)
            if messages and messages[0]["role"] == "system":
                messages[0] = {**messages[0], "content": messages[0]["content"] + "\n\n" + listing}
            else:
                messages.insert(0, {"role": "system", "content": listing})
        # as TransformersPolicy.encode_prompts: control tokens typed inside a message stay text
        return [
            int(t)
            for t in self._encoder.apply_chat_template(
                messages,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
                sanitize_control_tokens=True,
                **kwargs,
            )
        ]

    def _limit(self, job: Job, prompt_len: int) -> int:
        room = self.context_window - prompt_len
        if room < 1:
            raise RequestError(
                f"the prompt is {prompt_len} tokens; this model's context window is {self.context_window} "
                "tokens, which must hold the prompt and at least 1 completion token. Shorten 'messages'.",
                param="messages",
                code="context_length_exceeded",
            )
        if job.max_tokens is not None and job.max_tokens > room:
            raise RequestError(
                f"'max_tokens' is {job.max_tokens}, but the prompt is {prompt_len} tokens and this model's "
                f"context window is {self.context_window} tokens: at most {room} completion tokens fit. "
                "Lower max_tokens or shorten 'messages'.",
                param="max_tokens",
                code="context_length_exceeded",
            )
        limit = min(job.max_tokens or self.max_new_tokens, self.max_new_tokens, room)
        if job.min_tokens > limit:
            raise RequestError(
                f"'min_tokens' is {job.min_tokens}, more than the {limit} completion tokens this request may "
                "write (max_tokens, the server's --max-new-tokens and the context window bound it).",
                param="min_tokens",
            )
        return limit

    def _step(self, new: list[_Row]) -> None:
        """Decode one token for every row, prefilling the new rows first; then sample and report."""
        torch = self.torch
        logits = []
        if self.rows:
            self.mask = torch.cat([self.mask, self.mask.new_ones(len(self.rows), 1)], dim=1)
            out = self.model(
                input_ids=self.pending[:, None],
                attention_mask=self.mask,
                position_ids=self.positions[:, None],
                use_cache=True,
                **{self._cache_arg: self.cache},
            )
            self.cache = getattr(out, self._cache_arg)
            self.positions = self.positions + 1
            logits.append(out.logits[:, -1, :].float())
        if new:
            logits.append(self._prefill(new))
        self.rows = self.rows + new
        self.active = len(self.rows)  # before any event of this step goes out
        self.max_batch_seen = max(self.max_batch_seen, len(self.rows))
        tokens = self._sample(torch.cat(logits, dim=0))
        self.pending = tokens
        keep = [i for i, row in enumerate(self.rows) if not row.done and not row.job.cancelled]
        if len(keep) < len(self.rows):
            self._select(keep)

    def _prefill(self, new: list[_Row]) -> Any:
        """Run the new rows' prompts (each job's once) and merge their cache into the batch's."""
        torch = self.torch
        prompts: list[list[int]] = []
        row_of: list[
            int
        ] = []  # row -> its job's prompt; a job's rows are consecutive, its first holds the prompt
        for row in new:
            if row.prompt is not None:
                prompts.append(row.prompt)
                row.prompt = None
            row_of.append(len(prompts) - 1)
        width = max(map(len, prompts))
        ids = torch.full((len(prompts), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache = getattr(out, self._cache_arg)
        rows = torch.tensor(row_of, dtype=torch.long, device=self.device)
        if len(row_of) != len(prompts) or row_of != list(range(len(prompts))):
            cache.batch_select_indices(rows)
        mask = mask[rows]
        lengths = torch.tensor([len(prompts[i]) for i in row_of], device=self.device)
        self._merge(cache, mask, lengths)
        return out.logits[:, -1, :].float()[rows]

    def _merge(self, cache: Any, mask: Any, positions: Any) -> None:
        """Append rows to the batch: both caches are left-padded to one width and stacked."""
        torch = self.torch
        if self.cache is None or not self.rows:
            self.cache, self.mask, self.positions = cache, mask, positions
            return
        old_w, new_w = self.mask.shape[1], mask.shape[1]
        width = max(old_w, new_w)
        for old, add in zip(self.cache.layers, cache.layers, strict=True):
            old.keys, old.values = (
                torch.cat([_pad_left(old.keys, width), _pad_left(add.keys, width)], dim=0),
                torch.cat([_pad_left(old.values, width), _pad_left(add.values, width)], dim=0),
            )
        self.mask = torch.cat([_pad_left(self.mask, width, dim=1), _pad_left(mask, width, dim=1)], dim=0)
        self.positions = torch.cat([self.positions, positions])

    def _select(self, keep: list[int]) -> None:
        """Keep only rows ``keep``; drop the columns that are padding in every remaining row."""
        torch = self.torch
        self.rows = [self.rows[i] for i in keep]
        if not keep:
            self.cache = self.mask = self.positions = self.pending = None
            return
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.cache.batch_select_indices(index)
        self.mask, self.positions, self.pending = self.mask[index], self.positions[index], self.pending[index]
        first = int(self.mask.any(dim=0).nonzero()[0])
        if first:
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]
            self.mask = self.mask[:, first:]

    def _drop_cancelled(self) -> None:
        keep = [i for i, row in enumerate(self.rows) if not row.job.cancelled]
        if len(keep) < len(self.rows):
            self._select(keep)

    # ---- sampling -----------------------------------------------------------------------------

    def _sample(self, logits: Any) -> Any:
        """Pick each row's next token by its job's settings, report it, and mark finished rows.

        The rule is :mod:`llm_zoo.policies.sampling`'s, which TransformersPolicy draws by: log-probs of
        the tempered distribution (temperature 1 when greedy) before top-p, one float64 uniform a
        sampled row from the row's own (CPU) generator. So on the CPU a seeded request of one choice
        samples what ``TransformersPolicy(seed=seed)`` samples for its prompt alone (a policy on a GPU
        draws from a CUDA generator, whose stream differs).
        """
        torch, rows = self.torch, self.rows
        eos = torch.tensor(self.eos, device=logits.device)
        early = [i for i, r in enumerate(rows) if len(r.ids) < r.job.min_tokens]
        if early:  # min_tokens: no end of turn yet
            logits[torch.tensor(early)[:, None], eos[None, :]] = float("-inf")
        temperatures = [0.0 if r.job.temperature < GREEDY_BELOW else r.job.temperature for r in rows]
        logprobs = self.sampling.tempered_logprobs(logits, torch.tensor(temperatures, device=logits.device))
        tokens = logits.argmax(dim=-1)
        sampled = [i for i, t in enumerate(temperatures) if t]
        if sampled:
            index = torch.tensor(sampled, device=logits.device)
            top_p = torch.tensor([rows[i].job.top_p for i in sampled], device=logits.device)
            uniform = torch.cat(
                [torch.rand(1, generator=rows[i].generator, dtype=torch.float64) for i in sampled]
            )
            tokens[index] = self.sampling.draw_tokens(logprobs[index], top_p, uniform.to(logits.device)[:, None])
        chosen = logprobs.gather(1, tokens[:, None]).squeeze(1).tolist()
        want = max((r.job.top_logprobs or 0) for r in rows)
        tops = None
        if want:
            values, ids = logprobs.topk(want, dim=-1)
            tops = (values.tolist(), ids.tolist())
        token_list = tokens.tolist()
        eos_set = set(self.eos)
        for i, row in enumerate(rows):
            token = token_list[i]
            row.ids.append(token)
            stop = token in eos_set
            entries = []
            if row.job.top_logprobs is not None and not stop:
                k = row.job.top_logprobs
                top = (
                    []
                    if not k or tops is None
                    else [self._entry(t, v) for v, t in zip(tops[0][i][:k], tops[1][i][:k], strict=True)]
                )
                entries.append({**self._entry(token, chosen[i]), "top_logprobs": top})
            finish = "stop" if stop else ("length" if len(row.ids) >= row.limit else None)
            text, stopped = self._text(row, final=finish is not None)
            finish = "stop" if stopped else finish
            if text or entries:
                _send(row.job, ("delta", row.choice, text, entries))
            if finish is not None:
                row.done = True
                _send(row.job, ("done", row.choice, finish, len(row.ids)))
        return tokens

    def _text(self, row: _Row, *, final: bool) -> tuple[str, bool]:
        """Return the text the row's new token adds, and whether it completed one of the job's stop strings.

        Text is held back while it ends in a partial character, or in what may begin a stop string.
        """
        ids = row.ids[:-1] if row.ids and row.ids[-1] in self.eos else row.ids
        text, stopped = cut_at_stop(self.tokenizer.decode(ids, skip_special_tokens=True), row.job.stop)
        if not (final or stopped):
            if text.endswith("\ufffd"):
                return "", False
            text = text[: len(text) - stop_prefix_length(text, row.job.stop)]
        delta = text[len(row.text) :]
        row.text = text
        return delta, stopped

    def _entry(self, token: int, logprob: float) -> dict[str, Any]:
        known = self._token_text.get(token)
        if known is None:
            known = self._token_text[token] = (self.tokenizer.decode([token]), self._token_bytes(token))
        text, raw = known
        return {"token": text, "logprob": logprob if math.isfinite(logprob) else -9999.0, "bytes": raw}

    def _token_bytes(self, token: int) -> list[int]:
        """Return the token's own bytes: a piece of a character decodes to U+FFFD, but its bytes are exact.

        Byte-level vocabularies (GPT-2's table, as Qwen's and Llama 3's) spell each byte as a
        character; SentencePiece's byte fallback writes ``<0xNN>``; anything else is its text's UTF-8.
        """
        piece = self.tokenizer.convert_ids_to_tokens(token)
        if isinstance(piece, str):
            if self._byte_level and all(c in _UNICODE_TO_BYTE for c in piece):
                return [_UNICODE_TO_BYTE[c] for c in piece]
            if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                try:
                    return [int(piece[3:5], 16)]
                except ValueError:
                    pass
        return list(self.tokenizer.decode([token]).encode("utf-8", "replace"))


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Return ``text`` up to the first occurrence of any stop string, and whether one occurred."""
    hits = [at for at in (text.find(s) for s in stop) if at >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


def stop_prefix_length(text: str, stop: Sequence[str]) -> int:
    """Return the length of the longest end of ``text`` that begins some stop string (held back when streaming)."""
    longest = 0
    for s in stop:
        for k in range(min(len(s) - 1, len(text)), longest, -1):
            if text.endswith(s[:k]):
                longest = k
                break
    return longest


def _byte_table() -> dict[str, int]:
    """Return GPT-2's byte-level alphabet read backwards: the character that spells each byte -> the byte.

    Printable Latin-1 bytes spell themselves; the other 68 take the characters from U+0100 on, in order.
    """
    printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[chr(byte)] = byte
        else:
            table[chr(0x100 + extra)] = byte
            extra += 1
    return table


_UNICODE_TO_BYTE = _byte_table()


def context_window_of(model: Any) -> int:
    """Return the longest sequence the model's config declares (``max_position_embeddings`` or kin)."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    raise ValueError(
        "serve: the model's config declares no context window (max_position_embeddings); "
        "pass context_window= to make_server."
    )


def _pad_left(tensor: Any, width: int, dim: int = 2) -> Any:
    """Left-pad ``tensor`` with zeros along ``dim`` to ``width``."""
    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    import torch

    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)
