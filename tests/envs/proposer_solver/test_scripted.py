"""Scripted proposer-solver players: valid tasks of chosen difficulty, solvers whose success follows their skill."""

from __future__ import annotations

import random
import shutil

import pytest

from llm_zoo import proposer_solver_v0
from llm_zoo.envs.proposer_solver import text, verify
from llm_zoo.envs.proposer_solver.rules import MODES, Mode, check_program
from llm_zoo.envs.proposer_solver.scripted import (
    FAMILIES,
    ScriptedProposer,
    ScriptedSolver,
    _memoriser,
    read_story,
    story,
)
from llm_zoo.trainers.rollout import collect

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
SOLVERS = ("solver_0", "solver_1", "solver_2", "solver_3")


def proposal_of(proposer: ScriptedProposer, mode: Mode) -> str:
    return proposer({"messages": ({"role": "system", "content": "..."},
                                  {"role": "user", "content": text.topic_message("sorting", mode)})})


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_gives_valid_tasks_in_every_program_mode(family):
    for difficulty in (1, 4):
        proposer = ScriptedProposer(difficulty, family, seed=difficulty)
        for mode in (Mode.DEDUCTION, Mode.ABDUCTION, Mode.INDUCTION):
            proposal = text.parse_proposal(proposal_of(proposer, mode), mode)
            verify.validate(proposal, verify.SandboxSettings())


def test_stories_read_back_to_their_programs_answer():
    rng = random.Random(0)
    for difficulty in (1, 2, 5):
        problem, program = story(rng, difficulty)
        space: dict = {}
        exec(program, space)  # our own template, not a model's program
        answer, sentences = read_story(problem)
        assert answer == space["f"]() and sentences == 3 * difficulty + 2
    assert read_story("Ana has 3 apples. Then Ana sings. How many apples does Ana have now?") is None


def test_the_memoriser_is_a_legal_program():
    source = _memoriser([("1", 2), ("'a', [1]", {"k": None})])
    check_program(source)
    space: dict = {}
    exec(source, space)
    assert space["f"](1) == 2 and space["f"]("a", [1]) == {"k": None} and space["f"](5) == 2


def play(mode, difficulty, skills, episodes=4, seed=0):
    """Return, per solver, how many of ``episodes`` it got right (all tasks must be valid)."""
    policies = {"proposer": ScriptedProposer(difficulty, seed=seed),
                **{s: ScriptedSolver(k, noise=0.0, seed=i) for i, (s, k) in enumerate(zip(SOLVERS, skills))}}
    episodes = collect(lambda: proposer_solver_v0.env(modes=[mode]), policies, episodes, seed=seed, batch_size=4)
    assert not any(e.failed for e in episodes), episodes[0].error
    assert all(e.infos["proposer"]["valid"] for e in episodes)
    for e in episodes:
        assert e.infos["proposer"]["pass_rate"] == sum(e.infos[s]["correct"] for s in SOLVERS) / 4
    return [sum(e.infos[s]["correct"] for e in episodes) for s in SOLVERS]


@pytest.mark.parametrize("mode", MODES)
def test_the_whole_loop_runs_and_skill_orders_the_solvers(mode):
    right = play(mode, 2, (0, 100, 3000, None))
    assert right[3] >= right[2] >= right[1] and right[3] > right[0]


def test_pass_rates_fall_with_difficulty():
    easy, hard = play("deduction", 1, (30, 30, 30, 30)), play("deduction", 6, (30, 30, 30, 30))
    assert sum(easy) > sum(hard)
    easy, hard = play("integer", 1, (150, 150, 150, 150)), play("integer", 4, (150, 150, 150, 150))
    assert sum(easy) == 16 and sum(hard) < 4


def test_scripted_players_are_named_and_seeded():
    assert {"proposer", "proposer_easy", "proposer_hard", "solver", "solver_weak", "solver_strong",
            "solver_oracle"} <= set(proposer_solver_v0.SCRIPTED)
    a, b = proposer_solver_v0.SCRIPTED["proposer"](seed=3), proposer_solver_v0.SCRIPTED["proposer"](seed=3)
    assert proposal_of(a, Mode.INDUCTION) == proposal_of(b, Mode.INDUCTION)
    with pytest.raises(ValueError, match="difficulty"):
        ScriptedProposer(0)
    with pytest.raises(ValueError, match="family"):
        ScriptedProposer(1, "poems")
    with pytest.raises(ValueError, match="skill"):
        ScriptedSolver(-1)
    with pytest.raises(ValueError, match="no mode"):
        a({"messages": ({"role": "user", "content": "hello"},)})
