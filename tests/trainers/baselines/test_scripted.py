"""Tests of the scripted baselines: every env's players are found, and Kuhn's are scored as tables."""

from __future__ import annotations

import pytest

import llm_zoo
from llm_zoo.envs.kuhn_poker import theory
from llm_zoo.policy import RandomPolicy
from llm_zoo.trainers.baselines import scripted


def test_every_env_is_listed_with_its_players():
    found = scripted.all_players()
    assert set(found) == set(llm_zoo.registered())
    assert set(found["kuhn_poker_v0"]) == {"nash", "random", "card"}


def test_kuhn_tables_are_scored_by_the_exact_theory():
    tables = scripted.tables("kuhn_poker_v0")
    assert theory.exploitability(tables["nash"]) < 1e-12
    assert theory.exploitability(tables["random"]) == pytest.approx(theory.UNIFORM_EXPLOITABILITY, abs=1e-12)
    assert theory.exploitability(tables["card"]) > 0.1  # never bluffs: exploitable


def test_table_of_reads_only_tabular_policies():
    assert scripted.table_of(RandomPolicy()) is None


def test_unknown_env():
    with pytest.raises(ValueError, match="unknown env 'chess_v0'"):
        scripted.players("chess_v0")
