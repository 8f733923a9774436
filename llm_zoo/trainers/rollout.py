"""Rollouts: many env instances side by side, one batched call per policy per tick.

:func:`collect` plays a list of episodes (one per env seed) and returns their :class:`Episode`
records. It keeps up to ``batch_size`` envs live at once. At each tick it gathers every live env's
pending (agent, observation), groups them by the policy serving that agent, makes one
``policy.act(observations)`` call per policy, and steps each env with its reply; an env whose
episode ends is reset for the next seed. So a model-backed policy samples ``batch_size`` replies
per forward pass instead of one, which is where the throughput comes from
(``benchmarks/rollout_throughput.py`` measures it).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pettingzoo import AECEnv

from llm_zoo.episode import Episode, Turn
from llm_zoo.policy import Observation, Policy, PromptTooLong, Reply

__all__ = ["collect"]

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
    executor: Any = None,
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
        executor: Where the envs run: None steps them in this process; an executor such as
            :class:`~llm_zoo.trainers.executors.RayExecutor` steps them (and the scripted players)
            in its workers while model policies act here, giving the same episodes.

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
    if executor is not None:
        return executor.collect(build, env_id, kwargs, maps, seed_list, option_list, batch_size=batch_size,
                                seed=seed, max_steps=max_steps, progress=progress)

    envs = [build()]
    try:
        env_id = env_id or envs[0].unwrapped.metadata.get("name", type(envs[0].unwrapped).__name__)
        _check_policies(maps, envs[0])
    except BaseException:
        _close(envs[0])
        raise
    if seed is not None:
        _reseed(maps, seed)
    bar = _progress_bar(progress, n)
    results: list[Episode | None] = [None] * n
    queue = iter(range(n))
    live: list[_Run] = []

    def finish(run: _Run, error: str | None = None) -> None:
        try:
            results[run.index] = run.record(env_id, kwargs, error)
        except Exception:  # an env's infos that cannot even be turned into text: keep the rest
            run.infos = {}
            results[run.index] = run.record(
                env_id, kwargs, (f"{error}\n" if error else "")
                + "the episode's record could not be built; its infos are left out:\n" + traceback.format_exc())
        if bar is not None:
            bar.update(1)

    def close(env: AECEnv, last: _Run | None) -> None:
        """Close ``env``; if that raises, note it on the record of ``last``, the episode it ran last."""
        problem = _close(env)
        if problem is not None and last is not None:
            record = results[last.index]
            assert record is not None
            note = f"after this episode ended, its env's close() raised:\n{problem}"
            record.error = note if record.error is None else f"{record.error}\n{note}"

    def start(env: AECEnv | None, last: _Run | None = None) -> _Run | None:
        """Start queued episodes on ``env`` until one awaits a reply (returned) or none are left.

        ``last`` is the episode that just finished on ``env``, if any, for the record of a failing ``close()``.
        """
        for index in queue:
            if env is None:
                try:
                    env = build()
                except Exception:
                    results[index] = Episode(
                        env_id=env_id, env_kwargs=kwargs, seed=seed_list[index], options=option_list[index],
                        failed=True, error="make_env() raised building a fresh env for this episode:\n"
                        + traceback.format_exc())
                    if bar is not None:
                        bar.update(1)
                    continue
            run = _Run(env, index, seed_list[index], option_list[index], maps[index], time.perf_counter())
            try:
                env.reset(seed=run.seed, options=None if run.options is None else dict(run.options))
                run.setup()
                waiting = run.advance(max_steps)
            except Exception:
                finish(run, traceback.format_exc())
                close(env, run)  # its state is not trusted: a fresh one replaces it
                env, last = None, None
                continue
            if waiting:
                return run
            finish(run)
            last = run
        if env is not None:
            close(env, last)
        return None

    paused = _pause_collector()
    try:
        for env in envs + [None] * (min(batch_size, n) - 1):
            run = start(env)
            if run is not None:
                live.append(run)
        while live:
            if paused and gc.get_count()[0] >= _YOUNG_LIMIT:
                gc.collect(0)
            # GATHER: every live env's pending observation, grouped by the policy serving its agent.
            groups: dict[int, tuple[Policy, list[_Run]]] = {}
            for run in live:
                policy = run.policy_of(run.agent)
                groups.setdefault(id(policy), (policy, []))[1].append(run)
            # ACT: one batched call per policy.
            answers: dict[int, Reply | str | _Failure] = {}
            for policy, runs in groups.values():
                for run, answer in zip(runs, _act(policy, [r.observation for r in runs])):
                    answers[id(run)] = answer
            # STEP: each env with its reply, then on to its next live agent or its next episode.
            still: list[_Run] = []
            for run in live:
                answer = answers[id(run)]
                if isinstance(answer, _Failure):
                    finish(run, answer.error)
                    nxt = start(run.env, run)  # the policy failed, not the env: reuse it
                else:
                    try:
                        run.play(answer)
                        waiting = run.advance(max_steps)
                    except _TooLong as exc:
                        finish(run, str(exc))
                        nxt = start(run.env, run)  # the env is sound, only slow to end: reuse it
                    except Exception:
                        finish(run, traceback.format_exc())
                        close(run.env, run)  # its state is not trusted: a fresh one replaces it
                        nxt = start(None)
                    else:
                        if waiting:
                            nxt = run
                        else:
                            finish(run)
                            nxt = start(run.env, run)
                if nxt is not None:
                    still.append(nxt)
            live = still
    finally:
        if paused:
            if not gc.get_freeze_count():  # (a caller's own freeze is theirs to undo)
                gc.freeze()  # with unfreeze: the collection's objects to the oldest generation
                gc.unfreeze()
            gc.enable()
        for run in live:  # only left when a policy broke its contract or the caller interrupted
            _close(run.env)
        if bar is not None:
            bar.close()
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]


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


@dataclass
class _Failure:
    """A policy call that raised for one observation."""

    error: str


@dataclass(slots=True)  # slots: its fields are read and written at every turn
class _Run:
    """One episode in progress on one env."""

    env: AECEnv
    index: int
    seed: int | None
    options: Mapping[str, Any] | None
    policies: PolicyMap
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

    def policy_of(self, agent: str) -> Policy:
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


def _resolve(policies: PolicyMap, agent: str, role: str) -> Policy:
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
    seen: set[int] = set()
    for i, mapping in enumerate(maps):
        if id(mapping) in seen:
            continue
        seen.add(id(mapping))
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


def _reseed(maps: Sequence[PolicyMap], seed: int) -> None:
    """Reseed every distinct policy, in order of first appearance, from independent child seeds."""
    distinct: dict[int, Policy] = {}
    for mapping in maps:
        for policy in mapping.values():
            distinct.setdefault(id(policy), policy)
    children = np.random.SeedSequence(seed).spawn(len(distinct))
    for policy, child in zip(distinct.values(), children):
        policy.seed(int(child.generate_state(1)[0]))


def _name(policy: Policy) -> str:
    return str(getattr(policy, "name", None) or type(policy).__name__)


def _act(policy: Policy, observations: list[Observation]) -> list[Reply | str | _Failure]:
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
        return [answers[i] if i in answers else _Failure(f"the prompt was too long for the policy: {exc}")
                for i in range(len(observations))]
    except Exception:
        if len(observations) == 1:
            return [_Failure(traceback.format_exc())]
    else:
        return _checked(policy, replies, len(observations))
    out: list[Reply | str | _Failure] = []
    for obs in observations:
        try:
            replies = policy.act([obs])
        except Exception:
            out.append(_Failure(traceback.format_exc()))
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
