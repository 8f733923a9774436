"""`llm-zoo eval ENV --checkpoint DIR` for every env: the headline on held-out seeds, with an interval, as JSON."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.cli import main  # noqa: E402
from llm_zoo.spec import EVAL_SEED_BASE, mean_interval, wilson_interval  # noqa: E402
from llm_zoo.trainers.evaluation import headline_summary, scored_weights  # noqa: E402
from llm_zoo.trainers.grpo import make_config, train  # noqa: E402
from llm_zoo.trainers.presets import preset  # noqa: E402

SMALL = {"steps": 1, "model_hidden_size": 32, "threads": 1, "progress": False, "tensorboard": False,
         "eval_every": 0, "sample_every": 0, "max_new_tokens": 8}
RUNS = {
    "kuhn_poker_v0": {"episodes_per_step": 8, "rollout_batch_size": 8, "micro_batch_size": 8, "unmask.steps": 0},
    "agentic_judge_v0": {"episodes_per_step": 4, "rollout_batch_size": 4, "init": "", "env_kwargs": {"tasks": ["mean"]}},
    "proposer_solver_v0": {"episodes_per_step": 2, "group_size": 2, "rollout_batch_size": 2, "init": "",
                           "env_kwargs": {"max_retries": 0, "num_solvers": 2}},
    # user_sim: its preset's compact prompt and templates, two turns an episode, no warm start
    "user_sim_v0": {"model": "tiny", "episodes_per_step": 2, "group_size": 1, "rollout_batch_size": 2, "init": "",
                    "max_new_tokens": 4, "env_kwargs": {**preset("user_sim_v0")["env_kwargs"], "max_turns": 2}},
}
KEYS = {"env", "checkpoint", "weights", "metric", "value", "interval", "interval_method", "episodes", "seeds"}


@pytest.mark.parametrize("env", sorted(RUNS))
def test_eval_of_a_short_run_reports_the_headline_on_held_out_seeds_with_an_interval(env, tmp_path, capsys):
    run = tmp_path / "run"
    train(make_config(env, {**SMALL, **RUNS[env], "run_dir": str(run)}))
    checkpoint = run / "checkpoints" / "step_000001"
    capsys.readouterr()
    assert main(["eval", env, "--checkpoint", str(checkpoint), "--episodes", "4", "--headline-episodes", "2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert KEYS <= set(result), sorted(KEYS - set(result))
    assert result["env"] == env and result["checkpoint"] == str(checkpoint)
    assert result["weights"] == scored_weights(json.loads((run / "config.json").read_text()))
    low, high = result["interval"]
    assert low <= result["value"] <= high
    assert result[result["metric"]] == result["value"]
    if env == "kuhn_poker_v0":  # exact: no episodes, a zero-width interval, and the games against baselines
        assert result["metric"] == "exploitability" and result["interval"] == [result["value"]] * 2
        assert result["episodes"] == 0 and result["seeds"] == []
        assert set(result["versus"]) == {"nash", "random", "card"}
        return
    assert result["versus"] == {}  # asymmetric envs: the headline already plays the scripted other role
    assert result["episodes"] >= 2 and 0 <= low <= high <= 1
    if env == "user_sim_v0" and result["seeds"] is None:
        # its evaluate (the usersim helper's) does not report seeds yet: eval says so rather than guess
        assert result["interval_method"].startswith("wilson")
        return
    first, last = result["seeds"]
    assert EVAL_SEED_BASE <= first <= last < EVAL_SEED_BASE + 2**20
    assert last - first + 1 == result["episodes"]


def test_scored_weights_say_average_or_last_iterate():
    assert scored_weights({"average": {"ema": 0.998}}) == "average (average.ema=0.998)"
    assert scored_weights({"average": {"ema": 0.0}}) == scored_weights({}) == "last iterate"
    assert scored_weights({"average_ema": 0.998}) == "average (average.ema=0.998)"  # a run's config from before
    assert scored_weights({"average": {"ema": 0.998, "power": 2}, "unmask": {"steps": 200}}) == \
        "average (average.ema=0.998, average.power=2), then fitted without the decoding mask (unmask.steps=200)"


def test_headline_summary_is_tolerant_of_evaluations_that_give_less():
    # a rate with an episode count and no interval: its Wilson interval
    rate = headline_summary({"success_rate": 0.25, "episodes": 40})
    assert rate["metric"] == "success_rate" and rate["interval"] == wilson_interval(10, 40)
    assert rate["seeds"] is None and rate["interval_method"].startswith("wilson")
    # an exact reading: zero width, no episodes
    exact = headline_summary({"method": "exact", "exploitability": 0.1})
    assert exact["interval"] == [0.1, 0.1] and exact["episodes"] == 0 and exact["seeds"] == []
    # a sampled estimate's own interval is kept
    sampled = headline_summary({"method": "sampled", "exploitability": 0.1, "exploitability_ci95": (0.05, 0.2)},
                               method="sampled")
    assert sampled["interval"] == [0.05, 0.2]
    # a named headline wins over the preference order
    named = headline_summary({"headline": "x", "x": 2.0, "success_rate": 0.5, "interval": [1.0, 3.0],
                              "interval_method": "normal", "episodes": 3, "seeds": [5, 7]})
    assert named["metric"] == "x" and named["interval"] == [1.0, 3.0] and named["seeds"] == [5, 7]
    with pytest.raises(ValueError, match="no numeric metric"):
        headline_summary({"note": "nothing"})


def test_intervals_hold_their_value_and_narrow_with_more_episodes():
    for k, n in ((0, 10), (3, 10), (10, 10), (30, 100)):
        low, high = wilson_interval(k, n)
        assert 0 <= low <= k / n <= high <= 1
    assert wilson_interval(30, 100)[1] - wilson_interval(30, 100)[0] < wilson_interval(3, 10)[1] - wilson_interval(3, 10)[0]
    assert wilson_interval(0, 0) == [0.0, 1.0]
    low, high = mean_interval([1.0, 2.0, 3.0, 4.0])
    assert low < 2.5 < high and mean_interval([2.0]) == [2.0, 2.0]


def test_every_env_accepts_evaluation_seeds():
    import llm_zoo

    for name in llm_zoo.registered():
        env = llm_zoo.make_env(name)
        for seed in (EVAL_SEED_BASE, EVAL_SEED_BASE + 12345):
            env.reset(seed=seed)
            assert env.agents
        env.close()
