"""Rollouts: many env instances side by side, one batched call per policy per tick.

:func:`collect` plays a list of episodes (one per env seed) and returns their :class:`Episode`
records. It keeps up to ``batch_size`` envs live at once. At each tick it gathers every live env's
pending (agent, observation), groups them by the policy serving that agent, makes one
``policy.act(observations)`` call per policy, and steps each env with its reply; an env whose
episode ends is reset for the next seed. So a model-backed policy samples ``batch_size`` replies
per forward pass instead of one, which is where the throughput comes from
(``benchmarks/rollout_throughput.py`` measures it).

The envs sit in numbered slots behind one interface, :class:`Envs` (start an episode on a slot,
step a slot with a reply, call a policy hosted beside the envs, release a slot's env), and one tick
loop drives it, whether the slots are in this process (:class:`LocalEnvs`) or in an executor's
workers (:mod:`llm_zoo.trainers.executors`): the same arguments give the same episodes either way.

Failures stay local to their episode: an env that raises (in ``reset``, ``step``, ``last``,
``observe``, or ``make_env`` building a replacement) marks that episode failed (with the traceback)
and is replaced by a fresh one from ``make_env``, and a policy whose batched call raises is retried
one observation at a time, so only the episodes whose observation fails are marked failed. An env
whose ``close()`` raises loses nothing: the episodes it finished are returned as they are, and the
traceback is kept in the ``error`` of the last of them (``failed`` stays False: its turns and
rewards are whole) or appended to the failed episode's ``error``. Contract violations by a policy
(the wrong number of replies, a reply that is not a ``str``) raise, since they would spoil every
episode.
"""

from __future__ import annotations

import functools
import gc
import time
import traceback
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np
from pettingzoo import AECEnv

from llm_zoo.envs.core import check_option_keys
from llm_zoo.episode import Episode, Turn, jsonable
from llm_zoo.policy import Observation, Policy, PromptTooLong, Reply

__all__ = ["Answer", "Envs", "Executor", "Failure", "Job", "LocalEnvs", "MemoEnvs", "MemoExecutor", "Outcome", "Waiting",
           "collect"]

PolicyMap = Mapping[str, Policy]
"""Agent name or role -> the policy that serves it; an agent name wins over its role."""


def collect(
    make_env: str | Callable[[], AECEnv],
    policies: PolicyMap | Sequence[PolicyMap],
    seeds: int | Sequence[int | None],
    *,
    batch_size: int = 64,
    options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int | None = None,
    max_steps: int = 10_000,
    progress: bool | str = False,
    executor: Executor | None = None,
) -> list[Episode]:
    """Play one episode per env seed, up to ``batch_size`` envs at once; return the records in seed order.

    Under a ``seed``, the same arguments (seeds, policies, ``batch_size``) give the same episodes:
    every env is reset with its episode's seed and every policy is reseeded first. The batch
    composition shapes which random draws a policy spends on which episode, so a different
    ``batch_size`` gives different (equally valid) episodes.

    Args:
        make_env: A callable returning a new AEC env (e.g. ``kuhn_poker_v0.env`` or a
            ``functools.partial`` of it), or a versioned env name (``"kuhn_poker_v0"``) built by
            ``llm_zoo.make_env(name, **env_kwargs)``. Up to ``batch_size`` envs are made and each
            is reused across episodes.
        policies: Agent name or role (``env.unwrapped.role_of(agent)``) -> :class:`Policy`; an
            agent name wins over its role, so ``{"player": p}`` puts ``p`` in every seat and
            ``{"player_0": p, "player_1": q}`` pits two policies. The same object in several
            seats is called once per tick for all of them. A sequence of such mappings gives one
            per episode (e.g. a learner against opponents drawn from a pool of snapshots).
        seeds: The env seed of each episode, or a count ``n`` for seeds ``seed, seed + 1, ...,
            seed + n - 1`` (from 0 when ``seed`` is None).
        batch_size: How many envs run side by side, so the most observations one policy call
            gets per tick.
        options: ``reset`` options for every episode, or a sequence of them, one per episode.
        env_kwargs: Keyword arguments of the env, recorded in each episode; with an env name
            they also build it. Defaults to the keywords of a ``functools.partial`` ``make_env``.
        seed: Reseeds every distinct policy (with seeds derived from it) before the first tick;
            None leaves the policies' RNGs as they are.
        max_steps: An episode still running after this many ``env.step`` calls is stopped and
            marked failed (a guard for envs without a step cap of their own).
        progress: Show a tqdm progress bar of finished episodes; a string is its description.
        executor: Where the envs run: None steps them in this process (:class:`LocalEnvs`); an
            executor such as :class:`~llm_zoo.trainers.executors.RayExecutor` opens them (its
            ``open(build, env_id, env_kwargs, max_steps, policies)`` returns an :class:`Envs`) in its
            workers, with the policies that say ``remote_ok``, while the rest act here. The tick
            loop is the same, so are the episodes.

    Raises:
        ValueError: A seat with no policy, or per-episode lists whose lengths do not match.
        RuntimeError: A policy returned a number of replies different from the observations.
        TypeError: A policy returned a reply that is not a ``str``.
    """
    seed_list = _seed_list(seeds, seed)
    n = len(seed_list)
    maps = _per_episode(policies, n, "policies", Mapping)
    option_list = _per_episode(options, n, "options", Mapping, allow_none=True)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"collect: batch_size must be an integer >= 1, got {batch_size!r}.")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"collect: max_steps must be an integer >= 1, got {max_steps!r}.")
    build, env_id, kwargs = _env_factory(make_env, env_kwargs)
    if n == 0:
        return []
    probe = build()
    try:
        env_id = env_id or probe.unwrapped.metadata.get("name", type(probe.unwrapped).__name__)
        _check_policies(maps, probe)
        check_option_keys(probe, option_list, "collect: options")
        possible = [(a, _role(probe, a)) for a in probe.possible_agents]
    except BaseException:
        _close(probe)
        raise
    if seed is not None:
        _reseed(maps, seed)
    by_key, seats = _seats(maps, possible)
    if executor is None:
        envs: Envs = LocalEnvs(build, env_id, kwargs, max_steps, first=probe)  # the probe serves the first slot
    else:
        _close(probe)
        envs = executor.open(build, env_id, kwargs, max_steps, by_key)
    return _tick_loop(envs, by_key, [Job(0, i, seed_list[i], option_list[i], seats[i]) for i in range(n)],
                      min(batch_size, n), progress)


# ---- the tick loop -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Job:
    """One episode to play: on ``slot``, the ``index``-th of the collection, with its env seed, reset options and
    seats (agent or role -> (policy key, policy name)); every field is plain data."""

    slot: int
    index: int
    seed: int | None
    options: Mapping[str, Any] | None
    seats: Mapping[str, tuple[int, str]]


@dataclass(frozen=True, slots=True)
class Waiting:
    """An episode awaiting a reply: the agent whose turn it is, what it observes, and the key of its policy."""

    agent: str
    observation: Observation
    key: int


@dataclass(frozen=True, slots=True)
class Failure:
    """A policy call that raised for one observation: the traceback, which ends that observation's episode."""

    error: str


Answer = Reply | str | Failure
"""What a policy gave one observation: a reply, or the failure that ends its episode."""

Outcome = Waiting | Episode
"""What an env slot reports after a start or a step: its episode awaits a reply, or ended with this record."""


class Envs(Protocol):
    """The envs of one collection, in numbered slots: what :func:`_tick_loop` drives, in this process
    (:class:`LocalEnvs`) or elsewhere (:class:`~llm_zoo.trainers.executors.RayExecutor`'s actors).

    Each slot holds one env and runs one episode at a time; an env that raised is replaced by a fresh
    one at its slot's next start. ``hosted`` are the keys of the policies that act where the envs are
    (the rest act in the caller's process).
    """

    hosted: Collection[int]

    def start(self, jobs: Sequence[Job]) -> list[tuple[int, Outcome]]:
        """Reset each job's slot for its episode and advance it to its first reply (or its end)."""
        ...

    def step(self, moves: Sequence[tuple[int, Answer]]) -> list[tuple[int, Outcome]]:
        """Step each slot with its reply, or end its episode failed with the policy's failure."""
        ...

    def act(self, calls: Mapping[int, list[Observation]]) -> Callable[[], tuple[dict[int, list[Answer]],
                                                                               list[tuple[int, Outcome]]]]:
        """Start one batched call of each hosted policy; the returned function waits for the answers (by key),
        and for the records of any episode lost meanwhile."""
        ...

    def release(self, slots: Sequence[int]) -> list[tuple[int, str]]:
        """Close the envs of slots that will run no more episodes; return each ``close()`` that raised."""
        ...

    def finish(self) -> None:
        """Bring the hosted policies' state home, after a collection that ran to its end."""
        ...

    def close(self) -> None:
        """Close every env still open (whatever raised meanwhile)."""
        ...


class Executor(Protocol):
    """Where a collection's envs run, other than this process (``collect``'s ``executor``)."""

    def open(self, build: Callable[[], AECEnv], env_id: str, env_kwargs: Mapping[str, Any], max_steps: int,
             policies: Mapping[int, Policy]) -> Envs:
        """Open the collection's env slots, with ``policies`` (key -> policy): it hosts those it may."""
        ...


def _tick_loop(envs: Envs, policies: Mapping[int, Policy], jobs: Sequence[Job], n_slots: int,
               progress: bool | str) -> list[Episode]:
    """Play ``jobs`` on ``n_slots`` slots of ``envs``, one batched call per policy per tick; return the records.

    The live episodes keep an order (a slot's next episode takes the place of the one it ended), and
    each tick's batches follow it. Free slots take queued episodes in slot order, each until one awaits
    a reply; an episode that ends at its start frees its slot for the next. So the batches depend
    on the jobs alone, not on where the envs run.
    """
    n = len(jobs)
    results: list[Episode | None] = [None] * n
    queue = iter(jobs)
    index_of: dict[int, int] = {}  # slot -> the episode it runs
    last_of: dict[int, int] = {}  # slot -> the episode it ran last
    pending: dict[int, Waiting] = {}
    bar = _progress_bar(progress, n)

    def fold(outcomes: list[tuple[int, Outcome]]) -> None:
        for slot, outcome in outcomes:
            if type(outcome) is Waiting:
                pending[slot] = outcome
                continue
            pending.pop(slot, None)
            index = last_of[slot] = index_of.pop(slot)
            results[index] = outcome  # type: ignore[assignment]
            if bar is not None:
                bar.update(1)

    def refill(free: list[int]) -> list[int]:
        """Start queued episodes on ``free`` slots until each awaits a reply; return those slots, in episode order.

        A round deals one episode to each free slot; the slots whose episodes ended at once take the next
        round. The episodes that await a reply are the first ones of the queue, as if each slot in turn had
        taken episodes until one waited, and they take their places in that order.
        """
        waiting: list[tuple[int, int]] = []
        while free:
            dealt = []
            for slot in free:
                job = next(queue, None)
                if job is None:
                    break
                index_of[slot] = job.index
                dealt.append(Job(slot, job.index, job.seed, job.options, job.seats))
            if len(dealt) < len(free):  # the queue is empty: these slots' envs are done
                for slot, problem in envs.release(free[len(dealt):]):
                    record = results[last_of[slot]]
                    assert record is not None
                    record.error = _noted(record.error, _CLOSE_NOTE + problem)
            if not dealt:
                break
            fold(envs.start(dealt))
            waiting += [(job.index, job.slot) for job in dealt if job.slot in pending]
            free = [job.slot for job in dealt if job.slot not in index_of]
        return [slot for _, slot in sorted(waiting)]

    paused = _pause_collector()
    try:
        live = refill(list(range(n_slots)))
        while live:
            if paused and gc.get_count()[0] >= _YOUNG_LIMIT:
                gc.collect(0)
            # GATHER: every live episode's pending observation, grouped by the policy serving its agent.
            groups: dict[int, list[int]] = {}
            for slot in live:
                groups.setdefault(pending[slot].key, []).append(slot)
            # ACT: one batched call per policy, the hosted ones where the envs are, side by side with the rest.
            hosted = {key: [pending[s].observation for s in slots] for key, slots in groups.items()
                      if key in envs.hosted}
            wait = envs.act(hosted) if hosted else None
            answers: dict[int, Answer] = {}
            for key, slots in groups.items():
                if key not in hosted:
                    answers.update(zip(slots, _act(policies[key], [pending[s].observation for s in slots])))
            if wait is not None:
                replies, lost = wait()
                fold(lost)
                for key, batch in replies.items():
                    answers.update(zip(groups[key], batch))
            # STEP: each env with its reply; an ended episode's slot takes the next, in its place.
            fold(envs.step([(slot, answers[slot]) for slot in live if slot in answers and slot in pending]))
            kept = [slot in pending for slot in live]
            new = iter(refill([slot for slot in live if slot not in index_of]))
            live = [s for s in (slot if keep else next(new, None) for slot, keep in zip(live, kept))
                    if s is not None]
        envs.finish()
    finally:
        if paused:
            if not gc.get_freeze_count():  # (a caller's own freeze is theirs to undo)
                gc.freeze()  # with unfreeze: the collection's objects to the oldest generation
                gc.unfreeze()
            gc.enable()
        envs.close()  # only envs left open when a policy broke its contract or the caller interrupted
        if bar is not None:
            bar.close()
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]


class LocalEnvs:
    """Env slots in this process: the :class:`Envs` that ``collect`` steps itself, and that each Ray actor runs.

    Args:
        build: Makes a fresh env.
        env_id, env_kwargs: What each episode's record names.
        max_steps: ``collect``'s ``max_steps``.
        players: Key -> the policies hosted here (``act`` calls them).
        first: An env already built, for the first slot.
    """

    def __init__(self, build: Callable[[], AECEnv], env_id: str, env_kwargs: Mapping[str, Any], max_steps: int,
                 players: Mapping[int, Policy] | None = None, first: AECEnv | None = None) -> None:
        self.build, self.env_id, self.kwargs, self.max_steps = build, env_id, env_kwargs, max_steps
        self.players = dict(players or {})
        self.hosted = set(self.players)
        self.envs: dict[int, AECEnv | None] = {} if first is None else {0: first}
        self.runs: dict[int, _Run] = {}

    def start(self, jobs: Sequence[Job]) -> list[tuple[int, Outcome]]:
        out: list[tuple[int, Outcome]] = []
        for job in jobs:
            slot = job.slot
            env = self.envs.get(slot)
            if env is None:
                try:
                    env = self.envs[slot] = self.build()
                except Exception:
                    out.append((slot, Episode(
                        env_id=self.env_id, env_kwargs=self.kwargs, seed=job.seed, options=job.options,
                        failed=True, error="make_env() raised building a fresh env for this episode:\n"
                        + traceback.format_exc())))
                    continue
            seats = {who: _Seat(key, name) for who, (key, name) in job.seats.items()}
            run = self.runs[slot] = _Run(env, job.index, job.seed, job.options, seats, time.perf_counter())
            try:
                env.reset(seed=job.seed, options=None if job.options is None else dict(job.options))
                run.setup()
                waiting = run.advance(self.max_steps)
            except Exception:
                out.append((slot, self._finish(slot, traceback.format_exc(), broken=True)))
                continue
            out.append((slot, self._waiting(run) if waiting else self._finish(slot, None)))
        return out

    def step(self, moves: Sequence[tuple[int, Answer]]) -> list[tuple[int, Outcome]]:
        out: list[tuple[int, Outcome]] = []
        for slot, answer in moves:
            if type(answer) is Failure:
                out.append((slot, self._finish(slot, answer.error)))  # the policy failed, not the env: reuse it
                continue
            run = self.runs[slot]
            try:
                run.play(answer)  # type: ignore[arg-type]
                waiting = run.advance(self.max_steps)
            except _TooLong as exc:
                out.append((slot, self._finish(slot, str(exc))))  # the env is sound, only slow to end: reuse it
            except Exception:
                out.append((slot, self._finish(slot, traceback.format_exc(), broken=True)))
            else:
                out.append((slot, self._waiting(run) if waiting else self._finish(slot, None)))
        return out

    def act(self, calls: Mapping[int, list[Observation]]) -> Callable[[], tuple[dict[int, list[Answer]],
                                                                               list[tuple[int, Outcome]]]]:
        answers = {key: _act(self.players[key], observations) for key, observations in calls.items()}
        return lambda: (answers, [])

    def release(self, slots: Sequence[int]) -> list[tuple[int, str]]:
        out = []
        for slot in slots:
            env = self.envs.pop(slot, None)
            problem = None if env is None else _close(env)
            if problem is not None:
                out.append((slot, problem))
        return out

    def finish(self) -> None:
        pass  # the hosted players are the caller's own objects

    def close(self) -> None:
        for env in self.envs.values():
            if env is not None:
                _close(env)
        self.envs, self.runs = {}, {}

    def _waiting(self, run: _Run) -> Waiting:
        return Waiting(run.agent, run.observation, run.policy_of(run.agent).key)

    def _finish(self, slot: int, error: str | None, *, broken: bool = False) -> Episode:
        """End the slot's episode; a ``broken`` env (its state is not trusted) is closed, for a fresh one."""
        run = self.runs.pop(slot)
        try:
            record = run.record(self.env_id, self.kwargs, error)
        except Exception:  # an env's infos that cannot even be turned into text: keep the rest
            run.infos = {}
            record = run.record(self.env_id, self.kwargs, (f"{error}\n" if error else "")
                                + "the episode's record could not be built; its infos are left out:\n"
                                + traceback.format_exc())
        if broken:
            problem = _close(run.env)
            self.envs[slot] = None
            if problem is not None:
                record.error = _noted(record.error, _CLOSE_NOTE + problem)
        return record


class MemoEnvs:
    """Env slots that replay memoised transitions: the :class:`Envs` of :class:`MemoExecutor`.

    For an env whose episode is a pure function of what ``reset`` draws and of the reply texts (its
    raw env's ``opening(seed, options)`` names that draw, e.g.
    :meth:`~llm_zoo.envs.poker.PokerMatch.opening`: every hand's cards), each state an episode can
    reach is the pair (opening, replies so far). The first episode to reach a state plays it on a
    real env, replayed from ``reset`` as :class:`LocalEnvs` plays it (:class:`_Run`), and the memo
    keeps what the tick loop and the record need: whose turn, the observation, the step, and at the
    end every turn's reward, the returns and the infos. Later episodes walk the memo: no env steps,
    resets or observation copies, and the same records (a test plays both on the same seeds). So the
    tick loop, the batches and the policies' draws are those of :class:`LocalEnvs`.

    Measured on the Kuhn main job (docs/kuhn_selfplay.md, section 14): the envs' and the records'
    share of a rollout of 1024 hands, 115 of its 193 ms of CPU, falls to about 30 ms.

    Records share what their states share (each state's canonical observation; an end's roles, returns
    and infos; the env's keywords): read-only by convention, as the trainer reads them. Policies are
    shown each state's messages as read-only views (``MappingProxyType``), the same tuple every time,
    which their prompt memo finds by identity. A policy failure, an env that raises and an episode
    past ``max_steps`` end as on :class:`LocalEnvs`, by a replay of the episode to that point.
    """

    def __init__(self, memo: _Memo, build: Callable[[], AECEnv], env_id: str, env_kwargs: Mapping[str, Any],
                 max_steps: int) -> None:
        self.memo, self.build, self.env_id, self.kwargs, self.max_steps = memo, build, env_id, env_kwargs, max_steps
        self.hosted: set[int] = set()
        self.live: dict[int, _Walk] = {}
        self.canonical_kwargs = jsonable(dict(env_kwargs))
        # each distinct seats mapping of the jobs (the collection seats equal mappings with one object) with the
        # seats found in it and its records' policies by end: looked up once, not once an episode
        self.seatings: dict[int, _Seating] = {}

    def _seating(self, job: Job) -> _Seating:
        found = self.seatings.get(id(job.seats))
        if found is None or found.seats is not job.seats:  # it holds its mapping: no other one takes its id
            found = self.seatings[id(job.seats)] = _Seating(job.seats)
        return found

    def start(self, jobs: Sequence[Job]) -> list[tuple[int, Outcome]]:
        out: list[tuple[int, Outcome]] = []
        opening_of = self.memo.env(self.build).unwrapped.opening
        for job in jobs:
            walk = self.live[job.slot] = _Walk(job, time.perf_counter(), self._seating(job))
            try:
                opening = opening_of(job.seed, job.options)
            except Exception:
                opening = None  # options the env refuses: the replay below fails as reset does
            walk.opening = opening
            node = self.memo.roots.get(opening) if opening is not None else None
            if node is None:
                node = self._visit(walk)
                opening_of = self.memo.env(self.build).unwrapped.opening  # a replay that failed drops the env
                if node is None:
                    out.append((job.slot, self._failed(job.slot)))
                    continue
                if opening is not None:
                    self.memo.roots[opening] = node
            out.append((job.slot, self._arrive(job.slot, node)))
        return out

    def step(self, moves: Sequence[tuple[int, Answer]]) -> list[tuple[int, Outcome]]:
        out: list[tuple[int, Outcome]] = []
        for slot, answer in moves:
            walk = self.live[slot]
            if type(answer) is Failure:
                out.append((slot, self._replayed(slot, answer.error)))
                continue
            walk.answers.append(answer)  # type: ignore[arg-type]
            text = str.__str__(answer)  # type: ignore[arg-type]
            node = walk.nodes[-1].children.get(text)
            if node is None:
                node = self._visit(walk)
                if node is None:
                    out.append((slot, self._failed(slot)))
                    continue
                if walk.opening is not None:
                    walk.nodes[-1].children[text] = node
            out.append((slot, self._arrive(slot, node)))
        return out

    def act(self, calls: Mapping[int, list[Observation]]) -> Callable[[], tuple[dict[int, list[Answer]],
                                                                               list[tuple[int, Outcome]]]]:
        raise RuntimeError("MemoEnvs hosts no policies")

    def release(self, slots: Sequence[int]) -> list[tuple[int, str]]:
        return []  # a slot holds no env of its own

    def finish(self) -> None:
        pass

    def close(self) -> None:
        self.live = {}

    # ---- the walk ---------------------------------------------------------------------------

    def _arrive(self, slot: int, node: _Node) -> Outcome:
        walk = self.live[slot]
        if node.end is None:
            walk.nodes.append(node)
            key = walk.seat(node.agent, node.role)[0]
            waiting = node.waiting.get(key)  # what a state awaits from one policy: the same (frozen) every time
            if waiting is None:
                waiting = node.waiting[key] = Waiting(node.agent, node.observation, key)
            return waiting
        del self.live[slot]
        end, job, seating = node.end, walk.job, walk.seating
        turns = [_turn(state, answer, reward, walk.seat(state.agent, state.role)[1])
                 for state, answer, reward in zip(walk.nodes, walk.answers, end.rewards)]
        policies = seating.policies.get(id(end))  # ends live in the memo: their ids are theirs
        if policies is None:
            policies = seating.policies[id(end)] = {a: walk.seat(a, r)[1] for a, r in end.roles.items()}
        # Episode(...) without its canonical copies: the memo's parts are canonical already, and shared (read-only)
        record = Episode.__new__(Episode)
        record.env_id, record.env_kwargs, record.seed = self.env_id, self.canonical_kwargs, job.seed
        record.options = None if job.options is None else jsonable(dict(job.options))
        record.roles, record.policies = end.roles, policies
        record.turns, record.returns, record.infos = turns, end.returns, end.infos
        record.failed, record.error, record.wall_time = False, None, time.perf_counter() - walk.started
        return record

    def _visit(self, walk: _Walk) -> _Node | None:
        """Replay the walk's episode on a real env to its newest state; return that state (None: it failed)."""
        run = walk.run = self._run(walk)
        try:
            run.env.reset(seed=walk.job.seed, options=None if walk.job.options is None else dict(walk.job.options))
            run.setup()
            waiting = run.advance(self.max_steps)
            for answer in walk.answers:
                assert waiting, "a reply to an episode that had ended"
                run.play(answer)
                waiting = run.advance(self.max_steps)
        except _TooLong as exc:
            walk.error = str(exc)
            return None
        except Exception:
            walk.error = traceback.format_exc()
            self.memo.drop_env()  # its state is not trusted: a fresh one for the next replay
            return None
        self.memo.size += 1
        if waiting:
            # policies see read-only messages: the same state shows the same conversation to every episode
            shown = run.observation
            if type(shown) is dict and type(shown.get("messages")) is tuple:
                shown = {**shown, "messages": tuple(MappingProxyType(m) for m in shown["messages"])}
            return _Node(run.agent, run.roles.get(run.agent, run.agent), shown, jsonable(run.observation), run.steps)
        infos = {a: i for a, i in run.infos.items() if isinstance(i, Mapping)}
        roles = {str(a): str(r) for a, r in run.roles.items()}
        returns = {str(a): float(r) for a, r in run.returns.items()}
        return _Node("", "", {}, {}, run.steps, _End(roles, [t.reward for t in run.turns], returns,
                                                     {str(a): jsonable(dict(i)) for a, i in infos.items()}))

    def _run(self, walk: _Walk) -> _Run:
        seats = {who: _Seat(key, name) for who, (key, name) in walk.job.seats.items()}
        return _Run(self.memo.env(self.build), walk.job.index, walk.job.seed, walk.job.options, seats, walk.started)

    def _failed(self, slot: int) -> Episode:
        """The record of an episode whose replay failed: its run as far as it got, as :class:`LocalEnvs` keeps it."""
        walk = self.live.pop(slot)
        assert walk.run is not None
        return _record(walk.run, self.env_id, self.kwargs, walk.error)

    def _replayed(self, slot: int, error: str) -> Episode:
        """End the slot's episode with a policy's failure: replayed to its newest state, then recorded."""
        walk = self.live[slot]
        if self._visit(walk) is None:
            return self._failed(slot)
        del self.live[slot]
        assert walk.run is not None
        return _record(walk.run, self.env_id, self.kwargs, error)


class MemoExecutor:
    """The trainer's executor for envs that name their draw (``opening``): :class:`MemoEnvs` over one memo kept
    across collections, so later steps replay what earlier ones met; other envs get :class:`LocalEnvs`.

    The memo belongs to one env (name and keywords); a collection of another starts it afresh. It holds
    at most ``limit`` states and starts over when full (a policy that writes free text meets new states).
    """

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self.memo = _Memo()
        self.key: tuple[str, str] | None = None
        self.plain = False
        """Whether the env of ``key`` names no draw: its collections step real envs."""

    def open(self, build: Callable[[], AECEnv], env_id: str, env_kwargs: Mapping[str, Any], max_steps: int,
             policies: Mapping[int, Policy]) -> Envs:
        key = (env_id, repr(sorted(env_kwargs.items())))
        if key != self.key or self.memo.size > self.limit:
            self.memo.drop_env()
            self.memo, self.key, self.plain = _Memo(), key, False
        if not self.plain and not callable(getattr(self.memo.env(build).unwrapped, "opening", None)):
            self.memo.drop_env()  # the probe holds nothing this env's collections need
            self.plain = True
        if self.plain:
            return LocalEnvs(build, env_id, env_kwargs, max_steps)
        return MemoEnvs(self.memo, build, env_id, env_kwargs, max_steps)

    def close(self) -> None:
        self.memo.drop_env()


class _Memo:
    """The states of one env met so far (``roots``: opening -> first state), and the real env that replays them."""

    def __init__(self) -> None:
        self.roots: dict[Hashable, _Node] = {}
        self.size = 0
        self._env: AECEnv | None = None

    def env(self, build: Callable[[], AECEnv]) -> AECEnv:
        if self._env is None:
            self._env = build()
        return self._env

    def drop_env(self) -> None:
        if self._env is not None:
            _close(self._env)
            self._env = None


class _End:
    """A memoised episode's end: its agents' roles, each turn's reward, the returns and the infos (canonical)."""

    __slots__ = ("infos", "returns", "rewards", "roles")

    def __init__(self, roles: dict[str, str], rewards: list[float], returns: dict[str, float],
                 infos: dict[str, Any]) -> None:
        self.roles, self.rewards, self.returns, self.infos = roles, rewards, returns, infos


class _Node:
    """A memoised state: the agent to reply, what it is shown (as the env gave it, and canonical for the records),
    the env steps before its turn, the states each reply text leads to; or the episode's end."""

    __slots__ = ("agent", "canonical", "children", "end", "observation", "role", "step", "waiting")

    def __init__(self, agent: str, role: str, observation: Observation, canonical: dict[str, Any], step: int,
                 end: _End | None = None) -> None:
        self.agent, self.role, self.observation, self.canonical, self.step = agent, role, observation, canonical, step
        self.children: dict[str, _Node] = {}
        self.end = end
        self.waiting: dict[int, Waiting] = {}
        """The state's :class:`Waiting` by policy key."""


class _Seating:
    """One seats mapping of a collection's jobs, the (policy key, name) found in it by (agent, role), and its
    records' ``policies`` by episode end (shared by those records, read-only as the rest of a record's parts)."""

    __slots__ = ("found", "policies", "seats")

    def __init__(self, seats: Mapping[str, tuple[int, str]]) -> None:
        self.seats = seats
        self.found: dict[tuple[str, str], tuple[int, str]] = {}
        self.policies: dict[int, dict[str, str]] = {}


class _Walk:
    """One episode on a :class:`MemoEnvs` slot: its job, the states it passed and the replies it gave."""

    __slots__ = ("answers", "error", "job", "nodes", "opening", "run", "seating", "started")

    def __init__(self, job: Job, started: float, seating: _Seating) -> None:
        self.job, self.started, self.seating = job, started, seating
        self.nodes: list[_Node] = []
        self.answers: list[Reply | str] = []
        self.opening: Hashable | None = None
        self.run: _Run | None = None
        self.error: str | None = None

    def seat(self, agent: str, role: str) -> tuple[int, str]:
        """The (policy key, policy name) serving ``agent``: its name's seat, else its role's (as :func:`_resolve`)."""
        found = self.seating.found.get((agent, role))
        if found is None:
            found = self.seating.found[agent, role] = _resolve(self.job.seats, agent, role)
        return found


def _turn(node: _Node, answer: Reply | str, reward: float, seat_name: str) -> Turn:
    """A memoised state's turn with this episode's reply: what :meth:`_Run.play` records, the reward its run gave."""
    records = (answer.prompt_ids, answer.completion_ids, answer.logprobs) if type(answer) is Reply else None
    policy = getattr(answer, "policy", None) or seat_name
    if records is None or not (type(records[0]) in _LIST_OR_NONE and type(records[1]) in _LIST_OR_NONE
                               and type(records[2]) in _LIST_OR_NONE):
        turn = Turn(agent=node.agent, role=node.role, step=node.step, observation=node.canonical, reply=answer,
                    prompt_ids=getattr(answer, "prompt_ids", None), completion_ids=getattr(answer, "completion_ids", None),
                    logprobs=getattr(answer, "logprobs", None), policy=policy)
    else:
        turn = Turn.__new__(Turn)  # Turn.unchecked without its canonical copy: the state's is canonical already
        turn.agent, turn.role, turn.step, turn.reply = node.agent, node.role, node.step, str.__str__(answer)
        turn.observation = node.canonical
        prompt, completion, logprobs = records
        turn.prompt_ids = None if prompt is None else prompt.copy()
        turn.completion_ids = None if completion is None else completion.copy()
        turn.logprobs = None if logprobs is None else logprobs.copy()
        turn.policy = str(policy)
    turn.reward = reward
    return turn


def _record(run: _Run, env_id: str, env_kwargs: Mapping[str, Any], error: str | None) -> Episode:
    """The run's record, as :meth:`LocalEnvs._finish` builds it (infos that cannot become text left out)."""
    try:
        return run.record(env_id, env_kwargs, error)
    except Exception:
        run.infos = {}
        return run.record(env_id, env_kwargs, (f"{error}\n" if error else "")
                          + "the episode's record could not be built; its infos are left out:\n" + traceback.format_exc())


# ---- helpers -------------------------------------------------------------------------------


def _pause_collector() -> bool:
    """Stop the cyclic garbage collector's automatic runs; True if the caller must restart them.

    Collections are triggered by allocations, and a turn allocates about as much at batch 1 as at
    batch 64, where batch 64's turns are otherwise ten times cheaper; so the collector's walks cost
    batch 64 a far larger share of its time (measured in ``benchmarks/rollout_throughput.py``):
    full collections over the ~350k objects that torch and transformers hold cost 0.05 ms a turn,
    and the young collections' walks over the records the collection builds, all of them alive
    until it returns, 0.007 ms more (14% of what a turn costs outside the model). Those walks find
    nothing to free: a Kuhn collection with a transformers policy leaves no cyclic garbage
    (reference counting frees the rest). So that cycles a policy or env does make (a failed
    request's traceback) cannot pile up in a long collection, ``collect`` still runs a young
    collection, which walks only the objects made since the last one, once ``_YOUNG_LIMIT`` of
    them are waiting. At the end, what the collection made goes straight to the oldest generation
    (``gc.freeze`` then ``gc.unfreeze``, both O(1)), where the young collections would have moved
    the records after walking them once or twice; garbage among it is found by the next full
    collection. Nothing is done when the collector is off already.
    """
    if not gc.isenabled():
        return False
    gc.disable()
    return True


_YOUNG_LIMIT = 200_000
"""Objects made since the last collection at which a paused collector runs a young-generation
collection anyway (see :func:`_pause_collector`): a few thousand Kuhn episodes."""


_LIST_OR_NONE = (list, type(None))
"""The types a ``Reply``'s records may have for the collector to copy them as they are."""


class _TooLong(Exception):  # noqa: N818 - names the situation, like the env's InvalidReply
    """An episode ran past ``collect``'s ``max_steps``."""


class _Seat:
    """A policy's stand-in where the envs are: its key in the collection and the name episodes record."""

    __slots__ = ("key", "name")

    def __init__(self, key: int, name: str) -> None:
        self.key, self.name = key, name


_CLOSE_NOTE = "after this episode ended, its env's close() raised:\n"


def _noted(error: str | None, note: str) -> str:
    return note if error is None else f"{error}\n{note}"


@dataclass(slots=True)  # slots: its fields are read and written at every turn
class _Run:
    """One episode in progress on one env."""

    env: AECEnv
    index: int
    seed: int | None
    options: Mapping[str, Any] | None
    policies: Mapping[str, _Seat]
    started: float
    steps: int = 0
    agent: str = ""
    observation: Observation = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    turns: list[Turn] = field(default_factory=list)
    returns: dict[str, float] = field(default_factory=dict)
    infos: dict[str, Any] = field(default_factory=dict)
    last_turn: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    def setup(self) -> None:
        """Read the episode's agents and roles after ``reset``."""
        agents = self.env.agents
        role_of = getattr(self.env.unwrapped, "role_of", None)  # as _role reads it, once for all agents
        self.roles = {a: a if role_of is None else role_of(a) for a in agents}
        self.returns = dict.fromkeys(agents, 0.0)

    def policy_of(self, agent: str) -> _Seat:
        return _resolve(self.policies, agent, self.roles.get(agent, agent))

    def advance(self, max_steps: int) -> bool:
        """Collect rewards and step dead agents until a live agent awaits a reply (True) or the episode ends."""
        env = self.env
        while env.agents:
            agent = env.agent_selection
            if agent not in self.roles:  # an agent that joined mid-episode
                self.roles[agent] = _role(env, agent)
            _, reward, terminated, truncated, info = env.last(observe=False)
            reward = float(reward)
            self.returns[agent] = self.returns.get(agent, 0.0) + reward
            if agent in self.last_turn:
                self.turns[self.last_turn[agent]].reward += reward
            self.infos[agent] = info  # the final one is read at the agent's dead step
            if terminated or truncated:
                env.step(None)
                self.steps += 1
                continue
            if self.steps >= max_steps:
                raise _TooLong(
                    f"the episode did not end within max_steps={max_steps} env steps; raise collect(max_steps=...) "
                    "or give the env a step cap of its own."
                )
            self.agent, self.observation = agent, env.observe(agent)
            return True
        return False

    def play(self, reply: Reply | str) -> None:
        """Record the pending agent's turn and step the env with its reply."""
        agent = self.agent
        self.last_turn[agent] = len(self.turns)
        role, policy = self.roles.get(agent, agent), getattr(reply, "policy", None) or _name(self.policy_of(agent))
        records = (reply.prompt_ids, reply.completion_ids, reply.logprobs) if type(reply) is Reply else None
        if records is not None and type(self.observation) is dict and all(type(r) in _LIST_OR_NONE for r in records):
            # a Reply keeps its records as lists of int and float (its docstring): copies are enough
            turn = Turn.unchecked(
                agent, role, self.steps, self.observation, reply, *(None if r is None else r.copy() for r in records),
                policy,
            )
        else:
            turn = Turn(
                agent=agent,
                role=role,
                step=self.steps,
                observation=self.observation,
                reply=reply,
                prompt_ids=getattr(reply, "prompt_ids", None),
                completion_ids=getattr(reply, "completion_ids", None),
                logprobs=getattr(reply, "logprobs", None),
                policy=policy,
            )
        self.turns.append(turn)
        self.env.step(reply)
        self.steps += 1

    def record(self, env_id: str, env_kwargs: Mapping[str, Any], error: str | None) -> Episode:
        return Episode(
            env_id=env_id,
            env_kwargs=env_kwargs,  # Episode keeps canonical copies of both
            seed=self.seed,
            options=self.options,
            roles=self.roles,
            policies={a: _name(self.policy_of(a)) for a in self.roles},
            turns=self.turns,
            returns=self.returns,
            infos={a: i for a, i in self.infos.items() if isinstance(i, Mapping)},
            failed=error is not None,
            error=error,
            wall_time=time.perf_counter() - self.started,
        )


def _seed_list(seeds: int | Sequence[int | None], seed: int | None) -> list[int | None]:
    if isinstance(seeds, bool):
        raise TypeError(f"collect: seeds must be a count or a sequence of env seeds, got {seeds!r}.")
    if isinstance(seeds, (int, np.integer)):
        if seeds < 0:
            raise ValueError(f"collect: a count of seeds must be >= 0, got {seeds!r}.")
        base = 0 if seed is None else int(seed)
        return [base + i for i in range(int(seeds))]
    if isinstance(seeds, (str, bytes, Mapping)) or not isinstance(seeds, Sequence):
        raise TypeError(
            f"collect: seeds must be a count or a sequence of env seeds (int or None), got {type(seeds).__name__}."
        )
    out = []
    for i, s in enumerate(seeds):
        if s is not None and (isinstance(s, bool) or not isinstance(s, (int, np.integer))):
            raise TypeError(f"collect: seeds[{i}] must be an int or None, got {s!r}.")
        out.append(None if s is None else int(s))
    return out


def _per_episode(value: Any, n: int, name: str, kind: type, *, allow_none: bool = False) -> list[Any]:
    """Broadcast one ``kind`` value (or None) to ``n`` episodes, or check a sequence of ``n`` of them."""
    if isinstance(value, kind) or (allow_none and value is None):
        return [value] * n
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(
            f"collect: {name} must be a mapping or a sequence of mappings (one per episode), "
            f"got {type(value).__name__}."
        )
    if len(value) != n:
        raise ValueError(
            f"collect: {name} has {len(value)} entries but there are {n} episodes (seeds); "
            f"pass one {name} mapping per episode, or a single mapping for all."
        )
    for i, item in enumerate(value):
        if not (isinstance(item, kind) or (allow_none and item is None)):
            raise TypeError(f"collect: {name}[{i}] must be a mapping, got {type(item).__name__}.")
    return list(value)


def _env_factory(
    make_env: str | Callable[[], AECEnv], env_kwargs: Mapping[str, Any] | None
) -> tuple[Callable[[], AECEnv], str | None, dict[str, Any]]:
    """Return a no-argument env builder, the env id when known from the name, and the kwargs to record."""
    if isinstance(make_env, str):
        import llm_zoo

        kwargs = dict(env_kwargs or {})
        return functools.partial(llm_zoo.make_env, make_env, **kwargs), make_env, kwargs
    if not callable(make_env):
        raise TypeError(
            f"collect: make_env must be a callable returning an AEC env, or an env name such as 'kuhn_poker_v0'; "
            f"got {type(make_env).__name__}."
        )
    if env_kwargs is None:
        env_kwargs = make_env.keywords if isinstance(make_env, functools.partial) else {}
    return make_env, None, dict(env_kwargs)


def _role(env: AECEnv, agent: str) -> str:
    """Return the agent's role from the raw env's ``role_of``, or the agent name where there is none."""
    role_of = getattr(env.unwrapped, "role_of", None)
    return role_of(agent) if role_of is not None else agent


def _resolve(policies: Mapping[str, Any], agent: str, role: str) -> Any:
    if agent in policies:
        return policies[agent]
    if role in policies:
        return policies[role]
    raise ValueError(
        f"collect: no policy for agent {agent!r} (role {role!r}); the policies mapping has keys "
        f"{sorted(policies)}. Map every agent name or its role to a Policy."
    )


def _check_policies(maps: Sequence[PolicyMap], env: AECEnv) -> None:
    """Check that every mapping serves every possible agent with an object that has ``act``."""
    seen: set[tuple] = set()
    objects: set[int] = set()  # a mapping object given for many episodes (maps holds it: its id is its own)
    for i, mapping in enumerate(maps):
        if id(mapping) in objects:
            continue
        objects.add(id(mapping))
        if (content := _content(mapping)) in seen:
            continue
        seen.add(content)
        for agent in env.possible_agents:
            try:
                policy = _resolve(mapping, agent, _role(env, agent))
            except ValueError as exc:
                raise ValueError(f"{exc} (policies[{i}])" if len(maps) > 1 else str(exc)) from None
            if not callable(getattr(policy, "act", None)):
                raise TypeError(
                    f"collect: the policy for {agent!r} must be a Policy (with act(observations)), "
                    f"got {type(policy).__name__}: {repr(policy)[:200]}."
                )


def _seats(maps: Sequence[PolicyMap], possible: Sequence[tuple[str, str]]
           ) -> tuple[dict[int, Policy], list[dict[str, tuple[int, str]]]]:
    """Key every distinct policy (in order of first appearance), and give each episode its seats as plain data:
    agent or role -> (policy key, policy name), for every possible agent and every key of its mapping (an
    agent that joins mid-episode is served by its name or its role, as in the mapping)."""
    by_key: dict[int, Policy] = {}
    made: dict[tuple, dict[str, tuple[int, str]]] = {}
    of_object: dict[int, tuple[PolicyMap, dict[str, tuple[int, str]]]] = {}  # one mapping object given many times
    out = []
    for mapping in maps:
        known = of_object.get(id(mapping))
        if known is not None:
            out.append(known[1])
            continue
        seats = made.get(content := _content(mapping))
        if seats is None:
            seats = made[content] = {}
            for agent, role in possible:
                policy = _resolve(mapping, agent, role)
                by_key.setdefault(id(policy), policy)
                seats[agent] = (id(policy), _name(policy))
            for who, policy in mapping.items():
                by_key.setdefault(id(policy), policy)
                seats.setdefault(who, (id(policy), _name(policy)))
        of_object[id(mapping)] = (mapping, seats)  # held: its id stays its own
        out.append(seats)
    return by_key, out


def _distinct_objects(maps: Sequence[PolicyMap]) -> list[PolicyMap]:
    """The mapping objects of ``maps`` (a mapping given for many episodes once), in order of first appearance."""
    return list({id(m): m for m in maps}.values())


def _content(mapping: PolicyMap) -> tuple:
    """What a policy mapping says, as a key: (agent or role, the policy's identity) pairs. A step's episodes each
    get a mapping of their own, mostly equal: each distinct one is checked and seated once."""
    return tuple([(who, id(policy)) for who, policy in mapping.items()])


def _reseed(maps: Sequence[PolicyMap], seed: int) -> None:
    """Reseed every distinct policy, in order of first appearance, from independent child seeds."""
    distinct: dict[int, Policy] = {}
    for mapping in _distinct_objects(maps):
        for policy in mapping.values():
            distinct.setdefault(id(policy), policy)
    children = np.random.SeedSequence(seed).spawn(len(distinct))
    for policy, child in zip(distinct.values(), children):
        policy.seed(int(child.generate_state(1)[0]))


def _name(policy: Policy) -> str:
    return str(getattr(policy, "name", None) or type(policy).__name__)


def _act(policy: Policy, observations: list[Observation]) -> list[Reply | str | Failure]:
    """Call ``policy`` on the batch; if it raises, retry one observation at a time.

    A :class:`PromptTooLong` fails the rows it names, with its message (their episodes end as failed,
    as an episode past ``max_steps`` does, and are scored as failures), and the rest go on as one batch.
    """
    try:
        replies = policy.act(observations)
    except PromptTooLong as exc:
        rows = set(exc.rows)
        if not rows or not rows <= set(range(len(observations))):
            raise RuntimeError(f"policy {_name(policy)!r} raised PromptTooLong naming rows {sorted(rows)[:10]} of a "
                               f"batch of {len(observations)}; it must name some of the batch's rows") from exc
        rest = [i for i in range(len(observations)) if i not in rows]
        answers = dict(zip(rest, _act(policy, [observations[i] for i in rest]) if rest else []))
        return [answers[i] if i in answers else Failure(f"the prompt was too long for the policy: {exc}")
                for i in range(len(observations))]
    except Exception:
        if len(observations) == 1:
            return [Failure(traceback.format_exc())]
    else:
        return _checked(policy, replies, len(observations))
    out: list[Reply | str | Failure] = []
    for obs in observations:
        try:
            replies = policy.act([obs])
        except Exception:
            out.append(Failure(traceback.format_exc()))
        else:
            out.extend(_checked(policy, replies, 1))
    return out


def _checked(policy: Policy, replies: Any, expected: int) -> list[Reply | str]:
    if not isinstance(replies, Sequence) or isinstance(replies, str) or len(replies) != expected:
        got = f"{len(replies)} replies" if isinstance(replies, Sequence) else f"a {type(replies).__name__}"
        raise RuntimeError(
            f"policy {_name(policy)!r} ({type(policy).__name__}) returned {got} for {expected} observations; "
            "act(observations) must return a list with exactly one reply per observation."
        )
    for reply in replies:
        if not isinstance(reply, str):
            raise TypeError(
                f"policy {_name(policy)!r} ({type(policy).__name__}) returned a {type(reply).__name__} "
                f"reply ({repr(reply)[:200]}); replies must be str (a Reply)."
            )
    return list(replies)


def _close(env: AECEnv) -> str | None:
    """Close ``env``; return the traceback if ``close()`` raised, else None."""
    try:
        env.close()
    except Exception:
        return traceback.format_exc()
    return None


def _progress_bar(progress: bool | str, total: int) -> Any:
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError as err:
        raise ImportError(
            "collect(progress=...) needs tqdm; install it with `pip install tqdm` (in the `llm` extra) "
            "or pass progress=False."
        ) from err
    return tqdm(total=total, desc=progress if isinstance(progress, str) else "collect", unit="episode")
