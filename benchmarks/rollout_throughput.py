"""Rollout throughput: episodes/s of ``collect`` on kuhn_poker_v0 with a tiny model, batch 64 versus batch 1.

Both seats are played by one :class:`~llm_zoo.policies.TransformersPolicy` on the untrained tiny
llama that ``llm-zoo train kuhn_poker_v0`` starts from: built by the trainer's own
``build_tokenizer_and_model`` from ``presets.KUHN_POKER_V0`` (hidden size 128, 2 layers, a
word-level tokenizer drawn from ``llm_zoo.envs.kuhn_poker.text.corpus()``, a zero output layer, so
a uniform first policy). ``--hidden-size`` and ``--layers`` change its shape; the narrower
default of :func:`llm_zoo.models.build_tiny_model`, hidden size 64, spends a larger share of each
turn outside the model, so its ratio is lower (14.2x against 15.1-16.1x at hidden size 128 on this
project's 2-core CPU, 2026-11-29). The same model, on the same number of threads, runs
:func:`llm_zoo.trainers.rollout.collect` with ``batch_size=64`` (one ``act`` call samples up to 64
replies) and with ``batch_size=1`` (one reply per call). The two alternate in rounds, each on
fresh seeds, after a warm-up, so that a busy neighbour slows both alike and the ratio stays fair.

Two settings, each a table:

- ``trainer``: what ``llm-zoo train kuhn_poker_v0`` rolls out, ``presets.KUHN_POKER_V0``
  (read from there): no rules in the system prompt (``rules_in_prompt=False``, ~70-token
  prompts), one-token replies (``max_new_tokens=1``; each move is one token of the word
  vocabulary), and whatever else the trainer sets (such as ``max_retries``).
- ``long``: the env's own defaults (the rules in the prompt, ~175-token prompts; invalid replies
  retried) and replies of up to 8 tokens: this benchmark's setting before the trainer's existed.

The untrained model mostly writes invalid replies, so episodes end by retry and forfeit after 2 to
4 turns; that is the same work for both batch sizes.

Where the time goes is measured too, per turn (a reply): making envs (``make_env``, once per env
per ``collect`` call), the env's own calls (reset, step, last, observe), the policy's chat template
and tokenisation (``encode_prompts``), the rest of ``act`` (sampling: the model's forward passes,
plus decoding), and ``collect``'s own bookkeeping (the rest).

    python -m benchmarks.rollout_throughput                    # both settings, 10 rounds of 256 (batch 64) and 64 (batch 1) episodes
    python -m benchmarks.rollout_throughput --quick            # 1 round of 64 and 4 episodes: seconds
    python -m benchmarks.rollout_throughput --setting trainer  # one setting only (trainer or long)
    python -m benchmarks.rollout_throughput --threads 2        # torch threads (default 1; see --help)
    python -m benchmarks.rollout_throughput --no-share-prefix  # run every prompt whole (see TransformersPolicy)

The last line printed is a JSON object with the first setting's figures: ``episodes_per_s_b1``,
``episodes_per_s_b64``, ``ratio`` (b64 / b1), ``tokens_per_s_b1``, ``tokens_per_s_b64`` (generated
tokens), and the setting; with both settings the ``long`` setting's figures follow under
``"long"``. The goal stated for ``collect``: batch 64 at least 15x the episodes/s of batch 1 on a
2-core CPU.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks import _harness as harness

GOAL_RATIO = 15.0
PARTS = ("make_env", "env", "template", "sampling", "collect")
PART_HELP = {
    "make_env": "making envs",
    "env": "env reset/step/last/observe",
    "template": "chat template + tokenize",
    "sampling": "sampling (model forward + decode)",
    "collect": "collect bookkeeping (records)",
}


@dataclass
class Result:
    """What one batch size did over all rounds."""

    batch: int
    episodes: int = 0
    turns: int = 0
    tokens: int = 0
    prompt_tokens: int = 0
    calls: int = 0
    seconds: float = 0.0
    parts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.seconds

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


class _Clock:
    """Accumulates the seconds spent inside wrapped callables, by part."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.calls = dict.fromkeys(PARTS, 0)

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - start
                self.calls[part] += 1

        return timed


@dataclass(frozen=True)
class Setting:
    """What the policy samples and the env prompts with."""

    name: str
    max_new_tokens: int
    env_kwargs: dict[str, Any]
    constrain: bool = False

    def describe(self) -> str:
        return (f"setting {self.name!r}: max_new_tokens {self.max_new_tokens}, env_kwargs {self.env_kwargs}, "
                f"constrained to legal replies: {self.constrain}")


def settings(args: argparse.Namespace) -> list[Setting]:
    """Return the settings to run, the trainer's first; ``--max-new-tokens`` overrides theirs."""
    from llm_zoo.trainers import presets

    defaults = presets.KUHN_POKER_V0
    chosen = {
        "trainer": Setting("trainer", defaults["max_new_tokens"], dict(defaults["env_kwargs"]),
                           bool(defaults.get("constrain_to_legal", False))),
        "long": Setting("long", 8, {}),
    }
    names = ["trainer", "long"] if args.setting == "both" else [args.setting]
    return [Setting(n, args.max_new_tokens or chosen[n].max_new_tokens, chosen[n].env_kwargs, chosen[n].constrain)
            for n in names]


def build_policy(args: argparse.Namespace) -> Any:
    """Build the trainer's tokenizer and untrained tiny llama (its shape overridden by the args given), and a policy on them."""
    from llm_zoo.policies import TransformersPolicy
    from llm_zoo.trainers.grpo import build_tokenizer_and_model, make_config

    shape = {"model_hidden_size": args.hidden_size, "model_layers": args.layers}
    config = make_config("kuhn_poker_v0", {k: v for k, v in shape.items() if v is not None})
    tokenizer, model = build_tokenizer_and_model(config, seed=args.seed)
    return TransformersPolicy(model, tokenizer, seed=args.seed, device="cpu",
                              share_prefix=not args.no_share_prefix)


def run_collect(policy: Any, batch: int, seeds: Sequence[int], seed: int, result: Result,
                env_kwargs: dict[str, Any]) -> None:
    """Collect one episode per seed at ``batch`` and add the counts and timings to ``result``."""
    from llm_zoo import kuhn_poker_v0
    from llm_zoo.trainers.rollout import collect

    clock = _Clock()

    def make_env() -> Any:
        start = time.perf_counter()
        env = kuhn_poker_v0.env(**env_kwargs)
        for name in ("reset", "step", "last", "observe"):  # instance attributes shadow the methods
            setattr(env, name, clock.wrap("env", getattr(env, name)))
        clock.seconds["make_env"] += time.perf_counter() - start
        return env

    act, encode = policy.act, policy.encode_prompts
    policy.act = clock.wrap("sampling", act)
    policy.encode_prompts = clock.wrap("template", encode)
    try:
        start = time.perf_counter()
        episodes = collect(make_env, {"player": policy}, list(seeds), batch_size=batch, seed=seed)
        elapsed = time.perf_counter() - start
    finally:
        del policy.act, policy.encode_prompts
    failed = [e for e in episodes if e.failed]
    if failed:
        raise RuntimeError(f"{len(failed)} episodes failed at batch {batch}; the first error:\n{failed[0].error}")
    parts = clock.seconds
    parts["sampling"] -= parts["template"]  # encode_prompts runs inside act
    parts["collect"] = elapsed - sum(parts[p] for p in PARTS if p != "collect")
    result.episodes += len(episodes)
    result.turns += sum(len(e.turns) for e in episodes)
    result.tokens += sum(e.completion_tokens for e in episodes)
    result.prompt_tokens += sum(e.prompt_tokens for e in episodes)
    result.calls += clock.calls["sampling"]
    result.seconds += elapsed
    for part in PARTS:
        result.parts[part] += parts[part]


def print_table(results: Sequence[Result], setting: str) -> None:
    """Print throughput per batch size, then the time per turn of each part."""
    print(f"collect() on kuhn_poker_v0, {setting}\n")
    header = (f"{'batch':>5} {'episodes':>9} {'turns':>7} {'seconds':>8} {'episodes/s':>11} {'tokens/s':>10} "
              f"{'turns/ep':>9} {'prompt tokens/turn':>19} {'replies/act call':>17}")
    print(header)
    print("-" * len(header))
    for r in results:
        print(f"{r.batch:>5} {r.episodes:>9} {r.turns:>7} {r.seconds:>8.2f} {r.episodes_per_s:>11.1f} "
              f"{r.tokens_per_s:>10.0f} {r.turns / r.episodes:>9.2f} {r.prompt_tokens / r.turns:>19.1f} "
              f"{r.turns / r.calls:>17.1f}")
    print("\nwhere the time goes, milliseconds per turn (share of wall time)")
    header = f"{'part':<36}" + "".join(f"{'batch ' + str(r.batch):>20}" for r in results)
    print(header)
    print("-" * len(header))
    for part in PARTS:
        cells = "".join(f"{1e3 * r.parts[part] / r.turns:>11.3f} ms ({r.parts[part] / r.seconds:>4.0%})"
                        for r in results)
        print(f"{PART_HELP[part]:<36}{cells}")
    cells = "".join(f"{1e3 * r.seconds / r.turns:>11.3f} ms {'':>6}" for r in results)
    print(f"{'total':<36}{cells}")


def figures_of(small: Result, large: Result, setting: Setting, args: argparse.Namespace,
               model: Any) -> dict[str, Any]:
    """Return one setting's figures for the JSON line (``model``: the model's config)."""
    return {
        "episodes_per_s_b1": round(small.episodes_per_s, 2),
        f"episodes_per_s_b{args.batch}": round(large.episodes_per_s, 2),
        "ratio": round(large.episodes_per_s / small.episodes_per_s, 3),
        "tokens_per_s_b1": round(small.tokens_per_s, 1),
        f"tokens_per_s_b{args.batch}": round(large.tokens_per_s, 1),
        "batch": args.batch,
        "threads": args.threads,
        "setting": setting.name,
        "max_new_tokens": setting.max_new_tokens,
        "constrain": setting.constrain,
        "rules_in_prompt": setting.env_kwargs.get("rules_in_prompt", True),
        "env_kwargs": setting.env_kwargs,
        "share_prefix": not args.no_share_prefix,
        "hidden_size": model.hidden_size,
        "layers": model.num_hidden_layers,
        "episodes": [small.episodes, large.episodes],
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print the tables and the JSON line, and return the JSON's figures."""
    started = time.perf_counter()  # the JSON line's wall-clock "seconds"
    parser = harness.parser(__doc__, quick="1 round of 64 and 4 episodes (the test's setting)")
    parser.add_argument("--setting", choices=("both", "trainer", "long"), default="both",
                        help="trainer: presets.KUHN_POKER_V0 (no rules in the prompt, 1-token replies); "
                             "long: the rules in the prompt and up to 8 tokens; both: trainer, then long")
    parser.add_argument("--rounds", type=harness.count, default=10, help="alternating rounds of batch 64 and batch 1")
    parser.add_argument("--episodes", type=harness.count, default=256, help="episodes per round at batch 64")
    parser.add_argument("--episodes-b1", type=harness.count, default=64, help="episodes per round at batch 1")
    parser.add_argument("--batch", type=harness.count, default=64, help="the large batch size")
    parser.add_argument("--max-new-tokens", type=harness.count, default=None,
                        help="longest reply, in tokens, for every setting (default: the setting's)")
    parser.add_argument("--hidden-size", type=int, default=None,
                        help="tiny llama width (default: the trainer's, presets.KUHN_POKER_V0['model_hidden_size'])")
    parser.add_argument("--layers", type=int, default=None,
                        help="tiny llama depth (default: the trainer's, TrainConfig.model_layers)")
    parser.add_argument("--threads", type=harness.count, default=1,
                        help="torch intra-op threads for both settings; 1 by default because extra threads "
                             "that must wait for a busy core slow small ops down many times over")
    parser.add_argument("--no-share-prefix", action="store_true",
                        help="TransformersPolicy(share_prefix=False): run every prompt whole, for comparison")
    parser.add_argument("--seed", type=int, default=0, help="model init, sampling and env seeds")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.episodes, args.episodes_b1 = 1, args.batch, 4

    import torch

    torch.set_num_threads(args.threads)
    policy = build_policy(args)
    runs = [(s, Result(1), Result(args.batch)) for s in settings(args)]
    for setting, _, _ in runs:
        policy.max_new_tokens = setting.max_new_tokens
        policy.constrain = setting.constrain
        # WARM-UP: first forward passes, allocator, tokenizer caches, template compilation.
        warm = range(10**6, 10**6 + min(args.batch, 16))
        run_collect(policy, args.batch, warm, args.seed, Result(args.batch), setting.env_kwargs)
        run_collect(policy, 1, range(10**6, 10**6 + 2), args.seed, Result(1), setting.env_kwargs)

    next_seed = 0
    for round_ in range(args.rounds):
        for setting, small, large in runs:
            policy.max_new_tokens = setting.max_new_tokens
            policy.constrain = setting.constrain
            for result, count in ((large, args.episodes), (small, args.episodes_b1)):
                run_collect(policy, result.batch, range(next_seed, next_seed + count), args.seed + round_, result,
                            setting.env_kwargs)
                next_seed += count

    model = policy.model.config
    figures: dict[str, Any] = {}
    for setting, small, large in runs:
        print_table([small, large],
                    f"untrained tiny llama (hidden {model.hidden_size}, {model.num_hidden_layers} layers, "
                    f"vocab {model.vocab_size}), {setting.describe()}, {args.threads} torch thread(s), "
                    f"{args.rounds} round(s)" + ("" if policy.share_prefix else ", share_prefix=False"))
        ratio = large.episodes_per_s / small.episodes_per_s
        verdict = (f"goal >= {GOAL_RATIO:g}x: {'met' if ratio >= GOAL_RATIO else 'NOT met'}" if setting.name == "trainer"
                   else f"the {GOAL_RATIO:g}x goal is stated for the trainer setting")
        print(f"\nbatch {args.batch} / batch 1 = {ratio:.2f}x episodes/s ({verdict})\n")
        if figures:
            figures[setting.name] = figures_of(small, large, setting, args, model)
        else:
            figures = figures_of(small, large, setting, args, model)
    figures["seconds"] = round(time.perf_counter() - started, 2)
    return harness.emit(figures)


if __name__ == "__main__":
    main(sys.argv[1:])
