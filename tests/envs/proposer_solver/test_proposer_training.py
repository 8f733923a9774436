"""Issue 17's proposer experiment: the topic split, the mixed-difficulty teacher, the BPE tokenizer, and the
evaluation on held-out topics against the panel of scripted solvers."""

from __future__ import annotations

import pytest

from llm_zoo import proposer_solver_v0
from llm_zoo.envs.proposer_solver import scripted, text
from llm_zoo.envs.proposer_solver.env import HELD_OUT_TOPICS, TOPIC_SPLITS, TOPICS, TRAINING_TOPICS
from llm_zoo.envs.proposer_solver.rules import Mode
from llm_zoo.envs.proposer_solver.scripted import PLAYERS, AdaptiveProposer, MixedProposer, ScriptedProposer
from llm_zoo.policy import Policy, Reply
from llm_zoo.spec import EVAL_SEED_BASE
from llm_zoo.trainers.evaluation import headline
from llm_zoo.trainers.rollout import collect

needs_bwrap = pytest.mark.bwrap


def _observation(mode: Mode) -> dict:
    return {"messages": ({"role": "system", "content": "..."},
                         {"role": "user", "content": text.topic_message("sorting", mode)})}


def test_the_topic_split_is_disjoint_covers_the_topics_and_is_an_env_option():
    assert set(TRAINING_TOPICS).isdisjoint(HELD_OUT_TOPICS)
    assert sorted(TRAINING_TOPICS + HELD_OUT_TOPICS) == sorted(TOPICS)
    assert (len(TRAINING_TOPICS), len(HELD_OUT_TOPICS)) == (30, 10)
    for name, topics in TOPIC_SPLITS.items():
        env = proposer_solver_v0.env(topics=name)
        drawn = set()
        for seed in range(60):
            env.reset(seed=seed)
            drawn.add(env.unwrapped.infos["proposer"]["topic"])
        assert drawn <= set(topics) and len(drawn) > min(5, len(topics) - 1), name
    with pytest.raises(ValueError, match="held_out"):
        proposer_solver_v0.env(topics="heldout")


def test_the_mixed_proposer_spans_difficulties_and_names_each():
    proposer = MixedProposer(seed=0)
    replies = proposer.act([_observation(Mode.DEDUCTION)] * 60)
    written = {r.policy for r in replies}
    assert {f"proposer_mixed(any, d={d})" for d in range(1, 10)} == written
    fixed = PLAYERS["proposer_d7"](seed=3)
    assert isinstance(fixed, ScriptedProposer) and fixed.difficulty == 7
    assert fixed(_observation(Mode.ABDUCTION)) == ScriptedProposer(7, seed=3)(_observation(Mode.ABDUCTION))
    for bad in ((), (0, 2), (True,)):
        with pytest.raises(ValueError, match="difficulties"):
            MixedProposer(bad)


def test_the_tiny_models_tokenizer_is_bpe_over_the_envs_text_and_lossless():
    from llm_zoo.models import build_bpe_tokenizer

    tokenizer = build_bpe_tokenizer(scripted.corpus())
    task = ScriptedProposer(9, seed=12345)._propose(Mode.DEDUCTION)  # constants the corpus never drew
    ids = tokenizer(task).input_ids
    assert tokenizer.decode(ids) == task and len(ids) < len(task) / 1.4
    from llm_zoo.trainers import presets

    assert presets.preset(proposer_solver_v0.SPEC.name)["model_tokenizer"] == "bpe"  # what `train` builds


@needs_bwrap
def test_the_evaluation_scores_learnability_on_held_out_topics_against_the_panel():
    figures = headline("proposer_solver_v0", {"proposer": PLAYERS["proposer_d9"](seed=0)}, episodes=6,
                       env_kwargs={"modes": ["deduction"], "max_retries": 0}, batch_size=3)
    assert figures["headline"] == "learnability" and figures["episodes"] == 6
    values = figures["learnability_per_episode"]
    assert len(values) == 6 and figures["learnability"] == pytest.approx(sum(values) / 6)
    shares = [figures[f"pass_hist_{k}"] for k in range(5)]
    assert sum(shares) == pytest.approx(1.0) and figures["invalid_task_rate"] == 0.0
    # the pass rates behind the values: each episode's learnability is 4p(1-p) of a share of four solvers
    assert all(v in (0.0, 0.75, 1.0) for v in values)
    assert figures["learnability"] == pytest.approx(sum(s * 4 * (k / 4) * (1 - k / 4) for k, s in enumerate(shares)))
    assert "solver_pass_rate" not in figures  # no solver policy to measure
    # the same seeds and topics as a direct play of the held-out episodes
    seeds = [EVAL_SEED_BASE + i for i in range(6)]
    episodes = collect("proposer_solver_v0", {"proposer": PLAYERS["proposer_d9"](seed=0), "solver": PLAYERS["solver"]()}, seeds,
                       env_kwargs={"modes": ["deduction"], "topics": "held_out", "max_retries": 0}, batch_size=6)
    assert {e.infos["proposer"]["topic"] for e in episodes} <= set(HELD_OUT_TOPICS)


@needs_bwrap
def test_the_adaptive_controller_is_told_each_round_and_an_invalid_task_scores_zero():
    adaptive = AdaptiveProposer(start=1, window=2, seed=0)
    headline("proposer_solver_v0", {"proposer": adaptive}, episodes=4, batch_size=2,
             env_kwargs={"modes": ["deduction"], "max_retries": 0})
    # deduction at d=1 and d=2: every solver right, so it went up after each of the two rounds
    assert adaptive.difficulty_of() == 3
    warmed = AdaptiveProposer(start=1, window=2, seed=0)
    figures = headline("proposer_solver_v0", {"proposer": warmed}, episodes=2, batch_size=2, warmup_episodes=4,
                       env_kwargs={"modes": ["deduction"], "max_retries": 0})
    assert warmed.difficulty_of() == 4 and figures["episodes"] == 2  # two warm-up rounds, one scored round

    class Blank(Policy):
        def act(self, observations):
            return [Reply("no task here", policy="blank") for _ in observations]

    figures = headline("proposer_solver_v0", {"proposer": Blank()}, episodes=2, env_kwargs={"max_retries": 0})
    assert figures["learnability"] == 0.0 and figures["invalid_task_rate"] == 1.0
    assert figures["proposer_reward"] == -1.0
