"""Tests for llm_zoo.trainers.rollout.collect: batching, policy mapping, determinism, failures."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pytest
from pettingzoo.utils.wrappers import BaseWrapper

from llm_zoo import kuhn_poker_v0
from llm_zoo.envs.kuhn_poker.scripted import card_player, nash_player, uniform_player
from llm_zoo.policies import FunctionPolicy, Policy, RandomPolicy, Reply
from llm_zoo.trainers.rollout import collect


class Counting(Policy):
    """Wraps a policy and records the agents of each batched call."""

    def __init__(self, inner: Policy, name: str | None = None) -> None:
        self.inner, self.name = inner, name or inner.name
        self.calls: list[list[str]] = []

    def act(self, observations: Sequence[dict]) -> list[Reply]:
        self.calls.append([_agent(obs) for obs in observations])
        return [Reply(str(r), policy=self.name) for r in self.inner.act(observations)]

    def seed(self, seed: int | None) -> None:
        self.inner.seed(seed)


class RefusesKings(Counting):
    """Raises for any batch holding an observation whose info set starts with K."""

    def act(self, observations: Sequence[dict]) -> list[Reply]:
        self.calls.append([_agent(obs) for obs in observations])
        if any(obs["info_set"].startswith("K") for obs in observations):
            raise ValueError("this policy refuses to play a king")
        return self.inner.act(observations)


class StepFailsOnSeed(BaseWrapper):
    """Kuhn poker whose step raises during the episode reset with ``bad_seed``."""

    def __init__(self, env, bad_seed: int) -> None:
        super().__init__(env)
        self.bad_seed = bad_seed

    def step(self, action):
        if self.env.unwrapped.episode_seed == self.bad_seed:
            raise RuntimeError("the table collapsed")
        super().step(action)


def _agent(obs: dict) -> str:
    return obs["messages"][0]["content"].split()[2]  # "You are player_0 in a match of ..."


def card_players() -> dict[str, Policy]:
    """Deterministic players (each move has probability 0 or 1), so outcomes depend on the deal only."""
    return {"player": card_player(seed=0)}


def test_one_shared_policy_gets_one_batched_call_per_tick():
    shared = Counting(nash_player(seed=0))
    episodes = collect(kuhn_poker_v0.env, {"player": shared}, 8, batch_size=8, seed=0)
    turns = [len(e.turns) for e in episodes]
    # Every env starts at tick 0 and moves one turn per tick, so there are max(turns) ticks.
    assert len(shared.calls) == max(turns)
    assert len(shared.calls[0]) == 8
    assert sum(len(c) for c in shared.calls) == sum(turns)  # finished agents were never asked
    assert [len(c) for c in shared.calls] == sorted((len(c) for c in shared.calls), reverse=True)


def test_agent_names_and_roles_pick_the_policies():
    first, second = Counting(nash_player(seed=0), "p"), Counting(uniform_player(seed=0), "q")
    episodes = collect(kuhn_poker_v0.env, {"player": first, "player_1": second}, 6, batch_size=3,
                       options={"deal": [("Q", "K")]}, seed=1)
    for episode in episodes:
        assert episode.policies == {"player_0": "p", "player_1": "q"}
        assert episode.roles == {"player_0": "player", "player_1": "player"}
        assert all(t.policy == {"player_0": "p", "player_1": "q"}[t.agent] for t in episode.turns)
    assert {a for call in first.calls for a in call} == {"player_0"}
    assert {a for call in second.calls for a in call} == {"player_1"}
    ticks = max(len(e.turns) for e in episodes) * 2  # two waves of three episodes
    assert len(first.calls) <= ticks and len(second.calls) <= ticks


def test_per_episode_mappings_share_the_learner_in_one_call_per_tick():
    learner = Counting(nash_player(seed=0), "learner")
    pool = [uniform_player(seed=1), card_player(seed=2)]
    maps = [{"player_0": learner, "player_1": pool[i % 2]} for i in range(6)]
    episodes = collect(kuhn_poker_v0.env, maps, 6, batch_size=6, seed=0)
    assert [e.policies["player_1"] for e in episodes] == ["uniform", "card"] * 3
    assert all(e.policies["player_0"] == "learner" for e in episodes)
    assert len(learner.calls[0]) == 6
    assert len(learner.calls) <= max(len(e.turns) for e in episodes)


def test_episodes_come_back_in_seed_order_with_zero_sum_returns():
    episodes = collect("kuhn_poker_v0", {"player": nash_player()}, [5, 3, 9, 1, 4], batch_size=2, seed=0)
    assert [e.seed for e in episodes] == [5, 3, 9, 1, 4]
    for episode in episodes:
        assert not episode.failed and episode.error is None and episode.env_id == "kuhn_poker_v0"
        assert sum(episode.returns.values()) == 0
        for agent in episode.agents:
            assert sum(t.reward for t in episode.turns_of(agent)) == episode.returns[agent]
            assert episode.infos[agent]["total"] == episode.returns[agent]
    assert [e.seed for e in collect(kuhn_poker_v0.env, card_players(), 3, seed=10)] == [10, 11, 12]


def test_same_seed_gives_identical_episodes():
    def run(seed):
        return collect(kuhn_poker_v0.env, {"player_0": nash_player(), "player_1": RandomPolicy()}, 16,
                       batch_size=5, seed=seed)

    assert run(3) == run(3)
    assert run(3) != run(4)
    players = {"player": nash_player()}
    assert collect(kuhn_poker_v0.env, players, 12, seed=7) == collect(kuhn_poker_v0.env, players, 12, seed=7)


def test_env_kwargs_and_options_are_recorded_and_used():
    (episode,) = collect(functools.partial(kuhn_poker_v0.env, num_hands=2), card_players(), 1)
    assert episode.env_kwargs == {"num_hands": 2} and len(episode.infos["player_0"]["payoffs"]) == 2
    (episode,) = collect("kuhn_poker_v0", card_players(), 1, env_kwargs={"num_hands": 3})
    assert episode.env_kwargs == {"num_hands": 3} and len(episode.infos["player_0"]["payoffs"]) == 3
    deals = [{"deal": [("K", "J")]}, {"deal": [("J", "Q")]}]
    episodes = collect(kuhn_poker_v0.env, card_players(), 2, options=deals)
    assert [e.options for e in episodes] == [{"deal": [["K", "J"]]}, {"deal": [["J", "Q"]]}]
    assert [e.infos["player_0"]["card"] for e in episodes] == ["K", "J"]


def test_a_broken_env_fails_only_its_episode():
    clean = collect(kuhn_poker_v0.env, card_players(), 8, batch_size=4)
    made = []

    def make_env():
        made.append(StepFailsOnSeed(kuhn_poker_v0.env(), bad_seed=2))
        return made[-1]

    episodes = collect(make_env, card_players(), 8, batch_size=4)
    assert [e.failed for e in episodes] == [i == 2 for i in range(8)]
    assert "RuntimeError: the table collapsed" in episodes[2].error and "Traceback" in episodes[2].error
    assert all(e == c for i, (e, c) in enumerate(zip(episodes, clean)) if i != 2)
    assert len(made) == 5  # the broken env was replaced by a fresh one


def test_a_bad_reset_fails_only_its_episode():
    options = [{"deal": [("J", "Q")]}, {"deal": [("K", "K")]}, {"deal": [("Q", "J")]}]
    episodes = collect(kuhn_poker_v0.env, card_players(), 3, options=options)
    assert [e.failed for e in episodes] == [False, True, False]
    assert "ValueError" in episodes[1].error and "options['deal']" in episodes[1].error
    assert episodes[1].turns == [] and episodes[2].returns == {"player_0": 1.0, "player_1": -1.0}


def test_a_policy_that_raises_fails_only_the_episodes_whose_observation_it_refuses():
    clean = collect(kuhn_poker_v0.env, card_players(), 12, batch_size=6)
    refuser = RefusesKings(card_player(seed=0))
    episodes = collect(kuhn_poker_v0.env, {"player": refuser}, 12, batch_size=6)
    for episode, reference in zip(episodes, clean):
        holds_king = "K" in (reference.infos["player_0"]["card"], reference.infos["player_1"]["card"])
        assert episode.failed == holds_king
        if holds_king:
            assert "ValueError: this policy refuses to play a king" in episode.error
        else:
            assert episode == reference and sum(episode.returns.values()) == 0
    assert 0 < sum(e.failed for e in episodes) < len(episodes)
    # The batched call raised, so the observations were retried one at a time.
    assert any(len(call) > 1 for call in refuser.calls) and any(len(call) == 1 for call in refuser.calls)


def test_policy_contract_violations_raise_naming_the_policy():
    short = FunctionPolicy(lambda obs: "[check]", name="short")
    short.act = lambda observations: [Reply("[check]")]
    with pytest.raises(RuntimeError, match=r"policy 'short' \(FunctionPolicy\) returned 1 replies for 4 observations"):
        collect(kuhn_poker_v0.env, {"player": short}, 4, batch_size=4)
    number = FunctionPolicy(lambda obs: "[check]", name="number")
    number.act = lambda observations: [7 for _ in observations]
    with pytest.raises(TypeError, match=r"policy 'number' \(FunctionPolicy\) returned a int reply"):
        collect(kuhn_poker_v0.env, {"player": number}, 2)


def test_caller_mistakes_are_reported_before_any_episode_runs():
    with pytest.raises(ValueError, match=r"no policy for agent 'player_1' \(role 'player'\)"):
        collect(kuhn_poker_v0.env, {"player_0": nash_player()}, 2)
    with pytest.raises(ValueError, match="policies has 2 entries but there are 3 episodes"):
        collect(kuhn_poker_v0.env, [card_players(), card_players()], 3)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        collect(kuhn_poker_v0.env, card_players(), 2, batch_size=0)
    with pytest.raises(TypeError, match="seeds must be a count or a sequence"):
        collect(kuhn_poker_v0.env, card_players(), "12")
    assert collect(kuhn_poker_v0.env, card_players(), 0) == []


def test_max_steps_stops_an_episode_that_would_not_end():
    babbler = FunctionPolicy(lambda obs: "hmm", name="babbler")
    episodes = collect(functools.partial(kuhn_poker_v0.env, max_retries=100), {"player": babbler}, 2, max_steps=5)
    assert all(e.failed and "max_steps=5" in e.error and len(e.turns) == 5 for e in episodes)


def test_progress_bar_shows_finished_episodes(capsys):
    collect(kuhn_poker_v0.env, card_players(), 5, batch_size=2, progress="kuhn rollouts")
    collect(kuhn_poker_v0.env, card_players(), 2, progress=True)
    err = capsys.readouterr().err
    assert "kuhn rollouts" in err and "5/5" in err and "2/2" in err


def test_the_cyclic_collector_is_paused_during_a_collection_and_still_frees_young_cycles(monkeypatch):
    import gc
    import weakref

    from llm_zoo.trainers import rollout

    class Node:
        """A reference cycle: only the cyclic collector frees it."""

        def __init__(self) -> None:
            self.me = self

    class CycleMaker(Counting):
        """Leaves a reference cycle behind at every call, and records what the collector is doing."""

        def act(self, observations: Sequence[dict]) -> list[Reply]:
            enabled.append(gc.isenabled())
            node = Node()
            cycles.append(weakref.ref(node))
            freed.append(sum(ref() is None for ref in cycles))
            return super().act(observations)

    enabled: list[bool] = []
    cycles: list[weakref.ref] = []
    freed: list[int] = []
    policy = CycleMaker(uniform_player(seed=0))
    assert gc.isenabled()
    episodes = collect(kuhn_poker_v0.env, {"player": policy}, 4, batch_size=2, seed=0)
    assert all(not e.failed for e in episodes)
    assert enabled and not any(enabled) and gc.isenabled()
    # the records went straight to the oldest generation, unwalked; the cycles made meanwhile are
    # still garbage the next full collection frees
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(e) in oldest and id(e.turns[0]) in oldest for e in episodes)
    assert any(ref() is not None for ref in cycles)
    gc.collect()
    assert all(ref() is None for ref in cycles) and gc.get_freeze_count() == 0
    # young collections still run in a long collection: with a low limit, cycles are freed as it goes
    monkeypatch.setattr(rollout, "_YOUNG_LIMIT", 50)
    enabled[:], cycles[:], freed[:] = [], [], []
    collect(kuhn_poker_v0.env, {"player": policy}, 40, batch_size=2, seed=0)
    assert not any(enabled) and freed[-1] > 0 and gc.isenabled()

    # a policy that breaks its contract raises out of collect, and the collector runs again
    class Mute(Counting):
        def act(self, observations: Sequence[dict]) -> list[Reply]:
            return []

    with pytest.raises(RuntimeError, match="replies"):
        collect(kuhn_poker_v0.env, {"player": Mute(uniform_player(seed=0))}, 2, seed=0)
    assert gc.isenabled()
    # a caller who turned the collector off keeps it off, and a caller's freeze stays theirs
    gc.disable()
    try:
        collect(kuhn_poker_v0.env, {"player": policy}, 2, seed=0)
        assert not gc.isenabled()
    finally:
        gc.enable()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        collect(kuhn_poker_v0.env, {"player": policy}, 2, seed=0)
        # (the count only falls, as frozen objects are freed by reference counting)
        assert 0 < gc.get_freeze_count() <= frozen and gc.isenabled()
    finally:
        gc.unfreeze()


class CloseRaises(BaseWrapper):
    """Kuhn poker whose ``close()`` raises (after closing), optionally with a step that raises on ``bad_seed``."""

    def __init__(self, env, bad_seed: int | None = None) -> None:
        super().__init__(env)
        self.bad_seed = bad_seed

    def step(self, action):
        if self.env.unwrapped.episode_seed == self.bad_seed:
            raise RuntimeError("the table collapsed")
        super().step(action)

    def close(self):
        super().close()
        raise OSError("the casino is on fire")


def test_an_env_whose_close_raises_loses_no_episode_and_the_failure_is_recorded():
    clean = collect(kuhn_poker_v0.env, card_players(), 10, batch_size=3)
    episodes = collect(lambda: CloseRaises(kuhn_poker_v0.env()), card_players(), 10, batch_size=3)
    assert len(episodes) == 10 and not any(e.failed for e in episodes)
    assert [e.returns for e in episodes] == [c.returns for c in clean]
    assert [e.turns for e in episodes] == [c.turns for c in clean]
    noted = [e for e in episodes if e.error is not None]
    assert len(noted) == 3  # each of the three envs is closed once, after the last episode it ran
    assert all("close() raised" in e.error and "OSError: the casino is on fire" in e.error for e in noted)


def test_an_env_whose_step_and_close_both_raise_records_both_on_its_failed_episode():
    episodes = collect(lambda: CloseRaises(kuhn_poker_v0.env(), bad_seed=4), card_players(), 8, batch_size=2)
    assert [e.failed for e in episodes] == [i == 4 for i in range(8)]
    assert "RuntimeError: the table collapsed" in episodes[4].error
    assert "OSError: the casino is on fire" in episodes[4].error.split("the table collapsed", 1)[1]
    assert all(not e.failed and e.returns for i, e in enumerate(episodes) if i != 4)


def test_a_make_env_that_fails_later_fails_only_the_episodes_it_could_not_serve():
    made = []

    def make_env():
        made.append(None)
        if len(made) == 2:
            raise RuntimeError("out of tables")
        return StepFailsOnSeed(kuhn_poker_v0.env(), bad_seed=1)

    episodes = collect(make_env, card_players(), 4, batch_size=1)
    # episode 1's step raises and its env is discarded; the replacement cannot be built for episode 2
    assert [e.failed for e in episodes] == [False, True, True, False]
    assert "make_env() raised" in episodes[2].error and "RuntimeError: out of tables" in episodes[2].error
    assert episodes[2].seed == 2 and episodes[2].turns == []
    assert episodes[3].returns and len(made) == 3


def test_infos_that_cannot_become_a_record_fail_only_their_episode():
    class Unprintable:
        def __str__(self):
            raise ValueError("no text for you")

    class BadInfos(BaseWrapper):
        def last(self, observe=True):
            obs, reward, term, trunc, info = super().last(observe)
            if self.env.unwrapped.episode_seed == 1:
                info = {**info, "weird": Unprintable()}
            return obs, reward, term, trunc, info

    episodes = collect(lambda: BadInfos(kuhn_poker_v0.env()), card_players(), 3, batch_size=3)
    assert [e.failed for e in episodes] == [False, True, False]
    assert "could not be built" in episodes[1].error and "no text for you" in episodes[1].error
    assert episodes[1].infos == {} and episodes[1].turns
