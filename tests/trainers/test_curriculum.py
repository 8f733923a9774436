"""The curriculum over reset options: its draw, its estimates, its checks, and a run whose groups play its options."""

from __future__ import annotations

import json
import random

import pytest

from llm_zoo.envs.core import check_option_keys
from llm_zoo.trainers.curriculum import (
    CurriculumConfig,
    CurriculumState,
    check_options,
    group_spreads,
    option_key,
    option_labels,
)

OPTIONS = [{"deal": [["K", "Q"]]}, {"deal": [["Q", "K"]]}, {"deal": [["J", "K"]]}]


def test_group_spreads_are_each_step_groups_sample_variance_and_none_where_unmeasured():
    # step groups of 2 episodes: 0-1 differ, 2-3 end alike, 4-5 are one episode's outcome each (an env's own groups)
    rewards = [1.0, 0.0, 1.0, 1.0, 0.5, 0.0]
    groups = ["a/r", "a/r", "b/r", "b/r", "c/r", "d/r"]
    spreads = group_spreads(rewards, groups, [0, 1, 2, 3, 4, 5], group_size=2, n_groups=3)
    assert spreads == [0.5, 0.0, None]  # the sample variance of (1, 0) is 0.5; one reward measures nothing
    # two baseline keys in one step group: their variances are averaged
    two = group_spreads([1.0, 0.0, 2.0, 2.0], ["s/x", "s/x", "s/y", "s/y"], [0, 1, 0, 1], group_size=2, n_groups=1)
    assert two == [0.25]


def test_the_draw_follows_the_estimates_and_settled_options_keep_the_floor():
    config = CurriculumConfig(options=OPTIONS, prior=0.25, decay=0.0, floor=0.01)
    state = CurriculumState()
    assert state.weights(config) == [0.26, 0.26, 0.26]  # unseen: the prior, alike
    state.observe(config, OPTIONS, [0.0, 0.25, None])  # the third unmeasured: unchanged
    assert state.weights(config) == pytest.approx([0.01, 0.26, 0.26])
    drawn = state.draw(config, 5000, random.Random(0))
    share = [sum(option_key(d) == option_key(o) for d in drawn) / len(drawn) for o in OPTIONS]
    assert share[0] == pytest.approx(0.01 / 0.53, abs=0.01) and share[1] == pytest.approx(0.26 / 0.53, abs=0.03)
    # no floor, and every option's groups ended alike: each alike, never a draw without weight
    bare = CurriculumConfig(options=OPTIONS, prior=0.25, decay=0.0, floor=0.0)
    settled = CurriculumState()
    settled.observe(bare, OPTIONS, [0.0, 0.0, 0.0])
    assert settled.weights(bare) == [1.0, 1.0, 1.0] and len(settled.draw(bare, 4, random.Random(0))) == 4
    assert sum(settled.metrics(bare).values()) == pytest.approx(1.0)
    uniform = CurriculumConfig(options=OPTIONS, weighting="uniform")
    assert state.weights(uniform) == [1.0, 1.0, 1.0]
    # the estimate moves by decay toward each group's spread, in order
    slow = CurriculumConfig(options=OPTIONS, prior=0.25, decay=0.5)
    moving = CurriculumState()
    moving.observe(slow, [OPTIONS[0], OPTIONS[0]], [0.0, 0.0])
    assert moving.spread[option_key(OPTIONS[0])] == pytest.approx(0.0625)
    assert CurriculumState.from_dict(json.loads(json.dumps(moving.to_dict()))) == moving
    metrics = moving.metrics(slow)
    assert set(metrics) == {"curriculum/share/[['K', 'Q']]", "curriculum/share/[['Q', 'K']]",
                            "curriculum/share/[['J', 'K']]"}
    assert sum(metrics.values()) == pytest.approx(1.0)
    # labels that would collide fall back to the options' keys
    assert option_labels([{"scenario": "a"}, {"task": "a"}]) == ['{"scenario": "a"}', '{"task": "a"}']
    assert option_labels([{"scenario": "a"}, {"scenario": "b"}]) == ["a", "b"]


def test_an_option_the_env_does_not_take_is_refused_naming_it():
    check_options("kuhn_poker_v0", CurriculumConfig(options=OPTIONS))  # each resets
    with pytest.raises(ValueError, match=r"does not reset with \{'deal': \[\['K', 'K'\]\]\}.*options\['deal'\]"):
        check_options("kuhn_poker_v0", CurriculumConfig(options=[*OPTIONS, {"deal": [["K", "K"]]}]))


def test_a_misspelt_option_key_is_refused_before_any_reset():
    with pytest.raises(ValueError, match=r"config.curriculum.options: user_sim_v0 reads the reset options \['scenario'\]"
                                         r".*\['scenaro'\]"):
        check_options("user_sim_v0", CurriculumConfig(options=[{"scenario": "cancel_mistake"},
                                                               {"scenaro": "cancel_shipped_refused"}]))


def test_an_env_that_names_no_option_keys_is_not_checked():
    class Plain:
        metadata: dict = {"name": "plain"}

    check_option_keys(Plain(), [{"anything": 1}], "here")  # no reset_options: nothing to check against
    Plain.reset_options = ("deal",)
    with pytest.raises(ValueError, match=r"here: plain reads the reset options \['deal'\].*\['anything'\]"):
        check_option_keys(Plain(), [None, {"deal": 1}, {"anything": 1}], "here")


@pytest.mark.parametrize(("fields", "named"), [
    ({"options": [{"deal": 1}, {"deal": 1}]}, "twice"),
    ({"options": ["deal"]}, "curriculum.options"),
    ({"weighting": "hard"}, "curriculum.weighting"),
    ({"floor": -1.0}, "curriculum.floor"),
    ({"prior": float("nan")}, "curriculum.prior"),
    ({"prior": 0.0, "floor": 0.0}, "both be 0"),
    ({"decay": 1.0}, "curriculum.decay"),
])
def test_bad_settings_are_refused_naming_the_field(fields, named):
    with pytest.raises(ValueError, match=named):
        CurriculumConfig(**fields)


def test_a_run_plays_its_groups_on_the_drawn_options_and_logs_the_draw(tmp_path):
    pytest.importorskip("torch")
    from llm_zoo.trainers.grpo import make_config, train

    sets = {"steps": 2, "episodes_per_step": 8, "group_size": 2, "rollout_batch_size": 8, "model_hidden_size": 32,
            "eval_every": 0, "progress": False, "tensorboard": False, "threads": 1, "sample_every": 1,
            "policies": {}, "unmask.steps": 0}
    with pytest.raises(ValueError, match="group_size"):
        make_config("kuhn_poker_v0", {**sets, "group_size": 1, "curriculum.options": OPTIONS})
    # groups of one with a uniform draw: each episode plays a listed deal, and no spread is measured or logged
    single = tmp_path / "single"
    train(make_config("kuhn_poker_v0", {**sets, "steps": 1, "group_size": 1, "run_dir": str(single),
                                        "curriculum": {"options": OPTIONS, "weighting": "uniform"}}))
    row = json.loads((single / "metrics.jsonl").read_text())
    assert "charts/split_groups" not in row and row["curriculum/share/[['K', 'Q']]"] == pytest.approx(1 / 3)
    played = [json.loads(line)["options"] for line in (single / "samples" / "step_000001.jsonl").read_text().splitlines()]
    assert played and all(o in OPTIONS for o in played)
    config = make_config("kuhn_poker_v0", {**sets, "run_dir": str(tmp_path / "run"), "curriculum": {"options": OPTIONS}})
    train(config)
    rows = [json.loads(r) for r in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        shares = {k: v for k, v in row.items() if k.startswith("curriculum/share/")}
        assert len(shares) == 3 and sum(shares.values()) == pytest.approx(1.0)
        assert 0.0 <= row["charts/split_groups"] <= 1.0
    assert len({round(v, 9) for v in (rows[-1][k] for k in rows[-1] if k.startswith("curriculum/share/"))}) > 1
    keys = {option_key(o) for o in OPTIONS}
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples" / "step_000002.jsonl").read_text().splitlines()]
    assert samples and all(option_key(s["options"]) in keys for s in samples)
    assert samples[0]["options"] == samples[1]["options"] and samples[0]["seed"] == samples[1]["seed"]  # one group
    state = json.loads((tmp_path / "run" / "checkpoints" / "step_000002" / "state.json").read_text())
    assert set(state["curriculum"]) <= keys and state["curriculum"]
