"""Env throughput: AEC steps per second of kuhn_poker_v0 beside tictactoe_v3 and TextArena's Kuhn poker.

Each env is driven by a uniform random player that only makes legal moves, for the same wall-clock
budget, in one run, so that the machine's noise cancels in the ratios:

* ``kuhn_poker_v0``: the text env as users get it (``env()``, with its wrappers), in 3-hand matches
  and, in a second row, single hands; the player picks a reply from ``obs["legal_actions"]``.
* PettingZoo's ``tictactoe_v3`` (``env()``, with its wrappers); the player picks from
  ``obs["action_mask"]``.
* TextArena's ``KuhnPoker-v0`` (3 rounds, default wrappers, a fresh env per episode as in its
  examples) when textarena is installed; the player picks from the env's current legal-action tree
  and the observation is fetched every turn, as an agent would.

A step is one agent's action. PettingZoo's ``None`` steps for finished agents are taken but not
counted (TextArena has none). Every loop uses the env's own observe call (``last()`` or
``get_observation()``) before each action, as a real agent loop must.

The comparison setting is kuhn_poker_v0 in 3-hand matches (``num_hands=3``, marked ``*`` in the
table): the length of TextArena's ``KuhnPoker-v0``, so that both Kuhn poker envs do the same work
per episode, and 6.75 steps an episode, near tictactoe's 7.6, so that resets weigh alike. A single
hand is 2.25 steps, and its reset and the finished agents' None steps take over a third of its
time; that row is shown beside it, with its ratios.

    python -m benchmarks.env_throughput            # 3 s per env
    python -m benchmarks.env_throughput --quick    # 0.5 s per env

The last line printed is a JSON object: ``kuhn_steps_per_s`` (the comparison setting, whose number
of hands is ``kuhn_hands``), ``kuhn_1hand_steps_per_s``, ``kuhn_3hands_steps_per_s``,
``tictactoe_steps_per_s``, ``ratio`` (kuhn / tictactoe) and ``ratio_1hand``; with textarena,
``textarena_steps_per_s``, ``ratio_textarena`` (kuhn / textarena) and ``ratio_textarena_1hand``;
and ``seconds``, the wall-clock. The goal stated for kuhn_poker_v0: at least 2x tictactoe_v3 and at
least TextArena, in the comparison setting.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks import _harness as harness

GOAL_VS_TICTACTOE = 2.0
GOAL_VS_TEXTARENA = 1.0
COMPARED_HANDS = 3  # the comparison setting: TextArena's KuhnPoker-v0 plays 3 rounds
SLICE_SECONDS = 0.1  # the envs take turns in slices this long


@dataclass
class Result:
    """What one env did in its budget."""

    name: str
    steps: int
    episodes: int
    seconds: float

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds


def _timed(episode: Callable[[int], int], seconds: float, first: int = 0) -> tuple[int, int, float]:
    """Run episodes ``first, first + 1, ...`` until ``seconds`` have passed; return steps, episodes, time."""
    steps = episodes = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        steps += episode(first + episodes)
        episodes += 1
    return steps, episodes, time.perf_counter() - start


def measure(episodes: dict[str, Callable[[int], int]], seconds: float, slices: int) -> list[Result]:
    """Give each env ``seconds`` of wall-clock time, taken in ``slices`` round-robin turns.

    Interleaving spreads a busy neighbour or a clock change over every env alike, so that the ratios
    stay fair on a shared machine.
    """
    for episode in episodes.values():  # warm-up: imports, caches, first allocations
        _timed(episode, min(0.2, seconds / 5))
    results = {name: Result(name, 0, 0, 0.0) for name in episodes}
    for _ in range(slices):
        for name, episode in episodes.items():
            result = results[name]
            steps, count, elapsed = _timed(episode, seconds / slices, first=result.episodes)
            result.steps += steps
            result.episodes += count
            result.seconds += elapsed
    for result in results.values():
        if result.steps == 0:
            raise RuntimeError(f"{result.name} made no steps in {seconds} s; the benchmark loop is broken")
    return list(results.values())


def kuhn_episode(num_hands: int = 1) -> Callable[[int], int]:
    """Return one episode of llm_zoo's kuhn_poker_v0 with a random legal-reply player."""
    from llm_zoo import kuhn_poker_v0

    env, rng = kuhn_poker_v0.env(num_hands=num_hands), random.Random(0)

    def episode(index: int) -> int:
        env.reset(seed=index)
        steps = 0
        for _ in env.agent_iter():
            obs, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            env.step(rng.choice(obs["legal_actions"]))
            steps += 1
        return steps

    return episode


def tictactoe_episode() -> Callable[[int], int]:
    """Return one episode of PettingZoo's tictactoe_v3 with a random legal-action player."""
    try:
        from pettingzoo.classic import tictactoe_v3
    except ImportError as exc:  # its module imports pygame for rendering, even when nothing renders
        raise ImportError(f"tictactoe_v3 could not be imported ({exc}); install PettingZoo's classic extra's "
                          "renderer with: pip install 'pygame-ce>=2.3'") from exc

    env, rng = tictactoe_v3.env(), random.Random(0)

    def episode(index: int) -> int:
        env.reset(seed=index)
        steps = 0
        for _ in env.agent_iter():
            obs, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            env.step(rng.choice(np.flatnonzero(obs["action_mask"])))
            steps += 1
        return steps

    return episode


def textarena_episode() -> Callable[[int], int]:
    """Return one episode of TextArena's KuhnPoker-v0 (3 rounds) with a random legal-reply player.

    Each episode makes a fresh env, as TextArena's examples do: its ``LLMObservationWrapper`` keeps
    every observation across resets (0.7.4), so a reused env slows down episode after episode.
    ``make`` costs about 10 us, under 1% of an episode.
    """
    import textarena as ta

    rng = random.Random(0)

    def episode(index: int) -> int:
        env = ta.make("KuhnPoker-v0")
        env.reset(num_players=2, seed=index)
        steps, done = 0, False
        while not done:
            env.get_observation()
            legal = list(env.state.game_state["current_legal_action_tree"])
            done, _ = env.step(f"[{rng.choice(legal)}]")
            steps += 1
        env.close()
        return steps

    return episode


def _textarena_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("textarena") is not None


def print_table(results: Sequence[Result | str], reference: Result) -> None:
    """Print one row per env: steps, episodes, steps per episode, steps/s and the reference's speed as a multiple."""
    header = (f"{'env':<35} {'steps':>9} {'episodes':>9} {'steps/ep':>8} {'steps/s':>9} "
              f"{reference.name.rstrip(' *') + ' / this':>27}")
    print(header)
    print("-" * len(header))
    for row in results:
        if isinstance(row, str):
            print(f"{row:<35} {'not installed':>9}")
            continue
        print(f"{row.name:<35} {row.steps:>9} {row.episodes:>9} {row.steps / row.episodes:>8.2f} "
              f"{row.steps_per_s:>9.0f} {reference.steps_per_s / row.steps_per_s:>26.2f}x")


def _goal_line(other: str, ratio: float, ratio_1hand: float, goal: float) -> str:
    return (f"kuhn ({COMPARED_HANDS} hands) / {other} = {ratio:.2f} (goal >= {goal:g}): "
            f"{'met' if ratio >= goal else 'NOT met'}   [1 hand: {ratio_1hand:.2f}]")


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print the table and the JSON line, and return the JSON's figures."""
    started = time.perf_counter()  # the JSON line's wall-clock "seconds"
    parser = harness.parser(__doc__, quick="0.5 s per env (the test's setting)")
    parser.add_argument("--seconds", type=harness.positive, default=3.0, help="wall-clock budget per env")
    args = parser.parse_args(argv)
    seconds = 0.5 if args.quick else args.seconds

    compared = f"kuhn_poker_v0 ({COMPARED_HANDS} hands) *"
    episodes = {
        compared: kuhn_episode(COMPARED_HANDS),
        "kuhn_poker_v0 (1 hand)": kuhn_episode(1),
        "pettingzoo tictactoe_v3": tictactoe_episode(),
    }
    textarena_name = "textarena KuhnPoker-v0 (3 rounds)"
    if _textarena_installed():
        episodes[textarena_name] = textarena_episode()
    results = measure(episodes, seconds, slices=max(1, round(seconds / SLICE_SECONDS)))
    kuhn, kuhn1, tictactoe, *rest = results
    textarena: Result | str = rest[0] if rest else textarena_name

    print(f"AEC steps per second, random legal players, {seconds:g} s each, interleaved in "
          f"{SLICE_SECONDS:g} s slices (finished agents' None steps not counted)\n")
    print_table([kuhn, kuhn1, tictactoe, textarena], kuhn)
    print(f"\n* the comparison setting: {COMPARED_HANDS}-hand matches, the length of TextArena's KuhnPoker-v0; "
          "1-hand episodes\n  (2.25 steps) are shown for reference, their ratios in brackets below.")
    figures = {
        "kuhn_steps_per_s": round(kuhn.steps_per_s, 1),
        "kuhn_hands": COMPARED_HANDS,
        "kuhn_1hand_steps_per_s": round(kuhn1.steps_per_s, 1),
        "kuhn_3hands_steps_per_s": round(kuhn.steps_per_s, 1),
        "tictactoe_steps_per_s": round(tictactoe.steps_per_s, 1),
        "ratio": round(kuhn.steps_per_s / tictactoe.steps_per_s, 3),
        "ratio_1hand": round(kuhn1.steps_per_s / tictactoe.steps_per_s, 3),
    }
    goals = [_goal_line("tictactoe_v3", figures["ratio"], figures["ratio_1hand"], GOAL_VS_TICTACTOE)]
    if isinstance(textarena, Result):
        figures["textarena_steps_per_s"] = round(textarena.steps_per_s, 1)
        figures["ratio_textarena"] = round(kuhn.steps_per_s / textarena.steps_per_s, 3)
        figures["ratio_textarena_1hand"] = round(kuhn1.steps_per_s / textarena.steps_per_s, 3)
        goals.append(_goal_line("textarena", figures["ratio_textarena"], figures["ratio_textarena_1hand"],
                                GOAL_VS_TEXTARENA))
    print()
    print("\n".join(goals))
    figures["seconds"] = round(time.perf_counter() - started, 2)
    return harness.emit(figures)


if __name__ == "__main__":
    main()
