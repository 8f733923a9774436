"""CFR+ and MaskablePPO on Leduc, read into the tabular form and scored exactly."""

from __future__ import annotations

import numpy as np
import pytest

from llm_zoo import leduc_poker_v0
from llm_zoo.adapters import DiscreteActions
from llm_zoo.envs.leduc_poker import theory
from llm_zoo.trainers.baselines import leduc


def test_cfr_plus_average_policy_improves_and_is_scored_exactly():
    result = leduc.solve_cfr("cfr+", [1, 3])
    assert [p.work for p in result.curve] == [1, 3]
    first, third = (p.exploitability for p in result.curve)
    assert third < first <= theory.UNIFORM_EXPLOITABILITY + 1e-12
    assert result.exploitability == pytest.approx(theory.exploitability(result.policy), abs=1e-12)
    assert result.curve[0].seconds < result.curve[1].seconds
    with pytest.raises(ValueError, match="increasing"):
        leduc.solve_cfr("cfr+", [3, 1])
    with pytest.raises(ValueError, match="unknown solver"):
        leduc.solve_cfr("dqn", [1])


def test_info_set_inputs_are_the_discrete_views_at_each_info_set():
    features, masks = leduc.info_set_inputs()
    assert features.shape[0] == masks.shape[0] == len(theory.INFO_SETS)
    menu = [r.strip("[]") for r in DiscreteActions(leduc_poker_v0.env()).menu]
    for info_set, mask in zip(theory.INFO_SETS, masks):
        assert sorted(m for m, on in zip(menu, mask) if on) == sorted(theory.legal_moves(info_set))
    assert len({f.tobytes() for f in features}) == len(theory.INFO_SETS)  # every info set looks different


def test_average_policy_weights_each_table_by_its_own_reach():
    uniform = theory.uniform_policy()
    assert leduc.average_policy([uniform, uniform]) == theory.validate_policy(uniform)
    # a table that never bets with a jack first cannot speak for "J:bet,raise"; the other one decides it
    never = {**uniform, "J:": {"check": 1.0, "bet": 0.0}, "J:bet,raise": {"fold": 1.0, "call": 0.0}}
    always = {**uniform, "J:": {"check": 0.0, "bet": 1.0}, "J:bet,raise": {"fold": 0.0, "call": 1.0}}
    mixed = leduc.average_policy([never, always])
    assert mixed["J:bet,raise"] == {"fold": 0.0, "call": 1.0}
    assert mixed["J:"] == {"check": 0.5, "bet": 0.5}


def test_maskable_ppo_runs_and_its_strategy_is_masked():
    result = leduc.train_maskable_ppo(512, seed=0, n_envs=2, model_kwargs={"n_steps": 128, "batch_size": 64})
    assert result.work == result.curve[-1].work > 0
    theory.validate_policy(result.policy)
    assert result.exploitability == pytest.approx(theory.exploitability(result.policy), abs=1e-12)
    assert result.average_exploitability == pytest.approx(theory.exploitability(result.average_policy), abs=1e-12)
    assert np.isfinite(result.seconds) and result.seconds > 0
