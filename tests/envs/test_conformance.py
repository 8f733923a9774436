"""Every built-in env (llm_zoo.BUILTIN_ENVS): PettingZoo's API test, and random replies played to the end of an episode."""

from __future__ import annotations

import math
import warnings

import pytest
from pettingzoo.test import api_test

import llm_zoo
from llm_zoo.policies import RandomPolicy
from llm_zoo.trainers.rollout import collect

ENV_NAMES = sorted(llm_zoo.BUILTIN_ENVS)


@pytest.mark.parametrize("name", ENV_NAMES)
def test_api(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(llm_zoo.make_env(name), num_cycles=10)


@pytest.mark.parametrize("name", ENV_NAMES)
def test_random_replies_play_to_the_end(name):
    env = llm_zoo.make_env(name)
    roles = {env.unwrapped.role_of(a) for a in env.possible_agents}
    episodes = collect(name, {role: RandomPolicy(seed=0) for role in roles}, 2, seed=0, batch_size=2)
    for episode in episodes:
        assert not episode.failed, episode.error
        assert set(episode.returns) == set(env.possible_agents)
        assert all(math.isfinite(r) for r in episode.returns.values())
        assert episode.turns, "an episode with no turn"


@pytest.mark.parametrize("name", ENV_NAMES)
def test_reset_options_are_named_and_a_key_the_env_would_ignore_is_refused(name):
    env = llm_zoo.make_env(name)
    declared = env.unwrapped.reset_options
    assert declared and all(isinstance(k, str) for k in declared)
    env.reset(seed=0, options={"options": 1})  # reset itself ignores other keys (PettingZoo's api_test sends one)
    misspelt = {declared[0] + "s": 1}
    with pytest.raises(ValueError, match=rf"collect: options: {name} reads the reset options .*'{declared[0]}s'"):
        collect(name, {env.unwrapped.role_of(a): RandomPolicy(seed=0) for a in env.possible_agents}, 2,
                options=[None, misspelt])
    env.close()


def test_registry_names_match_modules():
    import pettingzoo

    for name in ENV_NAMES:
        env = pettingzoo.make("aec", "llm_zoo/" + name.replace("_v", "-v"))
        assert env.unwrapped.metadata["name"] == name
