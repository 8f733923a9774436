"""collect on a local Ray cluster of 2 workers: the same episodes as in-process, envs in the actors, crashes contained."""

from __future__ import annotations

import json
import os
import sys

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import llm_zoo  # noqa: E402
from llm_zoo import models  # noqa: E402
from llm_zoo.policies import RandomPolicy  # noqa: E402
from llm_zoo.policies.transformers import TransformersPolicy  # noqa: E402
from llm_zoo.trainers import executors  # noqa: E402
from llm_zoo.trainers.executors import RayExecutor, make_executor, may_run_remotely  # noqa: E402
from llm_zoo.trainers.grpo import make_config, train  # noqa: E402
from llm_zoo.trainers.rollout import collect  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 2 CPUs, started here and stopped at the end of the module."""
    # this module's crashing env factory travels to the workers by value (they cannot import tests/)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    try:
        yield
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def executor(cluster):
    """2 env workers on the cluster, stopped after the test (so that the next test finds the CPUs free)."""
    with RayExecutor(2) as ex:
        yield ex


def _plain(episodes):
    """Episode.to_dict of each, timings left out."""
    out = []
    for episode in episodes:
        record = episode.to_dict()
        record.pop("wall_time")
        out.append(record)
    return out


def _kuhn_policies():
    spec = llm_zoo.env_spec("kuhn_poker_v0")
    tokenizer = models.build_word_tokenizer(spec.corpus())
    model = models.build_tiny_model(tokenizer, hidden_size=16, num_layers=1, seed=0)
    learner = TransformersPolicy(model, tokenizer, name="main", max_new_tokens=2, device="cpu")
    return {"player_0": learner, "player_1": spec.scripted["nash"](seed=3)}


def test_ray_gives_the_in_process_episodes_with_a_model_in_the_learner(executor):
    local, remote = _kuhn_policies(), _kuhn_policies()
    assert not may_run_remotely(local["player_0"]) and may_run_remotely(local["player_1"])
    seeds = list(range(100, 124))
    expected = collect("kuhn_poker_v0", local, seeds, batch_size=7, seed=11)
    got = collect("kuhn_poker_v0", remote, seeds, batch_size=7, seed=11, executor=executor)
    assert _plain(got) == _plain(expected)
    assert {t.policy for e in got for t in e.turns} == {"main", local["player_1"].name}
    assert any(t.completion_ids for e in got for t in e.turns)  # the model's token records crossed intact
    # the scripted player's draws came home: the learner's copy continues where the actor's stopped
    assert remote["player_1"]._rng.getstate() == local["player_1"]._rng.getstate()


def test_ray_runs_agentic_judge_sandboxes_in_the_actors(executor):
    from llm_zoo.sandbox import runner

    spec = llm_zoo.env_spec("agentic_judge_v0")

    def policies():
        return {"solver": spec.scripted["alternative"](seed=1), "judge": spec.scripted["rule_judge"](seed=2)}

    before = runner.runs_started()
    expected = collect("agentic_judge_v0", policies(), [0, 1, 2, 3], batch_size=4, seed=5)
    in_process = runner.runs_started() - before
    got = collect("agentic_judge_v0", policies(), [0, 1, 2, 3], batch_size=4, seed=5, executor=executor)
    assert in_process > 0 and runner.runs_started() - before == in_process  # none of Ray's ran here
    assert not any(e.failed for e in expected)
    assert _plain(got) == _plain(expected)


CRASH_SEED = 7


def crashing_kuhn():
    """Kuhn poker whose process dies (as a segfaulting sandbox would take its worker) in the episode of CRASH_SEED."""
    from pettingzoo.utils.wrappers import BaseWrapper

    class Crashing(BaseWrapper):
        def reset(self, seed=None, options=None):
            self._crash = seed == CRASH_SEED
            super().reset(seed=seed, options=options)

        def step(self, action):
            if self._crash:
                os._exit(1)
            super().step(action)

    return Crashing(llm_zoo.make_env("kuhn_poker_v0"))


def test_a_dead_actor_fails_its_episodes_and_the_collection_goes_on(executor):
    spec = llm_zoo.env_spec("kuhn_poker_v0")
    deaths = executor.actor_deaths
    seeds = list(range(20))
    got = collect(crashing_kuhn, {"player": spec.scripted["card"](seed=0)}, seeds, batch_size=4, seed=1,
                  executor=executor)
    assert executor.actor_deaths == deaths + 1
    assert [e.seed for e in got] == seeds
    crashed = got[seeds.index(CRASH_SEED)]
    assert crashed.failed and "Ray actor" in crashed.error and "died" in crashed.error
    lost = [e for e in got if e.failed]
    assert len(lost) <= 2  # the episodes that actor held (2 of the 4 slots), no more
    assert all(e.turns and sum(e.returns.values()) == 0 for e in got if not e.failed)  # whole zero-sum hands
    assert any(not e.failed for e in got[seeds.index(CRASH_SEED) + 2:])  # the replacement actor played on
    again = collect("kuhn_poker_v0", {"player": spec.scripted["card"](seed=0)}, 4, seed=1, executor=executor)
    assert not any(e.failed for e in again)  # the executor itself is whole


def test_trainer_executor_ray_trains_as_local_does(cluster, tmp_path):
    tiny = {"steps": 2, "episodes_per_step": 12, "rollout_batch_size": 6, "model_hidden_size": 16, "eval_every": 0,
            "unmask.steps": 0,
            "progress": False, "tensorboard": False, "threads": 1, "sample_every": 0, "checkpoint_every": 0}
    rows = {}
    for kind in ("local", "ray"):
        config = make_config("kuhn_poker_v0", {**tiny, "executor": kind, "env_workers": 2,
                                               "run_dir": str(tmp_path / kind)})
        train(config)
        rows[kind] = [{k: v for k, v in json.loads(line).items() if not k.startswith("perf/")}
                      for line in (tmp_path / kind / "metrics.jsonl").read_text().splitlines()]
    assert len(rows["local"]) == 2 and rows["ray"] == rows["local"]
    assert ray.is_initialized()  # the trainer's executor joined this cluster and left it running


def test_executor_config_is_checked(cluster, monkeypatch):
    assert make_executor("local", 2) is None
    monkeypatch.setattr(executors, "RESOURCE_WAIT_S", 0.5)
    with pytest.raises(RuntimeError, match="3 env workers need 3 free CPUs of the Ray cluster, which has 2"):
        RayExecutor(3)
    with pytest.raises(ValueError, match="executor must be one of"):
        make_config("kuhn_poker_v0", {"executor": "dask"})
    with pytest.raises(ValueError, match="env_workers must be >= 1"):
        make_config("kuhn_poker_v0", {"env_workers": 0})


def kuhn_ending_at_reset():
    """Kuhn poker whose episodes with a seed divisible by 3 end at reset (no agent left to act)."""
    from pettingzoo.utils.wrappers import BaseWrapper

    class EndsAtReset(BaseWrapper):
        def reset(self, seed=None, options=None):
            super().reset(seed=seed, options=options)
            if seed % 3 == 0:
                self.unwrapped.agents = []

    return EndsAtReset(llm_zoo.make_env("kuhn_poker_v0"))


class PidRandom(RandomPolicy):
    """Random play that notes the process of each call; it says it may run remotely, though no env ships it."""

    remote_ok = True

    def __init__(self, seed=None):
        super().__init__(seed=seed)
        self.pids = []

    def act(self, observations):
        self.pids.append(os.getpid())
        return super().act(observations)


def test_episodes_ending_at_their_start_and_remote_ok_give_the_in_process_episodes(executor):
    # random play shares one RNG over each batch, so the episodes show any change in the batches' make-up
    def policies():
        return {"player_0": PidRandom(), "player_1": RandomPolicy(name="stays")}

    local, remote = policies(), policies()
    remote["player_1"].remote_ok = False  # the policy's word decides, not its class's module
    expected = collect(kuhn_ending_at_reset, local, list(range(30)), batch_size=4, seed=2)
    got = collect(kuhn_ending_at_reset, remote, list(range(30)), batch_size=4, seed=2, executor=executor)
    assert sum(not e.turns for e in expected) == 10 and _plain(got) == _plain(expected)
    assert set(local["player_0"].pids) == {os.getpid()} and os.getpid() not in remote["player_0"].pids
    assert remote["player_1"]._rng.getstate() == local["player_1"]._rng.getstate()  # it acted here, in step
