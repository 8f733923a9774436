"""Scripted proposer-solver players: valid tasks of chosen difficulty, solvers whose success follows their skill."""

from __future__ import annotations

import random

import pytest

from llm_zoo import proposer_solver_v0
from llm_zoo.envs.proposer_solver import text, verify
from llm_zoo.envs.proposer_solver.rules import MODES, Mode, check_program
from llm_zoo.envs.proposer_solver.scripted import (
    FAMILIES,
    MAX_DIFFICULTY,
    AdaptiveProposer,
    ScriptedProposer,
    ScriptedSolver,
    _memoriser,
    read_story,
    story,
)
from llm_zoo.trainers.rollout import collect

pytestmark = pytest.mark.bwrap
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
            outputs, _ = verify.validate(proposal, verify.SandboxSettings())  # raises TaskInvalid if invalid
            assert len(outputs) == len(proposal.inputs)


def test_stories_read_back_to_their_programs_answer():
    # the env's reader (story.read, which read_story wraps) gives every scripted story its program's answer
    for difficulty in range(1, MAX_DIFFICULTY + 2):
        rng = random.Random(difficulty)
        for _ in range(400):
            problem, program = story(rng, difficulty)
            space: dict = {}
            exec(program, space)  # our own template, not a model's program
            answer, sentences = read_story(problem)
            assert answer == space["f"]() and sentences == 3 * difficulty + 2
    assert read_story("Ana has 3 apples. Then Ana sings. How many apples does Ana have now?") is None


def test_scripted_stories_are_valid_tasks_recorded_as_read():
    for difficulty in range(1, MAX_DIFFICULTY + 1):
        proposal = text.parse_proposal(proposal_of(ScriptedProposer(difficulty, seed=difficulty), Mode.INTEGER),
                                       Mode.INTEGER)
        outputs, _ = verify.validate(proposal, verify.SandboxSettings())  # raises TaskInvalid if invalid
        assert outputs == (str(read_story(proposal.problem)[0]),)


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
            "solver_oracle"} <= set(proposer_solver_v0.SPEC.scripted)
    a, b = proposer_solver_v0.SPEC.scripted["proposer"](seed=3), proposer_solver_v0.SPEC.scripted["proposer"](seed=3)
    assert proposal_of(a, Mode.INDUCTION) == proposal_of(b, Mode.INDUCTION)
    with pytest.raises(ValueError, match="difficulty"):
        ScriptedProposer(0)
    with pytest.raises(ValueError, match="family"):
        ScriptedProposer(1, "poems")
    with pytest.raises(ValueError, match="skill"):
        ScriptedSolver(-1)
    with pytest.raises(ValueError, match="no mode"):
        a({"messages": ({"role": "user", "content": "hello"},)})


# ---- the adaptive proposer ----------------------------------------------------------------------


def test_the_adaptive_controller_steers_to_half_on_a_synthetic_pass_rate_sequence():
    proposer = AdaptiveProposer(start=3, window=2, max_difficulty=5)
    # each pair of pass rates fills the window; the mean decides: > .5 up, < .5 down, = .5 stay
    # (at the top the window slides on: 5 stays while 1.0, 1.0 and then 1.0, 0.0 come; None counts as 0)
    moves = [(1.0, 3), (0.75, 4), (1.0, 4), (1.0, 5), (1.0, 5), (1.0, 5), (0.0, 5), (0.25, 4), (0.5, 4), (0.5, 4),
             (None, 3), (0.25, 3), (0.0, 2), (0.0, 2), (0.0, 1), (0.0, 1), (0.0, 1)]
    assert [proposer.update(rate) for rate, _ in moves] == [d for _, d in moves]
    assert proposer.difficulty_of() == 1 and proposer.difficulties == {"all": 1}


def test_the_window_slides_until_a_move_and_starts_afresh_after_it():
    proposer = AdaptiveProposer(start=2, window=3)
    # the window [1, 0, 0] is below half: down; then three new episodes are needed before the next move
    assert [proposer.update(p) for p in (1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0)] == [2, 2, 1, 1, 1, 2, 2]


def test_a_per_mode_controller_moves_each_mode_on_its_own_episodes():
    proposer = AdaptiveProposer(start=2, window=2, per_mode=True)
    for _ in range(2):
        proposer.update(1.0, "deduction")
        proposer.update(0.0, Mode.ABDUCTION)
    assert proposer.difficulty_of("deduction") == 3 and proposer.difficulty_of("abduction") == 1
    assert proposer.difficulty_of("integer") == 2
    with pytest.raises(ValueError, match="mode"):
        proposer.update(0.5)
    with pytest.raises(ValueError, match="mode must be one of"):
        proposer.difficulty_of("poems")


def test_the_adaptive_proposer_writes_tasks_at_its_current_difficulty():
    proposer, fixed = AdaptiveProposer(start=4, seed=5), ScriptedProposer(4, seed=5)
    reply = proposer({"messages": ({"role": "user", "content": text.topic_message("sorting", Mode.INTEGER)},)})
    assert reply == proposal_of(fixed, Mode.INTEGER) and reply.policy == "proposer_adaptive(any, d=4)"
    assert read_story(text.parse_proposal(reply, Mode.INTEGER).problem)[1] == 3 * 4 + 2
    for _ in range(4):  # the default window
        proposer.update(1.0)
    problem = text.parse_proposal(proposal_of(proposer, Mode.INTEGER), Mode.INTEGER).problem
    assert read_story(problem)[1] == 3 * 5 + 2


def test_the_adaptive_proposer_observes_collected_episodes():
    proposer = proposer_solver_v0.SPEC.scripted["proposer_adaptive"](seed=0)
    assert isinstance(proposer, AdaptiveProposer) and proposer.difficulty_of() == 1
    policies = {"proposer": proposer, "solver": ScriptedSolver(None, noise=0.0, seed=0)}
    episodes = collect(lambda: proposer_solver_v0.env(modes=["integer"], num_solvers=1), policies, 8, batch_size=4)
    proposer.observe(episodes)  # two full windows of 4, each all right: up twice
    assert [e.infos["proposer"]["pass_rate"] for e in episodes] == [1.0] * 8 and proposer.difficulty_of() == 3


def test_adaptive_settings_are_checked():
    for kwargs, match in (({"start": 0}, "start"), ({"start": 10}, "start"), ({"window": 0}, "window"),
                          ({"target": 1.0}, "target"), ({"max_difficulty": 0}, "max_difficulty")):
        with pytest.raises(ValueError, match=match):
            AdaptiveProposer(**kwargs)
    with pytest.raises(ValueError, match="pass_rate"):
        AdaptiveProposer().update(1.5)
