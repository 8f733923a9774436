"""Kuhn poker's precomputed tables and shortcuts agree with the plain computations they stand for."""

from __future__ import annotations

import itertools
import random
import re
import warnings

import numpy as np
import pytest
from gymnasium import spaces

from llm_zoo import kuhn_poker_v0
from llm_zoo.adapters import DiscreteActions
from llm_zoo.envs.core import sanitize
from llm_zoo.envs.kuhn_poker import env as kuhn_env
from llm_zoo.envs.kuhn_poker import text
from llm_zoo.envs.kuhn_poker.rules import CARDS, INFO_SET, LEGAL, NEXT, TERMINAL, Hand, Move, deal

HISTORIES = [*LEGAL, *TERMINAL]
_BRACKETED = re.compile(r"\[\s*(check|bet|call|fold)\s*\]", re.IGNORECASE)
_WORD = re.compile(r"(?<![\w-])(check|bet|call|fold)(?![\w-])", re.IGNORECASE)


def test_deal_draws_what_rng_sample_draws():
    """Seeded deals are the ones ``rng.sample(range(3), 2)`` made before the shortcut."""
    for seed in range(3000):
        ours, reference = random.Random(seed), random.Random(seed)
        for _ in range(3):
            assert deal(ours) == tuple(reference.sample(range(len(CARDS)), 2))


def test_info_set_table_is_the_formatted_string():
    for cards, history in itertools.product(itertools.permutations(range(len(CARDS)), 2), HISTORIES):
        hand = Hand(cards, history)
        for seat in (0, 1):
            expected = f"{CARDS[cards[seat]]}:{','.join(m.value for m in history)}"
            assert hand.info_set(seat) == INFO_SET[cards[seat], history] == expected
    assert Hand((0, 1), (Move.BET, Move.BET)).info_set(0) == "J:bet,bet"  # off the table: still formatted


def test_play_follows_legal_and_normalises_plain_strings():
    assert set(NEXT) == {(h, m) for h, moves in LEGAL.items() for m in moves}
    hand = Hand((2, 0)).play("check").play("bet")  # a str equal to a move's value is that move
    assert hand.history == (Move.CHECK, Move.BET) and all(type(m) is Move for m in hand.history)
    for history in HISTORIES:
        for move in set(Move) - set(LEGAL.get(history, ())):
            with pytest.raises(ValueError, match="illegal move"):
                Hand((2, 0), history).play(move)


@pytest.mark.parametrize("cards", [(1, 1), (0, 3), (-1, 0), (0,), (0, 1, 2)])
def test_bad_cards_are_refused(cards):
    with pytest.raises(ValueError, match="two different ranks"):
        Hand(cards)


def _parse_with_regexes(reply, legal):
    """parse_move as it was before the canonical-reply shortcut."""
    found = {m.lower() for m in _BRACKETED.findall(reply)} or {m.lower() for m in _WORD.findall(reply)}
    if len(found) != 1:
        return None
    move = Move(found.pop())
    return move if move in legal else None


@pytest.mark.parametrize("legal", [*LEGAL.values(), tuple(Move), ()])
def test_parse_shortcut_agrees_with_the_regexes(legal):
    replies = [*(text.reply_for(m) for m in Move), "[BET]", "[ bet ]", "bet", "[bet] [bet]", "[bet] call", "x"]
    for reply in replies:
        assert text.parse_move(reply, legal) == _parse_with_regexes(reply, legal), reply


def test_text_tables_match_the_text_functions():
    for history, moves in LEGAL.items():
        assert kuhn_env._LEGAL_REPLIES[history] == text.legal_replies(moves)
        for card in range(len(CARDS)):
            assert kuhn_env._PROMPT_LINE[card, history] == text.prompt_line(moves, card)
    for agent, move in itertools.product(kuhn_env.AGENTS, Move):
        assert kuhn_env._MOVE_LINE[agent, move] == text.move_line(agent, move)


def test_editing_an_observation_does_not_edit_the_env():
    env = kuhn_poker_v0.env()
    env.reset(seed=0)
    obs = env.observe("player_0")
    before = [dict(m) for m in obs["messages"]]
    for message in obs["messages"]:
        message["content"] = "tampered"
        message["role"] = "system"
    assert [dict(m) for m in env.observe("player_0")["messages"]] == before
    env.step(obs["legal_actions"][0])
    assert all(m["content"] != "tampered" for m in env.observe("player_0")["messages"])


def test_messages_are_sanitised_as_sanitize_does():
    env = kuhn_poker_v0.raw_env(max_reply_chars=5000, max_message_chars=2000)
    env.reset(seed=0)
    for reply in ["[bet]\r\nok", "\x00[check]\ud800", "é" * 1500 + "\x07", "[fold]" * 600]:
        env.tell("player_1", reply)
        assert env.observe("player_1")["messages"][-1]["content"] == sanitize(reply, 2000)


def test_the_transcript_is_kept_only_when_it_can_be_rendered():
    quiet = kuhn_poker_v0.raw_env(num_hands=2)
    shown = kuhn_poker_v0.raw_env(num_hands=2, render_mode="ansi")
    for env in (quiet, shown):
        env.reset(seed=1)
        while env.agents:
            agent = env.agent_selection
            done = env.terminations[agent] or env.truncations[agent]
            env.step(None if done else env.observe(agent)["legal_actions"][0])
    assert quiet._log == []  # nothing can show it: render() without a render_mode only warns
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert quiet.render() is None
    assert "Hand 2" in shown.render() and "wins" in shown.render()


def test_feature_space_bounds_every_feature_vector():
    env = kuhn_poker_v0.raw_env(num_hands=3)
    box = env.feature_space()
    assert box == spaces.Box(0.0, 1.0, (kuhn_env.FEATURE_SIZE,), np.float32)
    rng = random.Random(0)
    for seed in range(30):
        env.reset(seed=seed)
        while env.agents:
            agent = env.agent_selection
            for a in env.agents:
                assert box.contains(env.features(a))
            done = env.terminations[agent] or env.truncations[agent]
            env.step(None if done else rng.choice(env.observe(agent)["legal_actions"]))


def test_discrete_view_uses_the_declared_box_or_probes_without_one():
    bounded = DiscreteActions(kuhn_poker_v0.env())
    assert bounded.observation_space("player_0")["observation"] == kuhn_poker_v0.raw_env().feature_space()

    class Undeclared(kuhn_poker_v0.raw_env):
        def feature_space(self):
            return None  # TextEnv's default: bounds unknown

    probed = DiscreteActions(Undeclared())
    box = probed.observation_space("player_0")["observation"]
    assert box.shape == (kuhn_env.FEATURE_SIZE,) and np.isinf(box.low).all() and np.isinf(box.high).all()
