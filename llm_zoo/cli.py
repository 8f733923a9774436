"""The ``llm-zoo`` command line: play, train, sft, eval, models, plot, serve, crossplay and bench."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from typing import Any

import llm_zoo
from llm_zoo.spec import ENV_ARGUMENT_HELP, env_argument, env_reference


def _model_sampling(args: argparse.Namespace, spec: str) -> dict[str, Any]:
    """Return the sampling options of ``play`` that apply to the policy ``spec`` names (a model or an endpoint)."""
    from llm_zoo.policies.registry import names_a_model

    if spec.startswith(("http://", "https://")):
        named = {"temperature": args.temperature, "top_p": args.top_p, "max_tokens": args.max_new_tokens}
    elif names_a_model(spec):  # as load_policy reads the spec
        named = {"temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens}
    else:  # a person or a scripted player: nothing is sampled from a model
        return {}
    return {k: v for k, v in named.items() if v is not None}


PLAY_DEFAULTS = ("human", "nash")
"""The players of the first two seats when ``play`` names neither them nor their roles (``--p0``, ``--p1``)."""


def play_seats(args: argparse.Namespace, roles: dict[str, str]) -> dict[str, str]:
    """Return agent -> policy spec for every seat of ``play``: ``--seat`` (agent or role), ``--p0`` / ``--p1``
    (the first and second agents), then :data:`PLAY_DEFAULTS` for those two; any other seat must be named."""
    from llm_zoo.seating import Seating

    agents = list(roles)
    written = list(args.seat)
    for i, (flag, spec) in enumerate((("--p0", args.p0), ("--p1", args.p1))):
        if spec is not None:
            if i >= len(agents):
                raise ValueError(f"play {flag}: {args.env} has {len(agents)} seat(s), {agents}; name seats with "
                                 "--seat AGENT=SPEC")
            written.append(f"{agents[i]}={spec}")
    seating = Seating.parse(written, where="play --seat/--p0/--p1", default=None)
    unknown = seating.unknown_seats(roles)
    if unknown:
        raise ValueError(f"play --seat names {unknown}, which {args.env} does not have; its agents are {agents} "
                         f"and its roles {sorted(set(roles.values()))}")
    defaults = dict(zip(agents, PLAY_DEFAULTS))
    missing = [a for a in agents if a not in defaults and a not in seating.seats and roles[a] not in seating.seats]
    if missing:
        raise ValueError(f"play: {args.env} has {len(agents)} seats, {agents}, and no player for {missing}; name "
                         f"each with --seat AGENT=SPEC or --seat ROLE=SPEC (SPEC: human, random, a scripted player, "
                         "a model or an endpoint URL, as --p0 takes)")
    return {a: Seating(seating.seats, defaults.get(a)).player(a, roles[a]) for a in agents}


def _play(args: argparse.Namespace) -> int:
    from llm_zoo.policies.registry import load_policy

    env = llm_zoo.make_env(args.env, **({"num_hands": args.hands} if args.hands else {}),
                           **({"render_mode": "ansi"} if args.verbose else {}))
    agents = env.possible_agents
    role_of = getattr(env.unwrapped, "role_of", None)
    specs = play_seats(args, {a: a if role_of is None else role_of(a) for a in agents})
    policies = {a: load_policy(s, args.env, seed=None if args.seed is None else args.seed + i,
                               **_model_sampling(args, s))
                for i, (a, s) in enumerate(specs.items())}
    human = "human" in specs.values()
    episodes = 1 if human else args.episodes
    stats = {a: {"payoff": 0.0, "wins": 0, "invalid_replies": 0, "replies": 0, "forfeits": 0} for a in agents}
    for episode in range(episodes):
        env.reset(seed=None if args.seed is None else args.seed + episode)
        returns = dict.fromkeys(agents, 0.0)
        for agent in env.agent_iter():
            obs, reward, term, trunc, info = env.last()
            returns[agent] += reward
            if term or trunc:
                stats[agent]["invalid_replies"] += info.get("invalid_replies", 0)
                stats[agent]["forfeits"] += int(info.get("forfeit", False))
                if human and specs[agent] == "human":
                    print("\n" + obs["messages"][-1]["content"])
                env.step(None)
                continue
            stats[agent]["replies"] += 1
            try:
                env.step(policies[agent](obs))
            except EOFError:
                print("\nbye")
                return 0
        for a in agents:
            stats[a]["payoff"] += returns[a]
            stats[a]["wins"] += int(returns[a] > max(returns[b] for b in agents if b != a))
        if args.verbose and not human:  # the episode's transcript: who said what, each move, the result
            print(f"--- episode {episode + 1} of {episodes}\n{env.unwrapped.render()}", flush=True)
    summary = {a: {"policy": specs[a], "mean_payoff": s["payoff"] / episodes, "win_rate": s["wins"] / episodes,
                   "invalid_reply_rate": s["invalid_replies"] / max(1, s["replies"]),
                   "forfeit_rate": s["forfeits"] / episodes}
               for a, s in stats.items()}
    print(json.dumps({"env": args.env, "episodes": episodes, "players": summary}, indent=None if human else 2))
    return 0


def _parse_sets(pairs: Sequence[str], cls: type | None = None) -> dict[str, object]:
    """Read ``--set KEY=VALUE`` pairs: VALUE as YAML (``3``, ``0.5``, ``true``, ``[a, b]``, ``{k: v}``).

    A field of type ``str`` (of ``cls``, the config dataclass: ``TrainConfig`` unless given) takes
    VALUE's text as it is, so that ``--set model=1.10`` or a path with a colon stays text.
    """
    import typing

    import yaml

    from llm_zoo.trainers.grpo import TrainConfig

    hints = typing.get_type_hints(cls or TrainConfig)
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE (a config field, see `llm-zoo train ENV --help`); got {pair!r}")
        if hints.get(key) is str:
            out[key] = value
            continue
        try:
            out[key] = _plain_yaml(value) if value.strip() else ""
        except (yaml.YAMLError, RecursionError) as exc:
            raise ValueError(f"--set {key}=... must be a YAML value; got {value!r:.120} ({' '.join(str(exc).split())})") from None
    return out


CONFIG_BYTES = 1 << 20
"""The largest --config file read: a config is KEY: VALUE lines, not data."""


def _plain_yaml(text: str) -> Any:
    """Read YAML as plain data: ``safe_load`` (no tags that construct objects), no aliases (``*name``), whose
    references can make a few lines stand for an exponentially large value, each key once per mapping (YAML
    keeps the last of two silently), no merge keys (``<<``), and no base-60 numbers (YAML 1.1 reads ``1:30`` as
    90): what a reader of the file sees is what the config gets."""
    import yaml

    class PlainLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not read in a config; write the "
                                                  "value out", self.peek_event().start_mark)
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise yaml.constructor.ConstructorError(None, None, "merge keys (<<) are not read in a config; "
                                                            "write the keys out", key_node.start_mark)
                key = self.construct_object(key_node, deep=True)
                try:
                    repeated = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the constructor below says so
                    continue
                if repeated:
                    raise yaml.constructor.ConstructorError(None, None, f"the key {key!r:.60} appears twice in one "
                                                            "mapping; write each key once", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_int(self, node: Any) -> Any:
            return self._no_base_60(node, super().construct_yaml_int)

        def construct_yaml_float(self, node: Any) -> Any:
            return self._no_base_60(node, super().construct_yaml_float)

        def _no_base_60(self, node: Any, construct: Any) -> Any:
            if ":" in str(node.value):
                raise yaml.constructor.ConstructorError(None, None, f"{node.value!r:.40} is a base-60 number in YAML "
                                                        "1.1; quote it, or write the number in base 10",
                                                        node.start_mark)
            return construct(node)

    PlainLoader.add_constructor("tag:yaml.org,2002:int", PlainLoader.construct_yaml_int)
    PlainLoader.add_constructor("tag:yaml.org,2002:float", PlainLoader.construct_yaml_float)
    return yaml.load(text, Loader=PlainLoader)  # noqa: S506 - a SafeLoader subclass


def _overrides(args: argparse.Namespace, cls: type, what: str) -> dict[str, object]:
    """Return the config fields a command line sets: ``--config FILE`` (YAML), then ``--set``, then ``--run-dir``.

    ``cls`` is the config dataclass the fields are checked against; ``what`` names them in errors.
    """
    import yaml

    from llm_zoo.configdoc import check_overrides

    overrides: dict[str, object] = {}
    if args.config:
        import os
        import stat

        try:  # a FIFO would block and a device never end: a config is a small regular file
            info = os.stat(args.config)
        except OSError as exc:
            raise ValueError(f"--config {args.config}: cannot be read ({exc.strerror})") from None
        if not stat.S_ISREG(info.st_mode) or info.st_size > CONFIG_BYTES:
            raise ValueError(f"--config {args.config}: expected a regular YAML file of at most {CONFIG_BYTES} bytes; "
                             f"got {f'{info.st_size} bytes' if stat.S_ISREG(info.st_mode) else 'a FIFO, device or folder'}")
        try:  # safe_load: a tag such as !!python/object/apply is an error, never a constructor call
            with open(args.config, "rb") as f:
                loaded = _plain_yaml(f.read().decode("utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
            raise ValueError(f"--config {args.config}: not a YAML file of plain KEY: VALUE lines "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); tags such as "
                             f"!!python/... are refused: write plain values") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"{args.config} must hold a mapping of {what} (KEY: VALUE lines); "
                             f"got {type(loaded).__name__}")
        overrides.update(check_overrides(cls, loaded, source=args.config))
    overrides.update(check_overrides(cls, _parse_sets(args.set, cls), source="--set"))
    if args.run_dir:
        overrides["run_dir"] = args.run_dir
    return overrides


def _train(args: argparse.Namespace) -> int:
    import dataclasses
    import time

    from llm_zoo.trainers.grpo import TrainConfig, make_config, train

    if args.resume and args.overwrite:
        raise ValueError("--resume continues the run in the run directory and --overwrite removes it; give one")
    config = make_config(args.env, _overrides(args, TrainConfig, "config fields"))
    from llm_zoo.trainers import distributed

    joined = distributed.setup(config.device)  # under torchrun: the ranks agree on one run directory
    if args.resume:  # the run it continues: the one named, or the env's newest (refused when there is none)
        from llm_zoo.trainers.checkpoint import resume_dir

        config = dataclasses.replace(config, run_dir=str(resume_dir(config.env, config.run_dir)))
    elif not config.run_dir:  # named here, so that it can be printed before the run starts
        config = dataclasses.replace(config, run_dir=distributed.broadcast(
            f"runs/{config.env}-{time.strftime('%Y%m%d-%H%M%S')}"))
    if not distributed.is_main():  # rank 0 alone reports; the others train
        train(config, resume=args.resume, overwrite=args.overwrite)
        distributed.teardown(joined)
        return 0
    print(f"llm-zoo train {config.env}: run directory {config.run_dir}", file=sys.stderr, flush=True)
    result = train(config, resume=args.resume, overwrite=args.overwrite)
    distributed.teardown(joined)
    power = f", average.power={config.average.power:g}" if config.average.power else ""
    scored = (f"the average of the learner's weights (average.ema={config.average.ema}{power})" if config.average.ema
              else "the last iterate (the learner's own weights)")
    if config.unmask.steps:
        scored += f", fitted without the decoding mask after the last step (unmask.steps={config.unmask.steps})"
    summary = {"run_dir": config.run_dir, "scored": scored,
               **{k: v for k, v in result.items() if k != "strategy"}}
    last = _last_iterate(config.run_dir) if config.average.ema else {}
    if last:
        summary["last_iterate"] = last
    print(json.dumps(summary, indent=2, default=str), flush=True)
    print(_final_line(config.env, result, scored, last, config.run_dir), file=sys.stderr)
    return 0


def _last_iterate(run_dir: str) -> dict[str, float]:
    """Return the last iterate's final evaluation (``eval/learner/*`` of the last row that has it)."""
    from llm_zoo.trainers.logging import read_metrics

    try:
        rows = read_metrics(run_dir)
    except FileNotFoundError:
        return {}
    for row in reversed(rows):
        found = {k.removeprefix("eval/learner/"): v for k, v in row.items() if k.startswith("eval/learner/")}
        if found:
            return found
    return {}


def _final_line(env: str, result: dict, scored: str, last: dict[str, float], run_dir: str) -> str:
    """Say in one line what the run scored, on which weights, and where it wrote."""
    named = [result["headline"]] if isinstance(result.get("headline"), str) else []  # the metric an env names
    figures = [f"{k} {result[k]:.4f}" for k in ("exploitability", "headline", *named, "unconstrained_exploitability",
                                                 "valid_mass_min") if isinstance(result.get(k), float)]
    also = [f"{k} {last[k]:.4f}" for k in ("exploitability", "headline") if k in last]
    text = f"llm-zoo train {env}: {', '.join(figures) or 'done'}, scoring {scored}"
    if also:
        text += f"; the last iterate: {', '.join(also)}"
    return f"{text}. Run directory {run_dir} (curves: llm-zoo plot {shlex.quote(run_dir)})"


def _sft(args: argparse.Namespace) -> int:
    from pathlib import Path

    from llm_zoo.trainers.checkpoint import own_run_dir
    from llm_zoo.trainers.sft import SFTConfig, make_sft_config, sft

    config = make_sft_config(args.env, {**_overrides(args, SFTConfig, "SFT config fields"), "role": args.role})
    if not config.run_dir:  # named here, so that it can be printed before the run starts
        import dataclasses
        import time

        config = dataclasses.replace(config, run_dir=f"runs/{config.env}-sft-{time.strftime('%Y%m%d-%H%M%S')}")
    print(f"llm-zoo sft {config.env} --role {config.role}: run directory {config.run_dir}", file=sys.stderr,
          flush=True)
    with own_run_dir(Path(config.run_dir), overwrite=args.overwrite, resumable=False):  # one run per directory
        summary = sft(config)
    print(json.dumps(summary, indent=2, default=str), flush=True)
    val = (f"val loss {summary['val_loss']:.4f} (from {summary['val_loss_initial']:.4f} before)"
           if summary["val_loss"] is not None else f"train loss {summary['train_loss']:.4f} (no held-out split)")
    print(f"llm-zoo sft {config.env}: {val}; policy {summary['policy']!r} in {summary['checkpoint']} "
          f"(start RL from it: llm-zoo train {env_reference(config.env)} --set init={shlex.quote(config.run_dir)})",
          file=sys.stderr)
    return 0


class _SFTHelp(argparse.Action):
    """``-h/--help`` of ``sft``: the options, then every SFT config field with ENV's defaults."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="show this help, with every SFT config field (its type, default and meaning) and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from llm_zoo.configdoc import describe
        from llm_zoo.trainers.sft import SFTConfig, make_sft_config

        env = getattr(namespace, "env", None)
        config, whose = (make_sft_config(env), f"{env}'s defaults") if env else (
            SFTConfig(), "the dataclass defaults; give ENV before --help for an env's")
        parser.epilog = (f"config fields (llm_zoo.trainers.sft.SFTConfig; {whose}):\n"
                         "  set them with --set KEY=VALUE (VALUE read as YAML) or in a YAML file given to --config;\n"
                         "  --set wins over --config, and both over the env's defaults.\n\n" + describe(config))
        parser.print_help()
        parser.exit()


def _eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from llm_zoo.trainers.checkpoint import verify_checkpoint
    from llm_zoo.trainers.evaluation import evaluate_checkpoint, evaluate_model

    spec = llm_zoo.env_spec(args.env)
    if spec.evaluate is None and (len(spec.roles) > 1 or not spec.scripted):  # no headline and no games to play
        raise ValueError(f"{args.env} has no evaluation: its EnvSpec.evaluate is None (and "
                         + ("it has several roles, so there are no games against its scripted players"
                            if spec.scripted else "it has no scripted players to play against")
                         + "). Give the env's EnvSpec an evaluate(policies, *, env_kwargs, play, **options) that "
                           "returns its headline metric (docs/writing_an_env.md, 'Evaluate it')")
    sampling = {"temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens,
                "constrain_to_legal": args.constrain_to_legal}
    options = {"episodes": args.episodes, "method": args.method, "seed": args.seed,
               "headline_episodes": args.headline_episodes, "sampling": sampling}
    if args.model:
        result = evaluate_model(args.env, args.model, **options)
    else:
        verify_checkpoint(Path(args.checkpoint))  # a damaged file is refused by name before anything loads it
        result = evaluate_checkpoint(args.env, args.checkpoint, **options)
    print(json.dumps(result, indent=2, default=str))
    return 0


def _models(args: argparse.Namespace) -> int:
    from llm_zoo import catalogue

    if args.convert:
        if args.convert not in catalogue.CATALOGUE:
            raise ValueError(f"--convert takes a catalogue name, one of {sorted(catalogue.CATALOGUE)}; "
                             f"got {args.convert!r}")
        print(catalogue.convert(catalogue.CATALOGUE[args.convert]))
        return 0
    rows = catalogue.status()
    if args.json:
        print(json.dumps({"cache": str(catalogue.cache_dir()), "models": rows}, indent=2))
        return 0
    print(f"catalogue models (model=NAME; converted ones are kept in {catalogue.cache_dir()}, "
          f"${catalogue.CACHE_ENV} moves it):")
    for row in rows:
        installed = (f"{row['package']} {row['installed']} installed" if row["installed"]
                     else f"not installed: {row['install']}")
        converted = f"converted in {row['converted']}" if row["converted"] else "not converted yet (on first use)"
        print(f"  {row['name']:<14} {row['parameters']:>5}  {'chat' if row['chat'] else 'base'}  {installed}; "
              f"{converted}\n  {'':<14} {row['description']}")
    print("also: any model directory written by save_pretrained, or a hub name (owner/name) where a hub is reached")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from llm_zoo.plots import plot_run

    print(plot_run(args.run_dir, args.out))
    return 0


DESCRIPTION = """Multi-agent LLM environments: play them, train LLM policies on them, evaluate and compare.

Each command has its own help: llm-zoo COMMAND --help (llm-zoo train ENV --help lists every config field)."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keep descriptions' line breaks, and show each option's default unless its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default is None or default is False or default is argparse.SUPPRESS
                or default == [] or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help shows defaults; subcommands' parsers are made of it too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


class _TrainHelp(argparse.Action):
    """``-h/--help`` of ``train``: the options, then every config field with ENV's defaults."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="show this help, with every config field (its type, default and meaning) and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.epilog = config_help(getattr(namespace, "env", None))
        parser.print_help()
        parser.exit()


def config_help(env: str | None) -> str:
    """Return the config fields' help: each field's type, default (``env``'s where given) and docstring."""
    from llm_zoo.configdoc import describe
    from llm_zoo.trainers.grpo import TrainConfig, make_config

    config, whose = (make_config(env), f"{env}'s defaults") if env else (TrainConfig(), "the dataclass defaults; "
                                                                          "give ENV before --help for an env's")
    return (f"config fields (llm_zoo.trainers.grpo.TrainConfig; {whose}):\n"
            "  set them with --set KEY=VALUE, VALUE read as YAML (3, 0.5, true, [a, b], {k: v}; a str field takes\n"
            "  the text as it is), or in a YAML file of KEY: VALUE lines given to --config; --set wins over\n"
            "  --config, and both over the env's defaults.\n\n" + describe(config))


def _kuhn_hands() -> object:
    """Return kuhn_poker_v0's default num_hands, read off its signature (so help cannot drift from it)."""
    import inspect

    from llm_zoo import kuhn_poker_v0

    return inspect.signature(kuhn_poker_v0.raw_env).parameters["num_hands"].default


def _sampling_options(parser: argparse.ArgumentParser, defaults: str | tuple[str, str, str]) -> None:
    """Add --temperature, --top-p and --max-new-tokens (None: the default ``defaults`` names, one text for all three
    or one each)."""
    each = (defaults,) * 3 if isinstance(defaults, str) else defaults
    parser.add_argument("--temperature", type=float, default=None, help=f"sampling temperature, 0 greedy ({each[0]})")
    parser.add_argument("--top-p", type=float, default=None, help=f"nucleus sampling mass ({each[1]})")
    parser.add_argument("--max-new-tokens", type=int, default=None, help=f"longest reply, in tokens ({each[2]})")


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``llm-zoo``."""
    parser = _Parser(prog="llm-zoo", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    play = sub.add_parser("play", help="play an env: a person or any policy against any policy")
    play.add_argument("env", type=env_argument, help=ENV_ARGUMENT_HELP)
    play.add_argument("--p0", default=None, help="first seat: human, random, a scripted player "
                      "(kuhn: nash, card; or scripted:NAME), a model (a directory, a catalogue name such as "
                      "smollm2-135m: llm-zoo models; a hub name) or an endpoint URL (default: human)")
    play.add_argument("--p1", default=None, help="second seat, same choices (default: nash)")
    play.add_argument("--seat", action="append", default=[], metavar="SEAT=SPEC",
                      help="any seat, by agent or role (judge=rule_judge, player=random), same choices; repeat it "
                      "for each seat past the second")
    play.add_argument("--hands", type=int, default=None,
                      help=f"hands per match (Kuhn poker's num_hands; default: the env's, {_kuhn_hands()})")
    play.add_argument("--episodes", type=int, default=100, help="episodes when no human plays (default: 100)")
    play.add_argument("--seed", type=int, default=None, help="seed for deals and policies (default: unseeded)")
    play.add_argument("--verbose", action="store_true", help="print each episode's transcript")
    _sampling_options(play, ("a model seat's; default: 1.0", "a model seat's; default: 1.0",
                             "a model seat's; default: 64"))
    play.set_defaults(func=_play)

    train = sub.add_parser("train", help="train LLM policies on an env (GRPO / RAE, self-play)", add_help=False,
                           description="Train LLM policies on an env with token-level GRPO / RAE; the config "
                                       "fields are listed below.")
    train.add_argument("-h", "--help", action=_TrainHelp)
    train.add_argument("env", type=env_argument, help=ENV_ARGUMENT_HELP)
    train.add_argument("--config", metavar="YAML", help="YAML file of config fields (KEY: VALUE lines; see below)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config field, VALUE read as YAML, e.g. --set algorithm=grpo "
                            "--set steps=50 (repeatable; see below)")
    train.add_argument("--run-dir", help="where the run writes (default runs/<env>-<time>)")
    train.add_argument("--resume", action="store_true", help="continue from the run dir's latest checkpoint")
    train.add_argument("--overwrite", action="store_true",
                       help="start afresh in a run dir that already holds a run, removing that run's files "
                            "(without it, train refuses such a directory)")
    train.set_defaults(func=_train)

    fit = sub.add_parser("sft", help="fit a role's policy to traces of the env's scripted players (warm start)",
                         add_help=False, description="Fit a role's policy to traces of the env's scripted players "
                         "(supervised, loss on the role's tokens only); the config fields are listed below.")
    fit.add_argument("-h", "--help", action=_SFTHelp)
    fit.add_argument("env", type=env_argument, help=ENV_ARGUMENT_HELP)
    fit.add_argument("--role", required=True, help="the role (or agent) whose turns are fitted, e.g. assistant")
    fit.add_argument("--config", metavar="YAML", help="YAML file of SFT config fields (KEY: VALUE lines; see below)")
    fit.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override an SFT config field, VALUE read as YAML, e.g. --set episodes=128 (repeatable)")
    fit.add_argument("--run-dir", help="where the run writes (default runs/<env>-sft-<time>)")
    fit.add_argument("--overwrite", action="store_true",
                     help="fit afresh in a run dir that already holds a run, removing that run's files "
                          "(without it, sft refuses such a directory)")
    fit.set_defaults(func=_sft)

    evaluate = sub.add_parser("eval", help="evaluate a checkpoint or a model: the env's headline metric on held-out "
                              "seeds, with its 95%% interval, as JSON (symmetric games: also against baselines)")
    evaluate.add_argument("env", type=env_argument, help=ENV_ARGUMENT_HELP)
    which = evaluate.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", help="a checkpoint directory (runs/.../checkpoints/step_N)")
    which.add_argument("--model", help="a model as it is, untrained: a catalogue name (llm-zoo models), a model "
                       "directory or a hub name; it samples, and the other seats are played, as the env's training "
                       "preset for its kind says (trainers/presets.py), unless the options below say otherwise")
    evaluate.add_argument("--episodes", type=int, default=500,
                          help="games against each scripted player (symmetric games such as kuhn_poker_v0)")
    evaluate.add_argument("--headline-episodes", type=int, default=None,
                          help="episodes of the env's headline evaluation (default: the env's own count)")
    evaluate.add_argument("--method", choices=("exact", "sampled"), default="exact",
                          help="exact: strategy from log-probs; sampled: an estimate, for models that reason first")
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the evaluation games")
    _sampling_options(evaluate, "default: the run's, or for --model the env's preset's")
    evaluate.add_argument("--constrain-to-legal", action=argparse.BooleanOptionalAction, default=None,
                          help="sample only the legal replies an observation lists (default: the run's, or for "
                               "--model the env's preset's)")
    evaluate.set_defaults(func=_eval)

    models = sub.add_parser("models", help="list the model catalogue (model=NAME): what is installed and converted")
    models.add_argument("--json", action="store_true", help="print the listing as JSON")
    models.add_argument("--convert", metavar="NAME", help="convert a catalogue model now (else on its first use)")
    models.set_defaults(func=_models)

    plot = sub.add_parser("plot", help="draw a run's curves into a PNG")
    plot.add_argument("run_dir", help="a run directory (holding metrics.jsonl)")
    plot.add_argument("--out", help="PNG path (default RUN_DIR/curves.png)")
    plot.set_defaults(func=_plot)

    from llm_zoo.serve import add_parser as add_serve

    add_serve(sub)

    from llm_zoo.crossplay import add_parser as add_crossplay

    add_crossplay(sub)

    from llm_zoo.bench import add_parser as add_bench

    add_bench(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``llm-zoo``; return the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"llm-zoo: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
