"""Where :func:`~llm_zoo.trainers.rollout.collect` runs its envs: in its own process (the default), or in Ray actors.

``collect`` runs one tick loop over an :class:`~llm_zoo.trainers.rollout.Envs`: numbered env slots
it starts episodes on and steps with replies. ``collect(..., executor=None)`` keeps the slots in the
caller's process (:class:`~llm_zoo.trainers.rollout.LocalEnvs`); ``collect(...,
executor=RayExecutor(workers=N))`` deals them round-robin over N Ray actors (:class:`EnvWorker`,
each running a ``LocalEnvs``), so the envs whose turns run sandboxed code step in parallel on as
many cores or machines as the Ray cluster has. The loop, the batches and the order of every call
are the same, so the same arguments give the same episodes either way.

Each tick the loop calls each *model* policy in its own process (one batched ``act``: the GPU or
the learner's weights never leave it), and each policy that may run remotely (``Policy.remote_ok``:
the env's scripted players, tables, random play) in the actor that hosts it, side by side; then each
actor steps its slots.

What crosses the process boundary: jobs, replies and observations as plain data (tuples, lists,
dicts of text and numbers; a reply as its text and token lists), finished episodes as
``Episode.to_dict()`` records read back by ``Episode.from_dict``'s strict schema. Two things are
pickled, because they are code with state, not data: the env factory and the hosted players (sent
to the actors at the start of a collection), and the hosted players' state, sent back at its end so
that a player that adapts across collections (``proposer_solver``'s adaptive proposer) keeps
adapting. Unpickling that state trusts the actors, as Ray itself does: every value an actor returns
reaches the caller through Ray's own pickle-based serialization, so the actors sit inside the trust
boundary whatever they send (the untrusted code they run is confined by the sandbox, inside them).

Failures stay local, as in-process: an env that raises marks its episode failed and is replaced
inside its actor; an actor that dies (its process crashed or was killed) marks every episode it
was running failed (``error`` says the actor died), and a fresh actor takes its slots and the
players it hosted (from their state at the start of the collection).

``ray`` is an optional dependency (``pip install 'llm_zoo[ray]'``); nothing here imports it until
a :class:`RayExecutor` is made.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pettingzoo import AECEnv

from llm_zoo.episode import Episode
from llm_zoo.policy import Observation, Policy, Reply
from llm_zoo.trainers.rollout import Answer, Failure, Job, LocalEnvs, Outcome, Waiting

__all__ = ["EXECUTORS", "EnvWorker", "RayExecutor", "make_executor", "may_run_remotely"]

EXECUTORS = ("local", "ray")
"""The values of the trainer's ``config.executor``."""


def may_run_remotely(policy: Policy) -> bool:
    """Return what the policy says of itself: ``remote_ok`` (a model-backed policy, or one without the flag, says no)."""
    return getattr(policy, "remote_ok", False) is True


def make_executor(kind: str, workers: int) -> RayExecutor | None:
    """Return the executor the trainer's ``config.executor`` names: None (in-process) for local."""
    if kind == "local":
        return None
    if kind == "ray":
        return RayExecutor(workers)
    raise ValueError(f"config.executor must be one of {EXECUTORS}; got {kind!r}")


# ---- plain data across the boundary ----------------------------------------------------------


def _answer_out(answer: Answer) -> str | dict[str, Any]:
    """A reply as plain data: a bare ``str`` as it is, a :class:`Reply` as its text and records, a failure as its error."""
    if type(answer) is Failure:
        return {"error": answer.error}
    if isinstance(answer, Reply):
        return {"text": answer.text, "prompt_ids": answer.prompt_ids, "completion_ids": answer.completion_ids,
                "logprobs": answer.logprobs, "policy": answer.policy}
    return str(answer)


def _answer_in(plain: str | dict[str, Any]) -> Answer:
    if isinstance(plain, str):
        return plain
    if "error" in plain:
        return Failure(str(plain["error"]))
    return Reply(plain["text"], prompt_ids=plain["prompt_ids"], completion_ids=plain["completion_ids"],
                 logprobs=plain["logprobs"], policy=plain["policy"])


def _outcome_out(outcome: Outcome) -> tuple:
    if type(outcome) is Waiting:
        return ("wait", outcome.agent, outcome.observation, outcome.key)
    return ("done", outcome.to_dict())  # type: ignore[union-attr]


class EnvWorker:
    """The body of one Ray actor: a :class:`~llm_zoo.trainers.rollout.LocalEnvs` of some of a collection's slots,
    with the players it hosts. Every method takes and returns plain data (the module docstring)."""

    def __init__(self) -> None:
        self.envs: LocalEnvs | None = None

    def open(self, build: bytes, env_id: str, env_kwargs: dict[str, Any], max_steps: int,
             players: dict[int, bytes]) -> None:
        """Start a collection: its env factory (pickled) and the players this actor hosts (pickled)."""
        self.close()
        self.envs = LocalEnvs(pickle.loads(build), env_id, env_kwargs, max_steps,
                              players={key: pickle.loads(blob) for key, blob in players.items()})

    def start(self, jobs: list[tuple]) -> list[tuple[int, tuple]]:
        """Start episodes: ``(slot, index, seed, options, {agent or role: (policy key, name)})`` each."""
        assert self.envs is not None
        return [(slot, _outcome_out(o)) for slot, o in self.envs.start([Job(*job) for job in jobs])]

    def step(self, moves: list[tuple[int, Any]]) -> list[tuple[int, tuple]]:
        """Step slots with their replies, or end them failed (a reply's plain form, :func:`_answer_out`)."""
        assert self.envs is not None
        return [(slot, _outcome_out(o)) for slot, o in self.envs.step([(s, _answer_in(a)) for s, a in moves])]

    def act(self, key: int, observations: list[dict[str, Any]]) -> list[Any]:
        """One batched call of hosted player ``key``: each answer's plain form."""
        assert self.envs is not None
        answers, _ = self.envs.act({key: observations})()
        return [_answer_out(a) for a in answers[key]]

    def release(self, slots: list[int]) -> list[tuple[int, str]]:
        """Close the envs of slots that are done; return each ``close()`` that raised."""
        assert self.envs is not None
        return self.envs.release(slots)

    def players_state(self) -> dict[int, bytes]:
        """Return the hosted players as they are now (pickled), for the caller's objects."""
        from ray import cloudpickle  # (a class the caller sent by value goes back by value)

        return {} if self.envs is None else {key: cloudpickle.dumps(p) for key, p in self.envs.players.items()}

    def close(self) -> None:
        """Close every env of the collection."""
        if self.envs is not None:
            self.envs.close()


READY_TIMEOUT_S = 120
"""How long a RayExecutor waits for its actors to start before it gives up."""
RESOURCE_WAIT_S = 10.0
"""How long a RayExecutor waits for enough free CPUs (those of actors just stopped come back a moment later)."""


class RayExecutor:
    """Runs a collection's envs, and the policies that may run remotely, in ``workers`` Ray actors.

    Args:
        workers: Env actors (each takes one CPU of the Ray cluster).
        remote: Which policies act in an actor; default :func:`may_run_remotely` (the policy's own
            ``remote_ok``). A policy that cannot be pickled acts in the caller's process whatever it says.
        address: The Ray cluster to join (``ray.init(address=...)``); None joins the one already
            initialised in this process, else the one ``RAY_ADDRESS`` names, else starts a local one.
        init_kwargs: More keywords of ``ray.init`` when this executor starts Ray.
    """

    def __init__(self, workers: int = 2, *, remote: Callable[[Policy], bool] = may_run_remotely,
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

    def open(self, build: Callable[[], AECEnv], env_id: str, env_kwargs: Mapping[str, Any], max_steps: int,
             policies: Mapping[int, Policy]) -> _RayEnvs:
        """Open a collection's env slots in the actors, with the policies (key -> policy) that act there."""
        cloudpickle = self._ray.cloudpickle
        blobs = {}
        for key, policy in policies.items():
            if self.remote(policy):
                try:
                    blobs[key] = cloudpickle.dumps(policy)
                except Exception:  # it stays in the caller's process, where it acts as well
                    continue
        return _RayEnvs(self, (cloudpickle.dumps(build), env_id, dict(env_kwargs), max_steps), blobs, policies)


class _RayEnvs:
    """One collection's env slots in a :class:`RayExecutor`'s actors: slot ``s`` in actor ``s % workers``.

    The caller's side of :class:`~llm_zoo.trainers.rollout.Envs`: work goes to the actors side by side, and
    answers come back as plain data (the module docstring).
    """

    def __init__(self, executor: RayExecutor, opening: tuple, blobs: dict[int, bytes],
                 policies: Mapping[int, Policy]) -> None:
        self.ex, self.opening, self.blobs, self.policies = executor, opening, blobs, policies
        self.ray = executor._ray
        self.host_of = {key: i % executor.workers for i, key in enumerate(blobs)}
        self.hosted = set(self.host_of)
        self.jobs: dict[int, Job] = {}  # slot -> the episode it runs
        self.ray.get([self._open(i) for i in range(executor.workers)])

    def _open(self, i: int) -> Any:
        blobs = {key: self.blobs[key] for key, host in self.host_of.items() if host == i}
        return self.ex._actors[i].open.remote(*self.opening, blobs)

    def _actor(self, slot: int) -> int:
        return slot % self.ex.workers

    def start(self, jobs: Sequence[Job]) -> list[tuple[int, Outcome]]:
        work: dict[int, list[tuple]] = {}
        for job in jobs:
            self.jobs[job.slot] = job
            work.setdefault(self._actor(job.slot), []).append(
                (job.slot, job.index, job.seed, None if job.options is None else dict(job.options), dict(job.seats)))
        return self._call("start", work)

    def step(self, moves: Sequence[tuple[int, Answer]]) -> list[tuple[int, Outcome]]:
        work: dict[int, list[tuple]] = {}
        for slot, answer in moves:
            work.setdefault(self._actor(slot), []).append((slot, _answer_out(answer)))
        return self._call("step", work)

    def act(self, calls: Mapping[int, list[Observation]]) -> Callable[[], tuple[dict[int, list[Answer]],
                                                                               list[tuple[int, Outcome]]]]:
        actors = self.ex._actors
        futures = {key: (actors[self.host_of[key]], actors[self.host_of[key]].act.remote(key, list(observations)))
                   for key, observations in calls.items()}

        def wait() -> tuple[dict[int, list[Answer]], list[tuple[int, Outcome]]]:
            answers, lost = {}, []
            for key, (actor, future) in futures.items():
                try:
                    answers[key] = [_answer_in(a) for a in self.ray.get(future)]
                except self.ray.exceptions.RayActorError as err:
                    lost += self._died(self.host_of[key], actor, err)  # its slots fail; the other turns wait
            return answers, lost

        return wait

    def release(self, slots: Sequence[int]) -> list[tuple[int, str]]:
        work: dict[int, list[int]] = {}
        for slot in slots:
            work.setdefault(self._actor(slot), []).append(slot)
        futures = [self.ex._actors[i].release.remote(batch) for i, batch in work.items()]
        notes = []
        for future in futures:
            try:
                notes += [(slot, problem) for slot, problem in self.ray.get(future)]
            except self.ray.exceptions.RayActorError:
                continue  # a dead actor's envs are gone with it; its episodes were recorded before
        return notes

    def finish(self) -> None:
        states = self.ray.get([self.ex._actors[i].players_state.remote() for i in set(self.host_of.values())])
        for state in states:
            for key, blob in state.items():  # the players' draws and what they learned, back home
                _restore(self.policies[key], pickle.loads(blob))

    def close(self) -> None:
        for i in range(self.ex.workers):
            try:
                self.ray.get(self.ex._actors[i].close.remote())
            except self.ray.exceptions.RayActorError:
                self.ex._actors[i] = self.ex._actor_class.remote()

    def _call(self, method: str, work: dict[int, list]) -> list[tuple[int, Outcome]]:
        """Send each actor its slots' work, side by side; return the outcomes."""
        actors = self.ex._actors
        futures = {i: (actors[i], getattr(actors[i], method).remote(batch)) for i, batch in work.items() if batch}
        out: list[tuple[int, Outcome]] = []
        for i, (actor, future) in futures.items():
            try:
                answers = self.ray.get(future)
            except self.ray.exceptions.RayActorError as err:
                out += self._died(i, actor, err)
                continue
            for slot, answer in answers:
                if answer[0] == "wait":
                    out.append((slot, Waiting(answer[1], answer[2], answer[3])))
                else:
                    self.jobs.pop(slot, None)
                    out.append((slot, Episode.from_dict(answer[1])))
        return out

    def _died(self, i: int, actor: Any, error: BaseException) -> list[tuple[int, Outcome]]:
        """Actor ``i`` died: fail its live episodes, and give its slots and players a fresh actor."""
        if self.ex._actors[i] is not actor:  # replaced already, at an earlier call of this tick
            return []
        self.ex.actor_deaths += 1
        note = (f"the Ray actor running this episode's env died ({type(error).__name__}: "
                f"{str(error)[:500]}); the episode is lost with it")
        out: list[tuple[int, Outcome]] = []
        for slot in [s for s in self.jobs if self._actor(s) == i]:
            job = self.jobs.pop(slot)
            out.append((slot, Episode(env_id=self.opening[1], env_kwargs=self.opening[2], seed=job.seed,
                                      options=job.options, failed=True, error=note)))
        self.ray.kill(actor)
        self.ex._actors[i] = self.ex._actor_class.remote()
        self.ray.get(self._open(i))
        return out


def _restore(policy: Policy, state: Policy) -> None:
    """Give the caller's ``policy`` the state its copy in an actor ended a collection with."""
    if hasattr(policy, "__dict__"):
        policy.__dict__.update(state.__dict__)
    for name in getattr(type(policy), "__slots__", ()):
        if hasattr(state, name):
            setattr(policy, name, getattr(state, name))
