"""Smoke test of benchmarks/learning.py at its smallest setting: every stage runs, the rows and the JSON line agree."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from benchmarks import learning
from llm_zoo import bench


def _quick(capsys, tmp_path: Path, *envs: str) -> tuple[dict, list[str]]:
    """Run the script's quick setting (on ``envs``, else its default envs) in this process; return (its figures, its
    printed lines), having checked that the last line is the JSON of those figures."""
    figures = learning.main(["--quick", *(["--envs", *envs] if envs else []), "--jobs", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    return figures, out


def test_quick_run_prints_every_stage_and_ends_with_the_json_line(capsys, tmp_path):
    figures, out = _quick(capsys, tmp_path)
    rows = figures["rows"]["user_sim_v0"]
    assert list(rows) == ["floor", "warm start", "rae", "grpo", "none"]
    assert figures["user_sim_v0"] == rows["rae"]["mean"]
    # the do-nothing floor on the quick subset: the two refusal templates of three succeed, nothing else
    assert rows["floor"]["mean"] == round(2 / 3, 4)
    assert (rows["floor"]["held_in_success"], rows["floor"]["held_out_success"]) == (0.5, 1.0)
    for stage, row in rows.items():
        low, high = row["ci95"]
        assert 0.0 <= low <= row["mean"] <= high <= 1.0, stage
        assert ("scripted_paraphrase/mean" in row) == (stage in ("floor", "warm start", "rae")), stage
    for method in ("rae", "grpo", "none"):
        assert rows[method]["episodes"] == 2 and rows[method]["tokens"] > 0 and rows[method]["seconds"] > 0
    assert (tmp_path / "learning.png").stat().st_size > 0
    line = next(i for i, text in enumerate(out) if text.startswith("stage"))
    assert [text.split()[0] for text in out[line + 1:line + 6]] == ["floor", "warm", "rae", "grpo", "none"]


# the proposer_solver rows: every row runs, the JSON line's proposer keys agree with the rows, both plots are written
@pytest.mark.bwrap
def test_quick_proposer_rows_and_the_json_keys(capsys, tmp_path):
    figures, out = _quick(capsys, tmp_path, "proposer_solver_v0")
    rows = figures["rows"]["proposer_solver_v0"]
    fixed = [f"fixed d={d}" for d in range(1, 10)]
    assert list(rows) == ["floor", *fixed, "adaptive", "warm start", "hgrpo", "rae", "grpo"]
    assert figures["proposer_learned_learnability"] == figures["proposer_solver_v0"] == rows["hgrpo"]["mean"]
    assert figures["proposer_best_fixed_learnability"] == max(rows[s]["mean"] for s in fixed)
    # every row plays the same evaluation episodes: the floor (proposer_easy) and fixed d=1 are one player, so they agree
    assert rows["floor"]["mean"] == rows["fixed d=1"]["mean"]
    for stage, row in rows.items():
        low, high = row["ci95"]
        assert low <= row["mean"] <= high and 0.0 <= row["mean"] <= 1.0, stage
    for method in ("hgrpo", "rae", "grpo"):
        assert rows[method]["episodes"] == 2 and rows[method]["tokens"] > 0 and rows[method]["seconds"] > 0
    assert "95% normal interval" in "\n".join(out)
    assert (tmp_path / "learning.png").stat().st_size > 0 and (tmp_path / "learning_proposer.png").stat().st_size > 0
    results = json.loads((tmp_path / "learning.json").read_text())["proposer_solver_v0"]
    finals = [r for r in results if r["stage"] == "hgrpo"]
    assert finals and set(finals[0]["curves"]) >= {"invalid_task_rate", "pass_hist_2"}
    assert figures["failed_jobs"] == []


def test_each_job_runs_in_a_fresh_process_and_one_that_dies_fails_alone():
    import multiprocessing

    jobs = learning.Isolated(multiprocessing.get_context("fork"), 2)
    for i in range(3):
        jobs.submit(("pid", i), os.getpid)
    jobs.submit("dies", os._exit, 9)  # as the kernel's OOM killer ends a job
    jobs.submit("raises", int, "seven")
    jobs.submit("big", bytes, 1 << 20)  # a result larger than a pipe's buffer comes back whole
    done = {key: (result, error) for key, result, error in jobs.finished()}
    pids = {done[("pid", i)][0] for i in range(3)}
    assert len(pids) == 3 and os.getpid() not in pids  # a process of its own for every job: nothing carried over
    assert done["dies"] == (None, "its process died with exit code 9 and no result")
    assert done["raises"][0] is None and done["raises"][1].startswith("ValueError: invalid literal")
    assert done["big"] == (bytes(1 << 20), None)


def _stage(stage, seed, **more):
    return {"seed": seed, "stage": stage, "seconds": 0.0, "episodes": 0, "tokens": 0, "peak_rss_mb": 0.0,
            "figures": {}, "curve": [], **more}


def test_a_pretrained_run_ends_each_seed_before_the_next_seeds_warm_start(tmp_path, monkeypatch):
    """With one job at a time, a seed's RL stages run right after its warm start, so its record is written before the
    next seed's warm start begins (a run cut short keeps the seeds it finished)."""
    records = tmp_path / "records"
    monkeypatch.setattr(learning, "zero_shot_job", lambda env, model, *a: _stage("zero-shot", 0))
    monkeypatch.setattr(learning, "scripted_job", lambda env, model, stage, *a: _stage(stage, 0))
    monkeypatch.setattr(learning, "model_warm_start_job", lambda env, model, seed, *a: _stage(
        "warm start", seed, init="unused", records_then=sorted(p.name for p in records.glob("*.json"))))
    monkeypatch.setattr(learning, "model_rl_job", lambda env, model, seed, stage, *a: _stage(stage, seed))
    results, failed = learning.run_model("agentic_judge_v0", "stand-in", [0, 1, 2], quick=True, jobs=1, out=tmp_path,
                                         records=records)
    assert failed == []
    assert [(r["stage"], r["seed"]) for r in results] == [
        ("zero-shot", 0), ("floor", 0), *((stage, s) for s in (0, 1, 2) for stage in ("warm start", "judge", "visible"))]
    started = {r["seed"]: r["records_then"] for r in results if r["stage"] == "warm start"}
    assert started == {0: ["shared.json"], 1: ["seed-0.json", "shared.json"],
                       2: ["seed-0.json", "seed-1.json", "shared.json"]}


_REAL_RL_JOB = None


def _rae_dies(env, seed, method, *args):
    if method == "rae":
        os._exit(9)
    return _REAL_RL_JOB(env, seed, method, *args)


def test_a_run_that_dies_is_reported_and_its_row_goes_on_without_it(capsys, tmp_path, monkeypatch):
    global _REAL_RL_JOB
    _REAL_RL_JOB = learning.rl_job
    monkeypatch.setattr(learning, "rl_job", _rae_dies)
    figures = learning.main(["--quick", "--envs", "proposer_solver_v0", "--jobs", "2", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1]) == figures
    assert [(f["stage"], f["seed"]) for f in figures["failed_jobs"]] == [("rae", 0)]
    assert figures["failed_jobs"][0]["error"] == "its process died with exit code 9 and no result"
    assert "proposer_solver_v0 rae seed 0 failed" in captured.err
    rows = figures["rows"]["proposer_solver_v0"]
    assert "rae" not in rows and rows["hgrpo"]["episodes"] == 2 and rows["grpo"]["episodes"] == 2


# the agentic_judge rows: the three rewards' rows, the cross-play and the blind spots, and the JSON line's judge keys
@pytest.mark.bwrap
def test_quick_judge_rows_and_the_json_keys(capsys, tmp_path):
    figures, out = _quick(capsys, tmp_path, "agentic_judge_v0")
    rows = figures["rows"]["agentic_judge_v0"]
    assert list(rows) == ["floor", "warm start", "judge", "visible", "hidden"]
    assert figures["judge_trained_hidden_pass"] == figures["agentic_judge_v0"] == rows["judge"]["mean"]
    assert figures["tests_trained_hidden_pass"] == rows["visible"]["mean"]
    assert figures["oracle_trained_hidden_pass"] == rows["hidden"]["mean"]
    # the floor submits a stored wrong solution on each quick task (one brittle, one weak, one neither): no hidden
    # pass anywhere, and the rule judge passes none of them; the strict judge passes caesar's weak one if it drew it
    floor = rows["floor"]
    assert floor["mean"] == 0.0 and floor["judge_pass_rate"] == 0.0
    assert [floor[f"{k}_hidden_pass"] for k in ("brittle", "weak", "other")] == [0.0, 0.0, 0.0]
    for stage, row in rows.items():
        low, high = row["ci95"]
        assert 0.0 <= low <= row["mean"] <= high <= 1.0, stage
        # the second judge grades the floor, the warm start and the judge-trained solver only
        assert ("strict_judge/judge_pass_rate" in row) == (stage in ("floor", "warm start", "judge")), stage
    for reward in ("judge", "visible", "hidden"):
        assert rows[reward]["episodes"] == 2 and rows[reward]["tokens"] > 0 and rows[reward]["seconds"] > 0
    text = "\n".join(out)
    assert "cross-play" in text and "blind spots" in text
    assert all(spot[1] in ("rule_judge", "strict_judge") for spot in figures["judge_blind_spots"])
    results = json.loads((tmp_path / "learning.json").read_text())["agentic_judge_v0"]
    configs = {r["stage"]: json.loads((tmp_path / f"agentic_judge_v0-s0-{r['stage']}" / "config.json").read_text())
               for r in results if r["stage"] in ("judge", "visible", "hidden")}
    assert {s: c["env_kwargs"]["solver_reward"] for s, c in configs.items()} == {s: s for s in configs}
    assert all(c["env_kwargs"]["tasks"] == list(learning.QUICK_JUDGE_TASKS) for c in configs.values())
    assert (tmp_path / "learning.png").stat().st_size > 0


def stand_in(tiny_model_dir, env: str) -> str:
    """A tiny saved model standing in for a pretrained one: a word tokenizer over ``env``'s text, so its prompts fit
    the env's pretrained preset."""
    import llm_zoo

    return str(tiny_model_dir("stand_in", shape="smallest", tokenizer="words", corpus=llm_zoo.env_spec(env).corpus()))


PRETRAINED_SCRIPTS = {"pretrained_kuhn": "kuhn_poker_v0", "pretrained_user_sim": "user_sim_v0",
                      "pretrained_judge": "agentic_judge_v0", "pretrained_proposer": "proposer_solver_v0"}


def _pretrained(name: str, model: str, out: Path) -> dict:
    """Run ``benchmarks/NAME.py --quick`` on ``model`` in this process; check its plot; return its figures."""
    import importlib

    figures = importlib.import_module(f"benchmarks.{name}").main(["--quick", "--model", model, "--out", str(out)])
    assert (out / "pretrained.png").read_bytes().startswith(b"\x89PNG")
    return figures


def test_each_env_of_the_pretrained_rows_has_an_opt_in_script_of_its_own():
    """One script a env, so that each has its own section of the results page; each runs only when named (hours)."""
    scripts = bench.discover()
    assert {name for name in scripts if name.startswith("pretrained_")} == set(PRETRAINED_SCRIPTS)
    assert set(PRETRAINED_SCRIPTS.values()) == set(learning.MODEL_ENVS)
    assert PRETRAINED_SCRIPTS == {rows.script: env for env, rows in learning.MODEL_ENVS.items()}  # their records
    for name, env in PRETRAINED_SCRIPTS.items():
        text = scripts[name].read_text()
        assert bench.opt_in(scripts[name]) and f'pretrained_rows("{env}", parser, argv)' in text, name


def test_quick_kuhn_rows_of_a_model_directory(capsys, tmp_path, tiny_model_dir):
    """``--model`` with a tiny saved model standing in for a pretrained one: zero-shot, warm start and self-play,
    each read by Kuhn's exact evaluator, with the cost columns."""
    # a word tokenizer over Kuhn's text: the prompt with the rules fits the preset's max_prompt_tokens (a byte
    # tokenizer's is 639 tokens, over it: every episode would fail and RL would train on nothing)
    model = stand_in(tiny_model_dir, "kuhn_poker_v0")
    figures = learning.main(["--quick", "--envs", "kuhn_poker_v0", "--model", model, "--out", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    rows = figures["rows"]["kuhn_poker_v0"]
    assert list(rows) == ["zero-shot", "warm start", "self-play", "anchored"] and figures["failed_jobs"] == []
    assert figures["model"] == model and figures["kuhn_poker_v0"] == rows["self-play"]["exploitability"]
    for stage, row in rows.items():
        assert row["seeds"] == 1 and row["exploitability_spread"] == 0.0, stage
        assert 0.0 <= row["exploitability"] <= row["unconstrained_exploitability"] <= 2.0, stage
        assert 0.0 <= row["valid_mass_mean"] <= 1.0 and row["valid_mass_mean_per_seed"] == [row["valid_mass_mean"]]
        assert row["eval_seconds"] > 0 and row["peak_rss_mb"] > 0, stage
    # the three stages are three different policies: the fit and the update each moved the weights
    saved = json.loads((tmp_path / "learning.json").read_text())["kuhn_poker_v0"]
    assert len({r["figures"]["valid_mass_mean"] for r in saved}) == 4
    for stage in ("self-play", "anchored"):
        train_metrics = (tmp_path / f"kuhn_poker_v0-s0-{stage}" / "metrics.jsonl").read_text().splitlines()
        assert json.loads(train_metrics[-1])["charts/failed_episodes"] == 0, stage
    assert rows["zero-shot"]["seconds"] == rows["warm start"]["tokens"] == 0 < rows["warm start"]["seconds"]
    for stage in ("self-play", "anchored"):
        assert rows[stage]["episodes"] == 4 and rows[stage]["tokens"] > 0 and rows[stage]["seconds"] > 0, stage
    # the warm start is the SFT preset for a pretrained model, cut to the quick setting; RL started from it
    sft_config = json.loads((tmp_path / "kuhn_poker_v0-s0-sft" / "config.json").read_text())
    assert (sft_config["model"], sft_config["lora_r"], sft_config["episodes"]) == (model, 16, 8)
    train_config = json.loads((tmp_path / "kuhn_poker_v0-s0-self-play" / "config.json").read_text())
    assert train_config["init"].startswith(str(tmp_path / "kuhn_poker_v0-s0-sft"))
    # the preset's self-play: SGD, a KL term to a magnet that follows the learner (adapters of its own)
    assert (train_config["model"], train_config["optimizer"], train_config["beta"], train_config["magnet"]["ema"]) == (
        model, "sgd", 0.2, 0.9)
    from llm_zoo.trainers.checkpoint import latest_checkpoint

    for stage in ("self-play", "anchored"):  # a model per seat, each with adapters of its own
        run = tmp_path / f"kuhn_poker_v0-s0-{stage}"
        assert json.loads((run / "config.json").read_text())["policies"] == {"player_0": "seat_0", "player_1": "seat_1"}
        policies = latest_checkpoint(run) / "policies"
        assert sorted(p.name for p in policies.iterdir()) == ["seat_0", "seat_1"], stage
        assert all((policies / seat / "adapter_config.json").is_file() for seat in ("seat_0", "seat_1")), stage
    # anchored: the warm start merged into a model directory of its own, fresh adapters over it, a KL term to it
    anchored = json.loads((tmp_path / "kuhn_poker_v0-s0-anchored" / "config.json").read_text())
    merged = tmp_path / "kuhn_poker_v0-s0-anchored-model"
    assert (anchored["model"], anchored["init"], anchored["lora_r"]) == (str(merged), "", 16) and anchored["beta"] > 0
    assert (anchored["optimizer"], anchored["magnet"]["ema"]) == ("adamw", 1.0)  # the reference stays the warm start
    assert (merged / "config.json").is_file() and not (merged / "adapter_config.json").exists()
    line = next(i for i, text in enumerate(out) if text.startswith("stage"))
    assert [text.split()[0] for text in out[line + 1:line + 5]] == ["zero-shot", "warm", "self-play", "anchored"]


def test_a_pretrained_run_keeps_each_finished_seed_and_reads_it_back(capsys, tmp_path, tiny_model_dir):
    """``--records DIR``: each finished group of jobs (the rows read once, each seed's) is written as it ends; a rerun
    of the same settings reads them back and trains nothing; a record of other settings, or ``--fresh``, runs
    again and replaces it."""
    from benchmarks import pretrained_kuhn

    model, records = stand_in(tiny_model_dir, "kuhn_poker_v0"), tmp_path / "records"

    def run(name: str, *more: str) -> dict:
        return pretrained_kuhn.main(["--quick", "--model", model, "--out", str(tmp_path / name), "--records",
                                     str(records), *more])

    first = run("first")
    assert sorted(p.name for p in records.iterdir()) == ["seed-0.json", "shared.json"]
    seed_0 = json.loads((records / "seed-0.json").read_text())
    settings = learning.model_settings("kuhn_poker_v0", model, quick=True)
    assert seed_0["settings"] == settings and [r["stage"] for r in seed_0["results"]] == ["warm start", "self-play",
                                                                                          "anchored"]
    assert seed_0["commit"] and seed_0["machine"] and "init" not in seed_0["results"][0]
    capsys.readouterr()
    second = run("second")
    assert second["rows"] == first["rows"] and second["failed_jobs"] == []
    assert not (tmp_path / "second" / "kuhn_poker_v0-s0-sft").exists()  # nothing trained
    said = capsys.readouterr().out
    assert "shared read from its record" in said and "seed-0 read from its record" in said
    # other settings (a preset changed since): the seed runs again and its record is replaced; the rest is read
    (records / "seed-0.json").write_text(json.dumps({**seed_0, "settings": "0" * 16}))
    run("third")
    assert (tmp_path / "third" / "kuhn_poker_v0-s0-sft").is_dir()
    assert json.loads((records / "seed-0.json").read_text())["settings"] == settings
    assert "shared read from its record" in capsys.readouterr().out
    run("fourth", "--fresh")
    assert "read from its record" not in capsys.readouterr().out
    assert (tmp_path / "fourth" / "kuhn_poker_v0-s0-sft").is_dir()
    # the settings' fingerprint follows the rows' settings and the presets, not where the records are
    assert learning.model_settings("kuhn_poker_v0", model, quick=False) != settings
    assert learning.model_settings("user_sim_v0", model, quick=True) != settings
    shared = json.loads((records / "shared.json").read_text())["settings"]
    assert shared == learning.model_settings("kuhn_poker_v0", model, quick=True, group="shared") != settings


def test_the_rows_read_once_are_kept_under_what_they_read_and_a_seed_under_every_preset(monkeypatch):
    """A change to the warm start or the RL (a preset's or the full setting's) runs each seed again but not the model as
    loaded (``shared``); a change to how a policy samples runs both again."""
    from llm_zoo.trainers import presets, sft

    def both() -> tuple[str, str]:
        return (learning.model_settings("user_sim_v0", "m", quick=False, group="shared"),
                learning.model_settings("user_sim_v0", "m", quick=False))

    shared, seed = both()
    assert shared != seed
    monkeypatch.setitem(sft.SFT_PRETRAINED_PRESETS, "user_sim_v0",
                        {**sft.SFT_PRETRAINED_PRESETS["user_sim_v0"], "episodes": 3})
    assert both()[0] == shared and both()[1] != seed
    monkeypatch.setitem(presets.PRETRAINED_PRESETS, "user_sim_v0",
                        {**presets.PRETRAINED_PRESETS["user_sim_v0"], "lr": 1.0, "steps": 99})
    assert both()[0] == shared
    rows = learning.MODEL_ENVS["user_sim_v0"]
    monkeypatch.setitem(learning.MODEL_ENVS, "user_sim_v0",
                        dataclasses.replace(rows, quick={**rows.quick, "steps": 7}, quick_eval_options={"seeds": 5}))
    assert both()[0] == shared  # the --quick rows are not what a full run reads
    monkeypatch.setitem(learning.MODEL_ENVS, "user_sim_v0", dataclasses.replace(rows, full={"steps": 7, "lr": 1.0}))
    assert both()[0] == shared and both()[1] != seed  # the full setting's RL, which the rows read once do not read
    monkeypatch.setitem(learning.MODEL_ENVS, "user_sim_v0", dataclasses.replace(rows, full={"temperature": 0.1}))
    assert both()[0] != shared and both()[1] != seed  # ... and how it samples, which they do
    monkeypatch.setitem(learning.MODEL_ENVS, "user_sim_v0", dataclasses.replace(rows, eval_options={"seeds": 5}))
    assert both()[0] != shared and both()[1] != seed
    monkeypatch.setitem(learning.MODEL_ENVS, "user_sim_v0", rows)
    monkeypatch.setitem(presets.PRETRAINED_PRESETS, "user_sim_v0",
                        {**presets.PRETRAINED_PRESETS["user_sim_v0"], "temperature": 0.1})
    assert both()[0] != shared and both()[1] != seed


def test_a_record_lacking_a_stage_or_a_figure_runs_again(tmp_path, capsys):
    """A record of the same settings is read back only whole: each of its group's stages once, each result with the
    cost keys and every figure the tables print; otherwise stderr says what it lacks and the group runs again. The
    records kept in docs/results are whole."""
    from benchmarks.learning import RESULT_KEYS, read_record

    result = {"seed": 0, "stage": "zero-shot", "seconds": 0.0, "episodes": 0, "tokens": 0, "peak_rss_mb": 1.0,
              "figures": {"success_rate": 0.5, "eval_seconds": 1.0}}

    def read(results: list, stages=("zero-shot",)) -> dict | None:
        (tmp_path / "shared.json").write_text(json.dumps({"settings": "s", "results": results}))
        return read_record(tmp_path, "shared", "s", stages, ["success_rate", "eval_seconds"])

    assert read([result]) is not None
    assert read([{**result, "figures": {"eval_seconds": 1.0}}]) is None
    assert "lacks ['success_rate']" in capsys.readouterr().err
    assert read([{k: v for k, v in result.items() if k != "tokens"}]) is None
    assert "lacks ['tokens']" in capsys.readouterr().err
    assert read([result], stages=("zero-shot", "floor")) is None
    assert "expected ['floor', 'zero-shot']" in capsys.readouterr().err
    assert read([result, result]) is None  # a stage twice
    kept = sorted((learning.ROOT / "docs" / "results").glob("pretrained_*/records/*.json"))
    scripts = {rows.script: env for env, rows in learning.MODEL_ENVS.items()}
    for path in kept:
        env, record = scripts[path.parent.parent.name], json.loads(path.read_text())
        rows_of = learning.MODEL_ENVS[env]
        stages = ["zero-shot", *rows_of.scripted_rows] if path.stem == "shared" else ["warm start", *rows_of.rl]
        needed = [*learning._model_keys(env), "eval_seconds"]
        assert read_record(path.parent, path.stem, record["settings"], stages, needed) == record, path
        assert all(set(RESULT_KEYS) <= set(r) for r in record["results"])


def test_quick_user_sim_rows_of_a_model_directory(capsys, tmp_path, tiny_model_dir):
    """``--model`` on user_sim: zero-shot, warm start and RL, each scored on evaluation seeds against the scripted
    user and the paraphrasing one, held-in and held-out templates apart, with a pooled interval."""
    model = stand_in(tiny_model_dir, "user_sim_v0")
    figures = _pretrained("pretrained_user_sim", model, tmp_path)
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    rows = figures["rows"]["user_sim_v0"]
    assert list(rows) == ["zero-shot", "warm start", "rl"] and figures["failed_jobs"] == []
    assert figures["user_sim_v0"] == rows["rl"]["success_rate"]
    saved = json.loads((tmp_path / "learning.json").read_text())["user_sim_v0"]
    for stage, row in rows.items():
        for user in ("", "scripted_paraphrase/"):
            low, high = row[f"{user}success_rate_ci95"]
            assert 0.0 <= low <= row[f"{user}success_rate"] <= high <= 1.0, (stage, user)
            assert 0.0 <= row[f"{user}held_in_success"] <= 1.0 and 0.0 <= row[f"{user}held_out_success"] <= 1.0
        assert row["eval_seconds"] > 0 and row["peak_rss_mb"] > 0, stage
    for result in saved:  # the quick setting's three templates, one evaluation seed each, against each user
        assert result["figures"]["episodes"] == result["figures"]["scripted_paraphrase/episodes"] == 3
    train_config = json.loads((tmp_path / "user_sim_v0-s0-rl" / "config.json").read_text())
    assert train_config["init"].startswith(str(tmp_path / "user_sim_v0-s0-sft")) and train_config["model"] == model
    assert train_config["policies"] == {"user": "scripted:scripted"}  # the user stays frozen
    assert rows["rl"]["episodes"] == 2 and rows["rl"]["seconds"] > 0


def test_the_rows_evaluate_under_the_rollouts_sampling_budget(tmp_path, tiny_model_dir):
    """The evaluations sample as the preset's rollout does: user_sim's conversations side by side within its
    ``max_rollout_tokens``, not one late conversation a pass within the update's ``max_forward_tokens``; a preset
    without a rollout budget samples within the update's."""
    model = stand_in(tiny_model_dir, "user_sim_v0")
    config = learning._model_config("user_sim_v0", model, 0, {}, tmp_path, "eval")
    assert 0 < config.max_forward_tokens < config.max_rollout_tokens
    (policy,) = learning._model_policies(config, {"main": model}).values()
    assert policy.max_forward_tokens == config.max_rollout_tokens
    config = learning._model_config("user_sim_v0", model, 0, {"max_rollout_tokens": 0}, tmp_path, "eval")
    (policy,) = learning._model_policies(config, {"main": model}).values()
    assert policy.max_forward_tokens == config.max_forward_tokens


def test_quick_judge_rows_of_a_model_directory(capsys, tmp_path, tiny_model_dir):
    """``--model`` on agentic_judge: the floor beside zero-shot, warm start and the two rewards' RL runs, each scored
    by the hidden tests with a pooled interval; each RL run changes only its reward in the preset's env kwargs."""
    model = stand_in(tiny_model_dir, "agentic_judge_v0")
    figures = _pretrained("pretrained_judge", model, tmp_path)
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    rows = figures["rows"]["agentic_judge_v0"]
    assert list(rows) == ["zero-shot", "floor", "warm start", "judge", "visible"] and figures["failed_jobs"] == []
    assert figures["agentic_judge_v0"] == rows["judge"]["hidden_pass_rate"]
    assert rows["floor"]["hidden_pass_rate"] == 0.0  # the floor submits a stored wrong solution
    for stage, row in rows.items():
        low, high = row["hidden_pass_rate_ci95"]
        assert 0.0 <= low <= row["hidden_pass_rate"] <= high <= 1.0, stage
        assert 0.0 <= row["brittle_hidden_pass"] <= 1.0 and 0.0 <= row["judge_pass_rate"] <= 1.0, stage
    for result in json.loads((tmp_path / "learning.json").read_text())["agentic_judge_v0"]:
        assert result["figures"]["episodes"] == len(learning.QUICK_JUDGE_TASKS), result["stage"]  # per_task 1
    for stage in ("judge", "visible"):
        config = json.loads((tmp_path / f"agentic_judge_v0-s0-{stage}" / "config.json").read_text())
        # the quick setting's env kwargs kept, the reward the stage's
        assert config["env_kwargs"] == {**learning.MODEL_ENVS["agentic_judge_v0"].quick["env_kwargs"],
                                        "solver_reward": stage}, stage
        assert config["init"].startswith(str(tmp_path / "agentic_judge_v0-s0-sft")) and config["model"] == model
        assert config["policies"] == {"judge": "scripted:rule_judge"}  # the judge stays frozen
        assert rows[stage]["episodes"] == 2 and rows[stage]["seconds"] > 0, stage


def test_quick_proposer_rows_of_a_model_directory(capsys, tmp_path, tiny_model_dir):
    """``--model`` on proposer_solver: the proposers of fixed difficulty beside zero-shot, warm start and RL, each
    scored by learnability on the held-out topics."""
    model = stand_in(tiny_model_dir, "proposer_solver_v0")
    figures = _pretrained("pretrained_proposer", model, tmp_path)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == figures
    rows = figures["rows"]["proposer_solver_v0"]
    fixed = [f"fixed d={d}" for d in range(1, 10)]
    assert list(rows) == ["zero-shot", *fixed, "warm start", "hgrpo"] and figures["failed_jobs"] == []
    for stage, row in rows.items():
        assert 0.0 <= row["learnability"] <= 1.0 and 0.0 <= row["invalid_task_rate"] <= 1.0, stage
    assert all(rows[stage]["invalid_task_rate"] == 0.0 for stage in fixed)  # the scripted tasks are all valid
    config = json.loads((tmp_path / "proposer_solver_v0-s0-hgrpo" / "config.json").read_text())
    assert config["init"].startswith(str(tmp_path / "proposer_solver_v0-s0-sft")) and config["learn"] == ["proposer"]
    assert rows["hgrpo"]["episodes"] == 2


def test_model_rows_refuse_an_env_without_them(capsys):
    with pytest.raises(SystemExit):
        learning.main(["--quick", "--envs", "leduc_poker_v0", "--model", "smollm2-135m"])
    assert f"--envs takes names of {sorted(learning.MODEL_ENVS)} with --model" in capsys.readouterr().err
