"""OpenSpiel's NFSP on Leduc: the average policy read at the 288 info sets, scored exactly, seeded runs repeat."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from llm_zoo.envs.leduc_poker import theory
from llm_zoo.trainers.baselines import leduc

# small buffers and frequent updates, so both networks learn within a few dozen hands
TINY = {"hidden_layers_sizes": [16], "replay_buffer_capacity": 500, "reservoir_buffer_capacity": 500,
        "min_buffer_size_to_learn": 8, "batch_size": 8, "learn_every": 4, "anticipatory_param": 0.5}


@pytest.fixture(scope="module")
def run():
    return leduc.train_nfsp(90, seed=0, evaluations=3, model_kwargs=TINY)


def test_the_curve_is_scored_exactly_and_grows_in_episodes_and_seconds(run):
    assert [p.work for p in run.curve] == [30, 60, 90] and run.work == 90
    assert all(a.seconds < b.seconds for a, b in zip(run.curve, run.curve[1:]))
    assert run.seconds == run.curve[-1].seconds
    assert theory.validate_policy(run.policy) == run.policy and set(run.policy) == set(theory.INFO_SETS)
    assert run.exploitability == theory.exploitability(run.policy) == run.curve[-1].exploitability
    assert all(math.isfinite(p.exploitability) and p.exploitability >= 0 for p in run.curve)
    assert len({p.exploitability for p in run.curve}) > 1  # the average network learned between evaluations


def test_the_read_out_is_the_agents_own_average_policy(run):
    """OpenSpiel's exploitability of the agents, asked state by state over its own tree, equals ours of the table."""
    import pyspiel
    from open_spiel.python import policy, rl_environment
    from open_spiel.python.algorithms import exploitability
    from open_spiel.python.pytorch.nfsp import MODE

    game = pyspiel.load_game("leduc_poker", leduc.NFSP_GAME)

    class Average(policy.Policy):
        def action_probabilities(self, state, player_id=None):
            player, legal = state.current_player(), state.legal_actions()
            observations = {"info_state": [state.information_state_tensor(player)] * 2,
                            "legal_actions": [legal] * 2, "current_player": player}
            with run.agents[player].temp_mode_as(MODE.AVERAGE_POLICY):
                probs = run.agents[player].step(rl_environment.TimeStep(observations, None, None, None),
                                                is_evaluation=True).probs
            mass = sum(float(probs[a]) for a in legal)
            return {a: float(probs[a]) / mass for a in legal}

    theirs = exploitability.exploitability(game, Average(game, [0, 1]))
    assert abs(theirs - theory.exploitability(leduc.nfsp_strategy(run.agents))) < 1e-9
    assert abs(theirs - theory.UNIFORM_EXPLOITABILITY) > 1e-3  # a trained network, not the uniform strategy
    # and OpenSpiel's exploitability on this game agrees with ours on a strategy it did not produce
    uniform = exploitability.exploitability(game, policy.UniformRandomPolicy(game))
    assert abs(uniform - theory.UNIFORM_EXPLOITABILITY) < 1e-9


def test_reading_the_strategy_leaves_numpys_random_state_alone(run):
    before = np.random.get_state()[1].copy()
    leduc.nfsp_strategy(run.agents)
    assert np.array_equal(np.random.get_state()[1], before)


def test_the_same_seed_gives_the_same_curve_and_threads_are_restored(run):
    threads = torch.get_num_threads()
    again = leduc.train_nfsp(90, seed=0, evaluations=3, model_kwargs=TINY)
    assert torch.get_num_threads() == threads
    assert [p.exploitability for p in again.curve] == [p.exploitability for p in run.curve]
    assert again.policy == run.policy
    other = leduc.train_nfsp(90, seed=1, evaluations=3, model_kwargs=TINY)
    assert other.policy != run.policy


@pytest.mark.parametrize("episodes", [0, -5, 1.5, "100", True, None])
def test_bad_episode_counts_are_refused(episodes):
    with pytest.raises(ValueError, match=r"episodes must be an integer >= 1; got"):
        leduc.train_nfsp(episodes)


def test_unknown_model_kwargs_are_refused_with_the_known_keys():
    with pytest.raises(ValueError, match=r"unknown model_kwargs \['hidden_size'\].*anticipatory_param"):
        leduc.train_nfsp(10, model_kwargs={"hidden_size": 8})
