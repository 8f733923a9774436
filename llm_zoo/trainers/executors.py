"""Where :func:`~llm_zoo.trainers.rollout.collect` runs its envs: in its own process (the default), or in Ray actors.

``collect(..., executor=None)`` steps every env in the caller's process. ``collect(...,
executor=RayExecutor(workers=N))`` keeps the same tick loop in the caller (the learner) but moves
the envs, their sandboxes and the scripted players into N Ray actors (:class:`EnvWorker`), so the
envs whose turns run sandboxed code step in parallel on as many cores or machines as the Ray
cluster has:

- the learner holds ``batch_size`` slots, dealt round-robin over the actors; each slot runs one
  episode at a time, as each of in-process collect's envs does;
- each tick the learner groups the pending observations by policy, in slot order (in-process
  collect's order), calls each *model* policy in its own process (one batched ``act``, the GPU or
  the learner's weights never leave it), and each *scripted* policy in the actor that hosts it
  (one call, the same batch), then sends each actor its slots' replies; the actors step their envs
  side by side and answer with the next observations or the finished episodes;
- only plain data crosses: observations (dicts of text and lists), replies (strings with their
  token lists), ``Episode.to_dict()`` records, and each scripted player's state, which is pickled
  to its host at the start of a collection and back into the learner's object at the end (so a
  player that adapts across collections, as ``proposer_solver``'s adaptive proposer does, keeps
  adapting).

The same arguments give the same episodes as in-process collection: every env is reset with the
same seed, every policy is reseeded the same way, and every policy sees the same batches in the
same order (one exception: an episode that ends at ``reset``, or whose env fails to reset, hands
its slot the next seed one round later than in-process, which can change which batch a later
episode's observations land in). A scripted player runs in an actor only when its class is an
env's (defined under ``llm_zoo.envs`` or the policy contract ``llm_zoo.policy``)
or ``remote(policy)`` says so; any other policy acts in the learner.

Failures stay local, as in-process: an env that raises marks its episode failed and is replaced
inside its actor; an actor that dies (its process crashed or was killed) marks every episode it
was running failed (``error`` says the actor died), and a fresh actor takes its slots and the
scripted players it hosted (from their state at the start of the collection).

``ray`` is an optional dependency (``pip install 'llm_zoo[ray]'``); nothing here imports it until
a :class:`RayExecutor` is made.
"""

from __future__ import annotations

import pickle
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pettingzoo import AECEnv

from llm_zoo.episode import Episode
from llm_zoo.policy import Policy
from llm_zoo.trainers.rollout import (
    _act,
    _check_policies,
    _close,
    _Failure,
    _name,
    _progress_bar,
    _reseed,
    _resolve,
    _role,
    _Run,
    _TooLong,
)

__all__ = ["EXECUTORS", "EnvWorker", "RayExecutor", "make_executor", "scripted_player"]

EXECUTORS = ("local", "ray")
"""The values of the trainer's ``config.executor``."""

_ENV_MODULES = ("llm_zoo.envs.", "llm_zoo.policy")


def scripted_player(policy: Policy) -> bool:
    """True for a policy an env ships (its class is defined in an env's package or the policy contract)."""
    module = type(policy).__module__
    return any(module == m or module.startswith(m) for m in _ENV_MODULES)


def make_executor(kind: str, workers: int) -> RayExecutor | None:
    """Return the executor the trainer's ``config.executor`` names: None (in-process) for local."""
    if kind == "local":
        return None
    if kind == "ray":
        return RayExecutor(workers)
    raise ValueError(f"config.executor must be one of {EXECUTORS}; got {kind!r}")


class _Seat:
    """A policy's stand-in inside an actor: its key in the learner and the name episodes record."""

    __slots__ = ("key", "name")

    def __init__(self, key: int, name: str) -> None:
        self.key, self.name = key, name


class EnvWorker:
    """The body of one Ray actor: some of a collection's env slots, and the scripted players it hosts.

    Every method takes and returns plain data. A slot's result is ``("wait", agent, observation,
    policy key)`` when its episode awaits a reply, or ``("done", episode dict)`` when it ended.
    """

    def __init__(self) -> None:
        self.envs: dict[int, AECEnv | None] = {}
        self.runs: dict[int, _Run] = {}
        self.players: dict[int, Policy] = {}
        self.build: Callable[[], AECEnv] | None = None

    def open(self, build: bytes, env_id: str, env_kwargs: dict[str, Any], max_steps: int,
             players: dict[int, bytes]) -> None:
        """Start a collection: its env factory (pickled) and the scripted players this actor hosts (pickled)."""
        self.close()
        self.build = pickle.loads(build)
        self.env_id, self.kwargs, self.max_steps = env_id, env_kwargs, max_steps
        self.players = {key: pickle.loads(blob) for key, blob in players.items()}

    def players_state(self) -> dict[int, bytes]:
        """Return the hosted players as they are now (pickled), for the learner's objects."""
        return {key: pickle.dumps(player) for key, player in self.players.items()}

    def act(self, key: int, observations: list[dict[str, Any]]) -> list[Any]:
        """One batched call of hosted player ``key``: replies, or ``("failed", traceback)`` per observation."""
        out = []
        for answer in _act(self.players[key], observations):
            out.append(("failed", answer.error) if isinstance(answer, _Failure) else answer)
        return out

    def start(self, jobs: list[tuple[int, int, int | None, Any, dict[str, tuple[int, str]]]]) -> list[tuple]:
        """Start episodes: ``(slot, index, seed, options, {agent or role: (policy key, name)})`` each."""
        out = []
        for slot, index, seed, options, seats in jobs:
            env = self.envs.get(slot)
            if env is None:
                try:
                    env = self.envs[slot] = self.build()
                except Exception:
                    out.append((slot, ("done", Episode(
                        env_id=self.env_id, env_kwargs=self.kwargs, seed=seed, options=options, failed=True,
                        error="make_env() raised building a fresh env for this episode:\n"
                        + traceback.format_exc()).to_dict())))
                    continue
            stand_ins = {who: _Seat(key, name) for who, (key, name) in seats.items()}
            run = self.runs[slot] = _Run(env, index, seed, options, stand_ins, time.perf_counter())
            try:
                env.reset(seed=seed, options=None if options is None else dict(options))
                run.setup()
                waiting = run.advance(self.max_steps)
            except Exception:
                out.append((slot, self._finish(slot, traceback.format_exc(), broken=True)))
                continue
            out.append((slot, self._pending(slot) if waiting else self._finish(slot, None)))
        return out

    def step(self, moves: list[tuple[int, Any]]) -> list[tuple]:
        """Step slots with their replies (a ``str``), or end them failed (``("failed", traceback)``)."""
        out = []
        for slot, reply in moves:
            run = self.runs[slot]
            if isinstance(reply, tuple):
                out.append((slot, self._finish(slot, reply[1])))  # the policy failed, not the env
                continue
            try:
                run.play(reply)
                waiting = run.advance(self.max_steps)
            except _TooLong as exc:
                out.append((slot, self._finish(slot, str(exc))))
            except Exception:
                out.append((slot, self._finish(slot, traceback.format_exc(), broken=True)))
            else:
                out.append((slot, self._pending(slot) if waiting else self._finish(slot, None)))
        return out

    def close(self) -> None:
        """Close every env of the collection."""
        for env in self.envs.values():
            if env is not None:
                _close(env)
        self.envs, self.runs = {}, {}

    def _pending(self, slot: int) -> tuple:
        run = self.runs[slot]
        return ("wait", run.agent, run.observation, run.policy_of(run.agent).key)

    def _finish(self, slot: int, error: str | None, *, broken: bool = False) -> tuple:
        run = self.runs.pop(slot)
        try:
            record = run.record(self.env_id, self.kwargs, error)
        except Exception:
            run.infos = {}
            record = run.record(self.env_id, self.kwargs, (f"{error}\n" if error else "")
                                + "the episode's record could not be built; its infos are left out:\n"
                                + traceback.format_exc())
        if broken:  # its state is not trusted: a fresh env replaces it at the slot's next episode
            problem = _close(run.env)
            self.envs[slot] = None
            if problem is not None:
                record.error = f"{record.error}\n{problem}"
        return ("done", record.to_dict())


READY_TIMEOUT_S = 120
"""How long a RayExecutor waits for its actors to start before it gives up."""
RESOURCE_WAIT_S = 10.0
"""How long a RayExecutor waits for enough free CPUs (those of actors just stopped come back a moment later)."""


class RayExecutor:
    """Runs a collection's envs and scripted players in ``workers`` Ray actors; model policies act in the learner.

    Args:
        workers: Env actors (each takes one CPU of the Ray cluster).
        remote: Which policies run in an actor; default :func:`scripted_player`. Any other
            policy acts in the caller's process.
        address: The Ray cluster to join (``ray.init(address=...)``); None joins the one already
            initialised in this process, else the one ``RAY_ADDRESS`` names, else starts a local one.
        init_kwargs: More keywords of ``ray.init`` when this executor starts Ray.
    """

    def __init__(self, workers: int = 2, *, remote: Callable[[Policy], bool] = scripted_player,
                 address: str | None = None, init_kwargs: Mapping[str, Any] | None = None) -> None:
        try:
            import ray
        except ImportError as err:
            raise ImportError("config.executor='ray' (RayExecutor) needs Ray: pip install 'llm_zoo[ray]', "
                              "or set executor=local") from err
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"RayExecutor: workers (config.env_workers) must be an integer >= 1; got {workers!r}")
        self._ray = ray
        self.workers = workers
        self.remote = remote
        self._started = False
        if not ray.is_initialized():
            ray.init(address=address, **dict(init_kwargs or {}))
            self._started = True
        deadline = time.monotonic() + RESOURCE_WAIT_S  # the CPUs of actors just killed come back a moment later
        while (free := ray.available_resources().get("CPU", 0)) < workers and time.monotonic() < deadline:
            time.sleep(0.1)
        if free < workers:
            raise RuntimeError(f"RayExecutor: {workers} env workers need {workers} free CPUs of the Ray cluster, "
                               f"which has {free:g} free (of {ray.cluster_resources().get('CPU', 0):g}); lower "
                               f"config.env_workers, or give the cluster more CPUs")
        self._actor_class = ray.remote(num_cpus=1, max_restarts=0)(EnvWorker)
        self._actors = [self._actor_class.remote() for _ in range(workers)]
        try:
            ray.get([actor.__ray_ready__.remote() for actor in self._actors], timeout=READY_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise RuntimeError(f"RayExecutor: {workers} env workers did not start within {READY_TIMEOUT_S} s; "
                               f"the cluster's resources: {ray.available_resources()}") from None
        self.actor_deaths = 0
        """How many actors died and were replaced over this executor's collections."""

    def close(self) -> None:
        """Stop the actors (and Ray, when this executor started it)."""
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
        self._started = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- one collection ------------------------------------------------------------------

    def collect(self, build: Callable[[], AECEnv], env_id: str | None, kwargs: dict[str, Any],
                maps: Sequence[Mapping[str, Policy]], seeds: Sequence[int | None], options: Sequence[Any], *,
                batch_size: int, seed: int | None, max_steps: int, progress: bool | str) -> list[Episode]:
        """Play one episode per seed (what :func:`~llm_zoo.trainers.rollout.collect` calls with ``executor=``)."""
        ray = self._ray
        probe = build()
        try:
            env_id = env_id or probe.unwrapped.metadata.get("name", type(probe.unwrapped).__name__)
            _check_policies(maps, probe)
            possible = [(a, _role(probe, a)) for a in probe.possible_agents]
        finally:
            _close(probe)
        if seed is not None:
            _reseed(maps, seed)
        policies: dict[int, Policy] = {}
        seats_of: list[dict[str, tuple[int, str]]] = []
        for mapping in maps:
            seats = {}
            for agent, role in possible:
                policy = _resolve(mapping, agent, role)
                policies.setdefault(id(policy), policy)
                seats[agent] = (id(policy), _name(policy))
            for who, policy in mapping.items():  # agents that join mid-episode resolve by their role too
                policies.setdefault(id(policy), policy)
                seats.setdefault(who, (id(policy), _name(policy)))
            seats_of.append(seats)
        hosted = [key for key, p in policies.items() if self.remote(p) and _picklable(p)]
        host_of = {key: i % self.workers for i, key in enumerate(hosted)}
        blobs = {key: ray.cloudpickle.dumps(policies[key]) for key in hosted}
        opening = (ray.cloudpickle.dumps(build), env_id, kwargs, max_steps)

        def open_actor(i: int) -> Any:
            return self._actors[i].open.remote(*opening, {k: blobs[k] for k, h in host_of.items() if h == i})

        ray.get([open_actor(i) for i in range(self.workers)])
        n = len(seeds)
        n_slots = min(batch_size, n)
        actor_of = [s % self.workers for s in range(n_slots)]
        results: list[Episode | None] = [None] * n
        pending: dict[int, tuple[str, Any, int]] = {}  # slot -> (agent, observation, policy key)
        index_of: dict[int, int] = {}  # slot -> the episode it runs
        queue = iter(range(n))
        bar = _progress_bar(progress, n)

        def done(slot: int, record: dict[str, Any]) -> None:
            episode = Episode.from_dict(record)
            results[index_of.pop(slot)] = episode
            pending.pop(slot, None)
            if bar is not None:
                bar.update(1)

        def died(i: int, error: BaseException) -> None:
            """Actor ``i`` died: fail its live episodes, and give its slots and players a fresh actor."""
            self.actor_deaths += 1
            note = (f"the Ray actor running this episode's env died ({type(error).__name__}: "
                    f"{str(error)[:500]}); the episode is lost with it")
            for slot in [s for s in index_of if actor_of[s] == i]:
                index = index_of[slot]
                done(slot, Episode(env_id=env_id, env_kwargs=kwargs, seed=seeds[index], options=options[index],
                                   failed=True, error=note).to_dict())
            self._ray.kill(self._actors[i])
            self._actors[i] = self._actor_class.remote()
            ray.get(open_actor(i))

        def call(by_actor: dict[int, list], method: str) -> None:
            """Send each actor its slots' work, side by side; fold the answers in."""
            futures = {i: getattr(self._actors[i], method).remote(work) for i, work in by_actor.items() if work}
            for i, future in futures.items():
                try:
                    answers = ray.get(future)
                except ray.exceptions.RayActorError as err:
                    died(i, err)
                    continue
                for slot, answer in answers:
                    if answer[0] == "wait":
                        pending[slot] = answer[1:]
                    else:
                        done(slot, answer[1])

        def refill(slots: Sequence[int]) -> None:
            """Give idle slots the next episodes, in slot order, until each waits for a reply or none are left."""
            while slots:
                jobs: dict[int, list] = {}
                for slot in slots:
                    index = next(queue, None)
                    if index is None:
                        break
                    index_of[slot] = index
                    jobs.setdefault(actor_of[slot], []).append(
                        (slot, index, seeds[index], options[index], seats_of[index]))
                call(jobs, "start")
                slots = [s for s in slots if s not in index_of]
                if not jobs:
                    break

        try:
            refill(list(range(n_slots)))
            while pending:
                order = sorted(pending)  # in-process collect's order of live envs
                groups: dict[int, list[int]] = {}
                for slot in order:
                    groups.setdefault(pending[slot][2], []).append(slot)
                answers: dict[int, Any] = {}
                remote_calls = {key: self._actors[host_of[key]].act.remote(key, [pending[s][1] for s in slots])
                                for key, slots in groups.items() if key in host_of}
                for key, slots in groups.items():
                    if key not in host_of:
                        for slot, answer in zip(slots, _act(policies[key], [pending[s][1] for s in slots])):
                            answers[slot] = ("failed", answer.error) if isinstance(answer, _Failure) else answer
                for key, future in remote_calls.items():
                    try:
                        replies = ray.get(future)
                    except ray.exceptions.RayActorError as err:
                        died(host_of[key], err)  # its slots fail; the others' turns wait for the next tick
                        continue
                    answers.update(zip(groups[key], replies))
                moves: dict[int, list] = {}
                for slot in order:
                    if slot in answers and slot in pending:
                        moves.setdefault(actor_of[slot], []).append((slot, answers[slot]))
                call(moves, "step")
                refill([s for s in order if s not in index_of])
            states = ray.get([self._actors[i].players_state.remote() for i in set(host_of.values())])
            for state in states:
                for key, blob in state.items():  # the players' draws and what they learned, back home
                    _restore(policies[key], pickle.loads(blob))
        finally:
            for i in range(self.workers):
                try:
                    ray.get(self._actors[i].close.remote())
                except ray.exceptions.RayActorError:
                    self._actors[i] = self._actor_class.remote()
            if bar is not None:
                bar.close()
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]


def _restore(policy: Policy, state: Policy) -> None:
    """Give the learner's ``policy`` the state its copy in an actor ended a collection with."""
    if hasattr(policy, "__dict__"):
        policy.__dict__.update(state.__dict__)
    for name in getattr(type(policy), "__slots__", ()):
        if hasattr(state, name):
            setattr(policy, name, getattr(state, name))


def _picklable(policy: Policy) -> bool:
    from ray import cloudpickle

    try:
        cloudpickle.dumps(policy)
    except Exception:
        return False
    return True
