"""Tests of the discrete view: PettingZoo conformance, menu and mask against the text env, bad actions."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.test import api_test, seed_test

from llm_zoo import kuhn_poker_v0
from llm_zoo.adapters import DiscreteActions
from llm_zoo.envs.core import TextEnv
from llm_zoo.envs.kuhn_poker.env import FEATURE_SIZE, MENU

HANDS = [1, 3]


def make(num_hands: int = 1, **kwargs) -> DiscreteActions:
    return DiscreteActions(kuhn_poker_v0.env(num_hands=num_hands, **kwargs))


class _Echo(TextEnv):
    """A one-agent env with free-text replies: it has no action menu."""

    metadata = {"render_modes": ["ansi"], "name": "echo", "is_parallelizable": False}
    possible_agents = ["player_0"]

    def system_prompt(self, agent):
        return "Say anything."

    def start(self, rng, options):
        return "player_0"

    def parse(self, agent, reply):
        return reply

    def play(self, agent, move):
        self.end({agent: 1.0})


@pytest.mark.parametrize("num_hands", HANDS)
def test_api_test(num_hands):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the Dict observation and unbounded Box warnings are expected
        api_test(make(num_hands), num_cycles=300)


@pytest.mark.parametrize("num_hands", HANDS)
def test_seed_test(num_hands):
    seed_test(lambda: make(num_hands), num_cycles=100)


def test_spaces_are_classic_and_one_per_agent():
    env = make()
    menu = env.unwrapped.action_menu()
    assert env.menu == menu == MENU
    for agent in env.possible_agents:
        assert env.action_space(agent) == spaces.Discrete(len(menu))
        obs_space = env.observation_space(agent)
        assert set(obs_space.spaces) == {"observation", "action_mask"}
        assert obs_space["observation"].shape == (FEATURE_SIZE,) and obs_space["observation"].dtype == np.float32
        assert obs_space["action_mask"].shape == (len(menu),) and obs_space["action_mask"].dtype == np.int8
    a, b = env.possible_agents
    assert env.action_space(a) is not env.action_space(b)
    assert env.observation_space(a) is not env.observation_space(b)


def test_free_text_env_has_no_discrete_view():
    with pytest.raises(ValueError, match="has free-text replies and no discrete view"):
        DiscreteActions(_Echo())


@pytest.mark.parametrize("num_hands", HANDS)
def test_mask_observation_and_reply_match_the_text_env_over_random_play(num_hands):
    env, rng = make(num_hands), random.Random(0)
    base = env.unwrapped
    for seed in range(60):
        env.reset(seed=seed)
        for agent in env.agent_iter():
            obs, _, terminated, truncated, _ = env.last()
            for other in env.agents:  # every agent's view, not only the one to act
                seen, text_obs = env.observe(other), base.observe(other)
                legal = {env.menu[i] for i in np.flatnonzero(seen["action_mask"])}
                if env.terminations[other] or env.truncations[other]:
                    assert legal == set(env.menu)  # a finished agent's every index is its no-op
                else:
                    assert legal == set(text_obs["legal_actions"])
                np.testing.assert_array_equal(seen["observation"], base.features(other))
            if terminated or truncated:
                assert obs["action_mask"].all()
                env.step(None if seed % 2 else rng.randrange(len(env.menu)))  # both are the dead step
                continue
            action = rng.choice(np.flatnonzero(obs["action_mask"]).tolist())
            env.step(action)
            replies = [m["content"] for m in base.observe(agent)["messages"] if m["role"] == "assistant"]
            assert replies[-1] == env.menu[action]


def test_masked_action_goes_to_the_env_retry_then_forfeit():
    env = make()
    env.reset(seed=0)
    call = MENU.index("[call]")  # illegal as the hand's first move
    assert env.last()[0]["action_mask"][call] == 0
    env.step(call)
    assert env.agent_selection == "player_0" and env.infos["player_0"]["invalid_replies"] == 1
    env.step(np.int64(call))
    assert env.terminations["player_0"] and env.infos["player_0"]["forfeit"]
    assert env.rewards == {"player_0": -1.0, "player_1": 1.0}


@pytest.mark.parametrize("action", [4, -1])
def test_out_of_range_action_names_the_legal_indices(action):
    env = make()
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"must be an int in 0\.\.3 .*Legal now: \[0, 1\]"):
        env.step(action)


@pytest.mark.parametrize("action", ["[bet]", 1.0, True, np.array([1])])
def test_non_integer_action_is_a_type_error(action):
    env = make()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="must be an int in 0..3"):
        env.step(action)


def test_none_for_a_live_agent_is_a_type_error():
    env = make()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="None is only for terminated or truncated agents"):
        env.step(None)


@pytest.mark.parametrize("action", [1, np.int32(1), np.uint8(1), np.array(1)])
def test_integer_like_actions_are_accepted(action):
    env = make()
    env.reset(seed=0)
    env.step(action)
    assert env.agent_selection == "player_1"
    assert env.unwrapped.observe("player_1")["info_set"].endswith(":bet")


def test_observe_before_reset_is_refused_by_the_env():
    with pytest.raises(Exception, match="reset"):
        make().observe("player_0")


def test_declared_feature_space_is_used():
    class Bounded(kuhn_poker_v0.raw_env):
        def feature_space(self):
            return spaces.Box(0.0, 1.0, (FEATURE_SIZE,), np.float32)

    env = DiscreteActions(Bounded())
    box = env.observation_space("player_0")["observation"]
    assert box.low.min() == 0.0 and box.high.max() == 1.0
    env.reset(seed=3)
    assert box.contains(env.observe("player_0")["observation"])


def test_none_after_the_episode_passes_to_the_env(caplog):
    env = make()
    env.reset(seed=0)
    for _ in env.agent_iter():
        obs, _, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else int(np.flatnonzero(obs["action_mask"])[0]))
    assert env.agents == []
    env.step(None)
    assert "step() called after all agents are terminated" in caplog.text  # PettingZoo's own warning


@pytest.mark.parametrize("num_hands", HANDS)
def test_numeric_infos_keep_one_set_of_float_keys_from_reset_to_the_end(num_hands):
    env, rng = DiscreteActions(kuhn_poker_v0.env(num_hands=num_hands), info_keys=("seat", "total")), random.Random(1)
    keys = {"invalid_replies", "tool_calls", "truncated_replies", "forfeit", "seat", "total", "return"}
    for seed in range(30):
        env.reset(seed=seed)
        returns = dict.fromkeys(env.possible_agents, 0.0)
        for agent in env.agent_iter():
            obs, _, terminated, truncated, info = env.last()
            assert set(env.infos) == set(env.agents)  # PettingZoo's bookkeeping is kept
            for facts in env.infos.values():
                assert set(facts) == keys and all(type(v) is float for v in facts.values())
            assert info == env.infos[agent]
            assert "card" in env.unwrapped.infos[agent]  # the text facts stay on the text env
            if terminated or truncated:
                assert info["return"] == info["total"] == returns[agent]  # Kuhn's own total agrees
                env.step(None)
                continue
            env.step(rng.choice(np.flatnonzero(obs["action_mask"]).tolist()))
            for a, reward in env.rewards.items():
                returns[a] += reward


def test_text_infos_are_the_text_envs_own():
    env = DiscreteActions(kuhn_poker_v0.env(), infos="text")
    env.reset(seed=0)
    assert env.infos["player_0"] is env.unwrapped.infos["player_0"] and "card" in env.infos["player_0"]


def test_a_text_fact_in_info_keys_is_refused_with_the_fix():
    env = DiscreteActions(kuhn_poker_v0.env(), info_keys=("card",))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"info 'card' is str .* not a number; .*infos='text'"):
        env.last()
    with pytest.raises(ValueError, match="infos must be 'numeric'"):
        DiscreteActions(kuhn_poker_v0.env(), infos="tensors")


def test_a_finished_agents_index_is_its_dead_step():
    env = make()
    env.reset(seed=0)
    env.step(MENU.index("[bet]"))
    env.step(MENU.index("[fold]"))  # player_1 folds: the hand is over
    assert env.agent_selection in env.agents and env.terminations[env.agent_selection]
    while env.agents:
        assert env.last()[0]["action_mask"].all()
        env.step(3)
    assert env.agents == []
