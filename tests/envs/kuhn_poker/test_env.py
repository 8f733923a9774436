"""kuhn_poker_v0 as a PettingZoo AEC env: API conformance, rewards, hidden information, bad replies."""

from __future__ import annotations

import random
import warnings

import pettingzoo
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import api_test, render_test, seed_test

import llm_zoo
from llm_zoo import kuhn_poker_v0


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # api_test warns that text observations are not numpy arrays
        yield


@pytest.mark.parametrize("kwargs", [{}, {"num_hands": 4}, {"max_retries": 0}])
def test_pettingzoo_api_seed_render(kwargs):
    api_test(kuhn_poker_v0.env(**kwargs), num_cycles=300)
    seed_test(lambda **kw: kuhn_poker_v0.env(**kwargs, **kw))
    render_test(lambda **kw: kuhn_poker_v0.env(**kwargs, **kw))


def test_registered_with_pettingzoo():
    env = pettingzoo.make("aec", "llm_zoo/kuhn_poker-v0", num_hands=2)
    env.reset(seed=0)
    assert env.unwrapped.num_hands == 2
    assert llm_zoo.make_env("kuhn_poker_v0").unwrapped.metadata["name"] == "kuhn_poker_v0"


def play(env, replies, seed=0, options=None):
    """Step the env with the given replies in turn order; return the final rewards of both players."""
    env.reset(seed=seed, options=options)
    totals = dict.fromkeys(env.possible_agents, 0.0)
    replies = list(replies)
    for agent in env.agent_iter():
        _, reward, term, trunc, _ = env.last()
        totals[agent] += reward
        env.step(None if term or trunc else replies.pop(0))
    assert not replies, f"unused replies {replies}"
    return totals


@pytest.mark.parametrize(
    ("deal", "replies", "p0"),
    [
        (("K", "J"), ["[bet]", "[fold]"], 1.0),
        (("J", "K"), ["[bet]", "[call]"], -2.0),
        (("Q", "J"), ["[check]", "[check]"], 1.0),
        (("J", "Q"), ["[check]", "[bet]", "[call]"], -2.0),
        (("K", "Q"), ["I have the best card: [check]", "bet", "[call]"], 2.0),
    ],
)
def test_scripted_hands_pay_by_the_rules(deal, replies, p0):
    totals = play(kuhn_poker_v0.env(), replies, options={"deal": [deal]})
    assert totals == {"player_0": p0, "player_1": -p0}


def test_match_alternates_first_player_and_sums_payoffs():
    env = kuhn_poker_v0.env(num_hands=3, render_mode="ansi")
    # hand 1: p0 first, bets K, p1 folds (+1 p0); hand 2: p1 first, checks, p0 checks, p1 has K (-1 p0);
    # hand 3: p0 first, bets J, p1 calls with Q (-2 p0)
    firsts = []
    env.reset(seed=0, options={"deal": [("K", "J"), ("Q", "K"), ("J", "Q")]})
    replies = ["[bet]", "[fold]", "[check]", "[check]", "[bet]", "[call]"]
    totals = dict.fromkeys(env.possible_agents, 0.0)
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        totals[agent] += reward
        if term or trunc:
            env.step(None)
            continue
        if info["info_set"].endswith(":"):
            firsts.append(agent)
        env.step(replies.pop(0))
    assert firsts == ["player_0", "player_1", "player_0"]
    assert totals == {"player_0": -2.0, "player_1": 2.0}
    assert "Hand 3" in env.render()


def test_observation_holds_card_legal_replies_and_info_set():
    env = kuhn_poker_v0.env()
    env.reset(seed=0, options={"deal": [("Q", "K")]})
    obs, *_, info = env.last()
    assert env.agent_selection == "player_0"
    assert obs["messages"][0]["role"] == "system"
    assert "Kuhn poker" in obs["messages"][0]["content"]
    assert "Your card: Q" in obs["messages"][-1]["content"]
    assert obs["legal_actions"] == ("[check]", "[bet]")
    assert obs["info_set"] == info["info_set"] == "Q:"
    env.step("[check]")
    obs, *_, info = env.last()
    assert obs["info_set"] == info["info_set"] == "K:check"
    assert "player_0 checks." in obs["messages"][-1]["content"]
    assert env.observe("player_0")["legal_actions"] == ()  # not its turn


def test_every_request_for_a_move_restates_the_players_own_card():
    env = kuhn_poker_v0.env(num_hands=2)
    env.reset(seed=3, options={"deal": [("Q", "K"), ("K", "J")]})
    asked = []
    for agent in env.agent_iter():
        obs, *_, info = env.last()
        if env.terminations[agent] or env.truncations[agent]:
            env.step(None)
            continue
        last = obs["messages"][-1]["content"].splitlines()[-1]
        asked.append((agent, info["card"], last))
        assert last == f"Your card: {info['card']}. Your move: " + " or ".join(obs["legal_actions"]) + "."
        env.step(obs["legal_actions"][0])
    cards = {(agent, card) for agent, card, _ in asked}
    assert cards == {("player_0", "Q"), ("player_1", "K"), ("player_0", "K"), ("player_1", "J")}


def test_hidden_information_never_leaks():
    """player_1 never sees player_0's card before a showdown, nor player_0's raw reply."""
    env = kuhn_poker_v0.env()
    env.reset(seed=0, options={"deal": [("J", "K")]})
    env.step("Holding the jack, I bluff: [bet] SECRET-REASONING")
    seen = " ".join(m["content"] for m in env.observe("player_1")["messages"])
    assert "SECRET-REASONING" not in seen and "jack" not in seen
    assert "player_0 bets." in seen
    assert "had J" not in seen
    env.step("[fold]")  # no showdown after a fold: the card stays hidden
    seen = " ".join(m["content"] for m in env.observe("player_1")["messages"])
    assert "had J" not in seen and "SECRET" not in seen
    env.reset(seed=0, options={"deal": [("J", "K")]})
    env.step("[bet]")
    env.step("[call]")
    seen = " ".join(m["content"] for m in env.observe("player_1")["messages"])
    assert "Showdown: player_0 had J" in seen


def test_invalid_reply_gets_feedback_then_forfeits():
    env = kuhn_poker_v0.env()
    env.reset(seed=0)
    env.step("no idea")
    assert env.agent_selection == "player_0"
    obs, *_, info = env.last()
    assert obs["messages"][-1]["content"].startswith("Invalid reply:")
    assert "Reply again" in obs["messages"][-1]["content"]
    assert info["invalid_replies"] == 1
    env.step("[bet] [check]")  # ambiguous: second invalid reply in a row forfeits
    rewards = {}
    for agent in env.agent_iter():
        _, reward, term, _, info = env.last()
        assert term
        rewards[agent] = reward
        env.step(None)
    assert rewards == {"player_0": -1.0, "player_1": 1.0}


def test_a_valid_reply_resets_the_retry_count_and_penalty_is_configurable():
    env = kuhn_poker_v0.env(max_retries=1, forfeit_penalty=3.0)
    env.reset(seed=0, options={"deal": [("J", "Q")]})
    env.step("hmm")
    env.step("[check]")  # valid after one retry
    env.step("??")
    env.step("[check]")
    assert env.terminations["player_0"]  # check-check showdown, no forfeit
    assert not env.infos["player_1"]["forfeit"]
    assert env.infos["player_1"]["invalid_replies"] == 1
    env = kuhn_poker_v0.env(max_retries=0, forfeit_penalty=3.0)
    env.reset(seed=0)
    env.step("??")
    assert env.rewards == {"player_0": -3.0, "player_1": 3.0}
    assert env.infos["player_0"]["forfeit"] and env.infos["player_0"]["forfeited_by"] == "player_0"


def test_non_str_reply_is_a_type_error():
    env = kuhn_poker_v0.env()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="must be a str"):
        env.step(1)
    with pytest.raises(TypeError, match="must be a str"):
        env.step(b"[bet]")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"num_hands": 0}, "num_hands"), ({"max_retries": -1}, "max_retries"),
     ({"forfeit_penalty": -1}, "forfeit_penalty"), ({"render_mode": "rgb_array"}, "render_mode")],
)
def test_bad_options_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        kuhn_poker_v0.env(**kwargs)


def test_bad_deal_option():
    env = kuhn_poker_v0.env()
    with pytest.raises(ValueError, match="deal"):
        env.reset(options={"deal": [("K", "K")]})


def test_long_replies_are_truncated_not_fatal():
    env = kuhn_poker_v0.env(max_reply_chars=100)
    env.reset(seed=0)
    env.step("x" * 10_000 + "[bet]")  # the move lies past the limit: invalid, not a crash
    obs, *_, info = env.last()
    assert info["truncated_replies"] == 1
    assert len(obs["messages"][-2]["content"]) <= 100
    assert env.observation_space("player_0").contains(obs)


def test_seeded_deals_repeat_and_vary():
    def cards(seed):
        env = kuhn_poker_v0.env(num_hands=5)
        env.reset(seed=seed)
        out = []
        for _agent in env.agent_iter():
            obs, _, term, trunc, info = env.last()
            out.append(info.get("card"))
            env.step(None if term or trunc else obs["legal_actions"][0])
        return out

    assert cards(7) == cards(7)
    assert len({tuple(cards(s)) for s in range(6)}) > 1


REPLIES = st.one_of(
    st.text(max_size=50),
    st.text(alphabet=st.characters(), min_size=0, max_size=3000),
    st.lists(st.sampled_from(["[bet]", "[check]", "[call]", "[fold]", "bet", "alphabet", "checks", "fold!"]),
             max_size=5).map(" ".join),
    st.sampled_from(["", " ", "\x00", "\ud7ff", "[", "]", "[[bet]]", "💰 [bet] 💰", "\r\n[check]\r\n"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(REPLIES, min_size=1, max_size=12), st.integers(0, 3))
def test_any_replies_keep_observations_in_space(replies, seed):
    env = kuhn_poker_v0.env(num_hands=2)
    env.reset(seed=seed)
    rng = random.Random(seed)
    for agent in env.agent_iter(max_iter=60):
        obs, _, term, trunc, _ = env.last()
        assert env.observation_space(agent).contains(obs)
        if term or trunc:
            env.step(None)
        elif replies:
            env.step(replies.pop(0))
        else:
            env.step(rng.choice(obs["legal_actions"]))
    for agent in env.possible_agents:
        assert env.observation_space(agent).contains(env.unwrapped.observe(agent))
