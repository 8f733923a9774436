"""Tests for the rollout memo (llm_zoo.trainers.rollout.MemoEnvs): the same episodes as the real envs.

Each test plays the same seeds twice through ``collect``, once on the real AEC envs (``LocalEnvs``)
and once on the memo (twice over one memo, so the second collection replays states the first met),
and compares the records field by field: turns, observations, rewards, returns, infos, failures.
"""

from __future__ import annotations

import functools
import random

import pytest
import torch

from llm_zoo.envs.kuhn_poker.env import raw_env as kuhn_env
from llm_zoo.envs.leduc_poker.env import raw_env as leduc_env
from llm_zoo.policies import FunctionPolicy, RandomPolicy
from llm_zoo.trainers.grpo import make_config, make_learner
from llm_zoo.trainers.rollout import LocalEnvs, MemoEnvs, MemoExecutor, collect

pytestmark = pytest.mark.torch


def _seats(env: str, overrides: dict) -> dict:
    """The two seats' tiny models of the env's preset (each its own seed), as the trainer builds them."""
    config = make_config(env, {"seed": 3, **overrides})
    return {f"player_{i}": make_learner(f"seat_{i}", config, torch.device("cpu"), i).policy for i in range(2)}


def _same(env: str, policies: dict, seeds: list[int], *, batch_size: int, env_kwargs: dict) -> list:
    """Collect ``seeds`` on the real envs and twice on one memo; assert the three agree; return the episodes."""
    real = collect(env, policies, seeds, batch_size=batch_size, env_kwargs=env_kwargs, seed=11)
    executor = MemoExecutor()
    for _ in range(2):
        memo = collect(env, policies, seeds, batch_size=batch_size, env_kwargs=env_kwargs, seed=11, executor=executor)
        assert len(memo) == len(real)
        for a, b in zip(real, memo):
            assert a.to_dict() == b.to_dict() | {"wall_time": a.wall_time}
    assert executor.memo.size > 0
    return real


@pytest.mark.parametrize("env, overrides, batch_size, n", [
    ("kuhn_poker_v0", {}, 128, 128),  # the main job's preset: masked one-token replies, all hands side by side
    ("leduc_poker_v0", {}, 12, 32),  # Leduc's: slots refill as hands end
])
def test_memo_gives_the_presets_episodes(env: str, overrides: dict, batch_size: int, n: int) -> None:
    config = make_config(env, overrides)
    policies = _seats(env, overrides)
    episodes = _same(env, policies, list(range(1000, 1000 + n)), batch_size=batch_size,
                     env_kwargs=config.env_kwargs)
    assert {e.returns["player_0"] for e in episodes} >= {-1.0, 1.0}  # hands were won and lost both ways
    assert all(t.completion_ids and t.logprobs for e in episodes for t in e.turns)


def test_memo_gives_invalid_replies_retries_and_forfeits() -> None:
    """Unmasked tiny models write invalid replies: feedback, a retry, then a forfeit, over matches of 2 hands."""
    overrides = {"constrain_to_legal": False}
    kwargs = {"num_hands": 2, "max_retries": 1, "rules_in_prompt": False}
    episodes = _same("kuhn_poker_v0", _seats("kuhn_poker_v0", overrides), list(range(24)), batch_size=24,
                     env_kwargs=kwargs)
    infos = [i for e in episodes for i in e.infos.values()]
    assert any(i["invalid_replies"] for i in infos) and any(i["forfeit"] for i in infos)


def test_memo_gives_fixed_deals_and_policy_failures() -> None:
    """Options that fix the cards, and a policy that fails some observations, end as on the real envs."""

    def picky(obs: dict) -> str:
        if obs["info_set"].startswith("K"):
            raise ValueError("refuses to play a king")
        return random.Random(obs["info_set"]).choice(obs["legal_actions"])

    policies = {"player_0": FunctionPolicy(picky), "player_1": RandomPolicy(seed=1)}
    seeds = list(range(40))
    real = collect("leduc_poker_v0", policies, seeds, batch_size=8, options=[{"deal": [("K", "Q", "J")]}] * 20
                   + [None] * 20, seed=5)
    for _ in range(2):
        memo = collect("leduc_poker_v0", policies, seeds, batch_size=8, options=[{"deal": [("K", "Q", "J")]}] * 20
                       + [None] * 20, seed=5, executor=MemoExecutor())
        assert [e.to_dict() | {"wall_time": 0} for e in memo] == [e.to_dict() | {"wall_time": 0} for e in real]
    assert sum(e.failed for e in real) >= 20  # every fixed deal gives player_0 the king


@pytest.mark.parametrize("raw", [kuhn_env, leduc_env])
def test_opening_is_what_reset_deals(raw) -> None:
    env = raw(num_hands=4)
    for seed in range(50):
        env.reset(seed=seed)
        dealt = {}  # hand index -> its cards, read as each hand is played (check or call to the end)
        while env.agents:
            if env._hand_index < env.num_hands:
                dealt.setdefault(env._hand_index, env._ranks)
            agent = env.agent_selection
            env.step(None if env.terminations[agent] else env.observe(agent)["legal_actions"][0])
        assert env.opening(seed, None) == tuple(dealt.values())
    assert env.opening(None, None) is None


def test_executor_keeps_the_real_envs_for_envs_without_an_opening() -> None:
    executor = MemoExecutor()
    build = functools.partial(__import__("llm_zoo").make_env, "proposer_solver_v0")
    assert isinstance(executor.open(build, "proposer_solver_v0", {}, 100, {}), LocalEnvs)
    assert executor.plain and executor.memo._env is None  # no env kept for an env that names no draw
    assert isinstance(executor.open(build, "proposer_solver_v0", {}, 100, {}), LocalEnvs)
    assert isinstance(executor.open(functools.partial(__import__("llm_zoo").make_env, "kuhn_poker_v0"),
                                    "kuhn_poker_v0", {}, 100, {}), MemoEnvs)
