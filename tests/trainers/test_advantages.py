"""Advantage estimators against values computed by hand."""

from __future__ import annotations

import json

import pytest

from llm_zoo.trainers.advantages import RAEState, grpo, hgrpo, no_baseline, rae


def test_grpo_group_scale():
    # group a: rewards 1, 3 -> mean 2, std 1 -> (-1/1.0001, 1/1.0001); group b: 5 alone -> 0
    adv = grpo([1.0, 3.0, 5.0], ["a", "a", "b"])
    assert adv == pytest.approx([-1 / 1.0001, 1 / 1.0001, 0.0], abs=1e-12)


def test_grpo_batch_and_none_scale():
    rewards, groups = [0.0, 2.0, 4.0, 4.0], ["a", "a", "b", "b"]
    # batch mean 2.5, batch std sqrt(((2.5)^2 + .5^2 + 1.5^2 + 1.5^2) / 4) = sqrt(2.75)
    s = 2.75**0.5 + 1e-4
    assert grpo(rewards, groups, scale="batch") == pytest.approx([-1 / s, 1 / s, 0.0, 0.0])
    assert grpo(rewards, groups, scale="none") == [-1.0, 1.0, 0.0, 0.0]


def test_grpo_equal_rewards_give_zero_not_nan():
    assert grpo([1.0, 1.0, 1.0], [0, 0, 0]) == [0.0, 0.0, 0.0]


def test_grpo_errors():
    with pytest.raises(ValueError, match="one group per reward"):
        grpo([1.0], [])
    with pytest.raises(ValueError, match="scale"):
        grpo([1.0], [0], scale="global")


def test_rae_reads_the_baseline_before_updating_it():
    state = RAEState()
    # first batch: baselines 0 -> advantages = rewards; then b_p = 0.05 * mean(1, 3) = 0.1, b_q = 0.05 * -2 = -0.1
    assert rae([1.0, 3.0, -2.0], ["kuhn/player", "kuhn/player", "kuhn/q"], state) == [1.0, 3.0, -2.0]
    assert state.baselines == pytest.approx({"kuhn/player": 0.1, "kuhn/q": -0.1})
    # second batch: advantages against 0.1 / -0.1; then b_p = 0.95 * 0.1 + 0.05 * 0 = 0.095
    assert rae([0.0, 0.0], ["kuhn/player", "kuhn/q"], state) == pytest.approx([-0.1, 0.1])
    assert state.baselines == pytest.approx({"kuhn/player": 0.095, "kuhn/q": -0.095})


def test_rae_state_survives_json():
    state = RAEState()
    rae([1.0, 2.0], ["a", "b"], state, decay=0.5)
    again = RAEState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again == state
    assert rae([1.0], ["a"], again, decay=0.5) == rae([1.0], ["a"], state, decay=0.5)


def test_rae_decay_bounds():
    with pytest.raises(ValueError, match="decay"):
        rae([1.0], ["a"], RAEState(), decay=1.5)


def test_hgrpo_is_mean_relative_without_scaling():
    # solvers of problem p1: 1, 0, 0, 1 -> mean 0.5; proposers of topic t: 0.75, 0.25 -> mean 0.5
    adv = hgrpo([1, 0, 0, 1, 0.75, 0.25], ["p1"] * 4 + ["t", "t"])
    assert adv == pytest.approx([0.5, -0.5, -0.5, 0.5, 0.25, -0.25])
    assert hgrpo([3.0], ["alone"]) == [0.0]


def test_no_baseline():
    assert no_baseline([1, -2]) == [1.0, -2.0]
