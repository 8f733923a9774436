"""debate_v0: two debaters answer a sum, and a judge, who sees both answers, names the winner.

| Agents | `debater_0`, `debater_1` (role `debater`), `judge` | Turn order | debater_0, debater_1, judge |
| Action | a debater: a number; the judge: `winner 0`, `winner 1` or `draw` | Reward | winner +1, loser -1, judge 0 |
| Invalid reply | a retry, then a forfeit: a debater's loses (-1, the other +1), the judge's voids the game (0 each) | Frozen | the judge (`scripted:judge`) |
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import llm_zoo
from llm_zoo.envs.core import FastOrderEnforcingWrapper, InvalidReply, TextEnv
from llm_zoo.policies.base import FunctionPolicy
from llm_zoo.spec import EnvSpec, eval_seeds, mean_interval, wilson_interval

ENV_ID = "debate_v0"
DEBATERS = ("debater_0", "debater_1")
VERDICTS = {"winner 0": "debater_0", "winner 1": "debater_1", "draw": None}
QUESTION = "{} + {} = ?"
JUDGE_RULES = "You judge two answers to a sum. Reply 'winner 0', 'winner 1' or 'draw'."
DEBATER_RULES = "Answer the sum with a number."


def other(debater: str) -> str:
    return DEBATERS[1 - DEBATERS.index(debater)]


class raw_env(TextEnv):  # noqa: N801 - PettingZoo's name for the unwrapped env
    metadata = {"render_modes": ["human", "ansi"], "name": ENV_ID, "is_parallelizable": False}
    possible_agents = [*DEBATERS, "judge"]
    zero_sum = True

    def system_prompt(self, agent: str) -> str:
        return JUDGE_RULES if agent == "judge" else DEBATER_RULES

    def start(self, rng: random.Random, options: Mapping[str, Any] | None) -> str:
        self.terms = (rng.randint(1, 9), rng.randint(1, 9))
        self.answers: list[int] = []
        for agent in DEBATERS:
            self.tell(agent, QUESTION.format(*self.terms))
        return "debater_0"

    def parse(self, agent: str, reply: str) -> Any:
        text = reply.strip().lower()
        if agent == "judge" and text in VERDICTS:
            return VERDICTS[text]
        if agent != "judge" and text.isdigit() and len(text) <= 2:
            return int(text)
        raise InvalidReply(JUDGE_RULES if agent == "judge" else "Reply with a number, such as 12.")

    def play(self, agent: str, move: Any) -> None:
        if agent == "debater_0":
            self.answers.append(move)
            self.pass_turn("debater_1")
        elif agent == "debater_1":  # the judge sees the parsed answers only: no debater can address it
            self.answers.append(move)
            self.tell("judge", QUESTION.format(*self.terms) + " debater_0: {} debater_1: {}".format(*self.answers))
            self.pass_turn("judge")
        else:
            self.narrate(f"-- {move or 'no one'} wins")
            self.end({} if move is None else {move: 1.0, other(move): -1.0}, winner=move)

    def forfeit_rewards(self, agent: str) -> dict[str, float]:
        return {} if agent == "judge" else {agent: -1.0, other(agent): 1.0}  # the judge gains nothing


def env(**kwargs: Any) -> FastOrderEnforcingWrapper:
    """Make debate with the standard wrappers (call-order checks)."""
    return FastOrderEnforcingWrapper(raw_env(**kwargs))


def judge(seed: int | None = None) -> FunctionPolicy:
    """The rule judge: a right answer beats a wrong one; two right or two wrong answers draw."""
    def act(obs: Mapping[str, Any]) -> str:
        a, _, b, _, _, _, x0, _, x1 = obs["messages"][-1]["content"].split()
        right = [int(x) == int(a) + int(b) for x in (x0, x1)]
        return "draw" if right[0] == right[1] else f"winner {right.index(True)}"
    return FunctionPolicy(act, name="judge")


def sloppy(seed: int | None = None) -> FunctionPolicy:
    """A debater who carries wrongly: one too many when the sum passes 9."""
    def act(obs: Mapping[str, Any]) -> str:
        a, _, b, *_ = obs["messages"][1]["content"].split()
        return str(int(a) + int(b) + (int(a) + int(b) > 9))
    return FunctionPolicy(act, name="sloppy")


def evaluate(policies: Mapping[str, Any], *, play: Any, env_kwargs: Any = None, episodes: int = 64,
             **options: Any) -> dict[str, Any]:
    """Return the debaters' win rate against `sloppy` (each seat in turn), judged by the rule judge."""
    seeds, rival, rule = eval_seeds(episodes), sloppy(), judge()
    seats = [DEBATERS[i % 2] for i in range(episodes)]
    records = play([{s: policies[s], other(s): rival, "judge": rule} for s in seats], seeds, env_kwargs=env_kwargs)
    returns = [-1.0 if r.failed else r.returns.get(s, 0.0) for r, s in zip(records, seats)]  # a failure loses
    wins = sum(r > 0 for r in returns)
    return {"headline": "win_rate", "win_rate": wins / episodes, "interval": wilson_interval(wins, episodes),
            "interval_method": "wilson", "episodes": episodes, "seeds": [seeds[0], seeds[-1]],
            "mean_return": sum(returns) / episodes, "mean_return_interval": mean_interval(returns)}


def corpus() -> list[str]:
    """Every text the env shows, for a word-level tokenizer."""
    sums = [QUESTION.format(a, b) for a in range(1, 10) for b in range(1, 10)]
    return [JUDGE_RULES, DEBATER_RULES, *sums, "debater_0: debater_1:", *VERDICTS, *map(str, range(100))]


SPEC = llm_zoo.register(EnvSpec(
    name=ENV_ID, env=env, roles=("debater", "judge"), learning_roles=("debater",),
    frozen_players={"judge": "scripted:judge"}, scripted={"judge": judge, "sloppy": sloppy},
    corpus=corpus, evaluate=evaluate, description="two debaters answer a sum; a judge names the winner"))
