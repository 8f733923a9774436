"""FastOrderEnforcingWrapper against PettingZoo's OrderEnforcingWrapper: the same checks, errors, warnings and play."""

from __future__ import annotations

import logging
import random
import warnings

import pytest
from pettingzoo.test import api_test
from pettingzoo.utils.wrappers import OrderEnforcingWrapper

from llm_zoo import kuhn_poker_v0
from llm_zoo.envs.core import FastOrderEnforcingWrapper


def pair(**kwargs):
    """Return (PettingZoo's wrapper, ours), each around a fresh raw env built with ``kwargs``."""
    return OrderEnforcingWrapper(kuhn_poker_v0.raw_env(**kwargs)), FastOrderEnforcingWrapper(kuhn_poker_v0.raw_env(**kwargs))


def outcome(fn):
    """Return what calling ``fn`` did: ("ok", its result) or (exception type, message)."""
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001 - any error is compared between the two wrappers
        return type(exc), str(exc)


BEFORE_RESET = {
    "step": lambda env: env.step("[bet]"),
    "observe": lambda env: env.observe("player_0"),
    "last": lambda env: env.last(),
    "agent_iter": lambda env: env.agent_iter(),
    "render": lambda env: env.render(),
    "state": lambda env: env.state(),
    "private attribute": lambda env: env._hand,
    **{name: (lambda env, name=name: getattr(env, name))
       for name in ("rewards", "terminations", "truncations", "infos", "agent_selection", "num_agents", "agents")},
}


@pytest.mark.parametrize("call", sorted(BEFORE_RESET))
def test_misuse_before_reset_fails_alike(call):
    theirs, ours = pair(render_mode="ansi")
    expected = outcome(lambda: BEFORE_RESET[call](theirs))
    assert expected[0] is not None and expected[0] != "ok"
    assert outcome(lambda: BEFORE_RESET[call](ours)) == expected


def test_attributes_after_reset_match():
    theirs, ours = pair()
    for env in (theirs, ours):
        env.reset(seed=3)
    for name in ("rewards", "terminations", "truncations", "infos", "agent_selection", "num_agents", "agents",
                 "possible_agents", "_cumulative_rewards", "metadata", "render_mode", "max_num_agents"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert str(ours) == str(theirs) == "kuhn_poker_v0"
    assert isinstance(ours, OrderEnforcingWrapper)
    assert ours.unwrapped is ours.env and not isinstance(ours.unwrapped, OrderEnforcingWrapper)


def test_a_loop_that_skips_step_fails_alike():
    results = []
    for env in pair():
        env.reset(seed=0)
        iterator = iter(env.agent_iter())
        next(iterator)
        results.append(outcome(lambda iterator=iterator: next(iterator)))
    assert results[0] == results[1] == (AssertionError, "need to call step() or reset() in a loop over `agent_iter`")


def test_step_after_the_end_warns_alike(caplog):
    texts = []
    for env in pair():
        env.reset(seed=0)
        for _agent in env.agent_iter():
            obs, _, term, trunc, _ = env.last()
            env.step(None if term or trunc else obs["legal_actions"][0])
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            env.step(None)
        texts.append(caplog.text.split(":", 2)[-1])
    assert texts[0] == texts[1] and "step() called after all agents are terminated" in texts[0]


@pytest.mark.parametrize("kwargs", [{}, {"num_hands": 3}, {"max_retries": 0}])
def test_random_play_is_identical(kwargs):
    """Both wrappers give the same observations, rewards, flags and infos, replies good and bad alike."""
    traces = []
    for env in pair(**kwargs):
        rng, trace = random.Random(7), []
        for seed in range(40):
            env.reset(seed=seed)
            for agent in env.agent_iter(max_iter=30):
                obs, reward, term, trunc, info = env.last()
                trace.append((agent, obs, reward, term, trunc, dict(info), dict(env.rewards)))
                if term or trunc:
                    env.step(None)
                else:
                    env.step(rng.choice([*obs["legal_actions"], "no idea", "[bet] [fold]"]))
        traces.append(trace)
    assert traces[0] == traces[1]


def test_api_test_passes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # text observations are not numpy arrays
        api_test(FastOrderEnforcingWrapper(kuhn_poker_v0.raw_env(num_hands=2)), num_cycles=200)
