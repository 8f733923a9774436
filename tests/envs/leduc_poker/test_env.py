"""leduc_poker_v0 as a PettingZoo AEC env: API conformance, rewards, hidden information, bad replies, discrete view."""

from __future__ import annotations

import warnings

import numpy as np
import pettingzoo
import pytest
from pettingzoo.test import api_test, render_test, seed_test

import llm_zoo
from llm_zoo import leduc_poker_v0
from llm_zoo.adapters import DiscreteActions
from llm_zoo.envs.leduc_poker import text, theory
from llm_zoo.envs.leduc_poker.env import MENU


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # api_test warns that text observations are not numpy arrays
        yield


@pytest.mark.parametrize("kwargs", [{}, {"num_hands": 3}, {"max_retries": 0}])
def test_pettingzoo_api_seed_render(kwargs):
    api_test(leduc_poker_v0.env(**kwargs), num_cycles=300)
    seed_test(lambda **kw: leduc_poker_v0.env(**kwargs, **kw))
    render_test(lambda **kw: leduc_poker_v0.env(**kwargs, **kw))


def test_discrete_view_passes_api_and_seed_tests():
    api_test(DiscreteActions(leduc_poker_v0.env()), num_cycles=300)
    seed_test(lambda **kw: DiscreteActions(leduc_poker_v0.env(**kw)))
    env = DiscreteActions(leduc_poker_v0.env())
    env.reset(seed=0, options={"deal": [("K", "Q", "J")]})
    obs, *_ = env.last()
    assert MENU == ("[check]", "[bet]", "[call]", "[raise]", "[fold]")
    assert obs["action_mask"].tolist() == [1, 1, 0, 0, 0]
    env.step(MENU.index("[bet]"))
    obs, *_ = env.last()
    assert obs["action_mask"].tolist() == [0, 0, 1, 1, 1]
    assert obs["observation"][1] == 1.0  # player_1's own card, Q, and no public card yet
    assert obs["observation"][3:6].sum() == 0


def test_registered_with_pettingzoo_and_llm_zoo():
    env = pettingzoo.make("aec", "llm_zoo/leduc_poker-v0", num_hands=2)
    env.reset(seed=0)
    assert env.unwrapped.num_hands == 2
    assert "leduc_poker_v0" in llm_zoo.registered()
    assert llm_zoo.make_env("leduc_poker_v0").unwrapped.metadata["name"] == "leduc_poker_v0"
    assert set(llm_zoo.env_spec("leduc_poker_v0").scripted) == {"random", "card", "card_exploiter"}


def play(env, replies, options=None, seed=0):
    """Step the env with the given replies in turn order; return the total rewards of both players."""
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
        (("K", "J", "Q"), ["[bet]", "[fold]"], 1.0),
        (("K", "J", "Q"), ["[bet]", "[raise]", "[fold]"], -3.0),
        (("K", "J", "Q"), ["[check]", "[check]", "[check]", "[check]"], 1.0),
        (("J", "K", "J"), ["[bet]", "[call]", "[bet]", "[raise]", "[call]"], 11.0),  # pair of jacks
        (("Q", "Q", "K"), ["[check]", "[bet]", "[call]", "[bet]", "I raise", "[call]"], 0.0),  # split pot
        (("K", "Q", "Q"), ["[bet]", "[raise]", "[call]", "[bet]", "[raise]", "[call]"], -13.0),
    ],
)
def test_scripted_hands_pay_by_the_rules(deal, replies, p0):
    totals = play(leduc_poker_v0.env(), replies, options={"deal": [deal]})
    assert totals == {"player_0": p0, "player_1": -p0}


def test_match_alternates_first_player_and_sums_payoffs():
    env = leduc_poker_v0.env(num_hands=2, render_mode="ansi")
    # hand 1: player_0 first, bets, player_1 folds (+1); hand 2: player_1 first, bets, player_0 folds (-1 for p0)
    totals = play(env, ["[bet]", "[fold]", "[bet]", "[fold]"], options={"deal": [("K", "J", "Q"), ("J", "K", "Q")]})
    assert totals == {"player_0": 0.0, "player_1": 0.0}
    assert "Hand 2: player_1 has K" in env.render()


def test_observation_shows_own_card_public_card_and_legal_replies_only():
    env = leduc_poker_v0.env()
    env.reset(seed=0, options={"deal": [("Q", "K", "J")]})
    obs, *_, info = env.last()
    assert obs["legal_actions"] == ("[check]", "[bet]") and obs["info_set"] == info["info_set"] == "Q:"
    assert obs["messages"][-1]["content"].endswith("Your card: Q. Your move: [check] or [bet].")
    env.step("Holding the queen, I bet. [bet] SECRET")
    obs, *_, info = env.last()
    assert obs["info_set"] == "K:bet" and obs["legal_actions"] == ("[fold]", "[call]", "[raise]")
    seen = " ".join(m["content"] for m in obs["messages"][1:])  # past the system prompt, which names J < Q < K
    assert "SECRET" not in seen and "queen" not in seen and "Q" not in seen  # no raw reply, no opponent card
    env.step("[call]")
    obs, *_, info = env.last()
    assert env.agent_selection == "player_0" and obs["info_set"] == "QJ:bet,call/"
    assert "Round 2. Public card: J." in obs["messages"][-1]["content"]
    assert info["public"] == "J"
    assert env.observe("player_1")["legal_actions"] == ()


def test_forfeit_costs_the_most_a_hand_can_cost_by_default():
    env = leduc_poker_v0.env(max_retries=0, num_hands=2)
    env.reset(seed=0)
    env.step("no idea")
    assert env.rewards == {"player_0": -26.0, "player_1": 26.0}  # 13 a hand, two hands left
    env = leduc_poker_v0.env(max_retries=1, forfeit_penalty=2.0)
    env.reset(seed=0, options={"deal": [("K", "J", "Q")]})
    env.step("??")
    assert env.agent_selection == "player_0" and "Reply again" in env.observe("player_0")["messages"][-1]["content"]
    env.step("[bet] [check]")
    assert env.rewards == {"player_0": -2.0, "player_1": 2.0}
    assert env.infos["player_0"]["forfeited_by"] == "player_0"


def test_no_invalid_reply_pays_better_than_folding():
    """The default forfeit is never cheaper than the worst legal line from any decision."""
    env = leduc_poker_v0.env(max_retries=0)
    for deal in [("K", "Q", "Q"), ("J", "K", "J")]:
        for prefix in ([], ["[bet]", "[raise]", "[call]", "[bet]"]):
            env.reset(seed=0, options={"deal": [deal]})
            for reply in prefix:
                env.step(reply)
            env.step("nothing")
            assert min(env.rewards.values()) == -13.0


@pytest.mark.parametrize(("kwargs", "match"), [({"num_hands": 0}, "num_hands"), ({"forfeit_penalty": -1}, "forfeit_penalty"),
                                               ({"max_retries": -1}, "max_retries")])
def test_bad_options_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        leduc_poker_v0.env(**kwargs)


def test_bad_deal_option():
    env = leduc_poker_v0.env()
    with pytest.raises(ValueError, match="no rank three times"):
        env.reset(options={"deal": [("K", "K", "K")]})
    with pytest.raises(ValueError, match="triples"):
        env.reset(options={"deal": [("K", "Q")] * 2})


def test_every_info_set_of_the_theory_arises_in_the_env():
    from llm_zoo.envs.leduc_poker.rules import NODES, RANKS, History, history_text

    lines: list[History] = [h for h, n in NODES.items() if n.to_act is None]
    seen = set()
    env = leduc_poker_v0.env()
    for ranks in theory.DEALS:
        for line in lines:
            env.reset(seed=0, options={"deal": [tuple(RANKS[r] for r in ranks)]})
            for move in (m for moves in line for m in moves):
                seen.add(env.observe(env.agent_selection)["info_set"])
                env.step(f"[{move.value}]")
            assert env.terminations["player_0"], history_text(line)
    assert seen == set(theory.INFO_SETS)


def test_seeded_deals_repeat_and_vary():
    def cards(seed):
        env = leduc_poker_v0.env(num_hands=4)
        env.reset(seed=seed)
        out = []
        for _agent in env.agent_iter():
            obs, _, term, trunc, info = env.last()
            out.append((info.get("card"), info.get("public")))
            env.step(None if term or trunc else obs["legal_actions"][0])
        return out

    assert cards(7) == cards(7)
    assert len({tuple(cards(s)) for s in range(6)}) > 1


def test_parse_move_is_lenient_about_wording_and_strict_about_ambiguity():
    from llm_zoo.envs.leduc_poker.rules import Move

    facing = (Move.FOLD, Move.CALL, Move.RAISE)
    assert text.parse_move("[raise]", facing) is Move.RAISE
    assert text.parse_move("I think I should RAISE", facing) is Move.RAISE
    assert text.parse_move("I could fold but [call]", facing) is Move.CALL
    assert text.parse_move("raised", facing) is None
    assert text.parse_move("[call] [raise]", facing) is None
    assert text.parse_move("[check]", facing) is None
    assert all(text.parse_move(r, facing) is m for r, m in zip(text.legal_replies(facing), facing))


def test_each_move_is_one_token_of_the_word_tokenizer():
    from llm_zoo.models import build_word_tokenizer

    tokenizer = build_word_tokenizer(leduc_poker_v0.SPEC.corpus())
    for reply in MENU:
        assert len(tokenizer.encode(reply, add_special_tokens=False)) == 1
    env = leduc_poker_v0.env(rules_in_prompt=False)
    env.reset(seed=0)
    ids = tokenizer.encode(" ".join(m["content"] for m in env.observe("player_0")["messages"]))
    assert tokenizer.unk_token_id not in ids


def test_features_are_the_players_information_only():
    a, b = leduc_poker_v0.raw_env(), leduc_poker_v0.raw_env()
    a.reset(seed=0, options={"deal": [("K", "Q", "J")]})
    b.reset(seed=0, options={"deal": [("K", "J", "Q")]})  # another opponent card and public card
    assert np.array_equal(a.features("player_0"), b.features("player_0"))
