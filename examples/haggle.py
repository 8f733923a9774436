"""haggle_v0: a seller and a buyer haggle over one item, each knowing only their own value.

| Agents | `seller`, `buyer` (roles of the same names) | Turn order | seller, buyer, seller, ... |
| Action | `offer N` (a price, 1-9) or `accept` | Reward | seller (price - cost) / 10, buyer (value - price) / 10; 0 without a deal |
| Invalid reply | a retry with feedback, then a forfeit at -1 (`max_retries`, default 1) | Max offers | 4 (`max_offers`) |
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import llm_zoo
from llm_zoo.envs.core import FastOrderEnforcingWrapper, InvalidReply, TextEnv
from llm_zoo.policies.base import FunctionPolicy
from llm_zoo.spec import EnvSpec

ENV_ID = "haggle_v0"
PRICES = range(1, 10)
RULES = ("You are the {agent} of one item; it is worth {worth} to you. Take turns: reply 'offer N' "
         "(a price from 1 to 9) or 'accept' (take the last offer). No deal after {rounds} offers pays 0.")


class raw_env(TextEnv):  # noqa: N801 - PettingZoo's name for the unwrapped env
    metadata = {"render_modes": ["human", "ansi"], "name": ENV_ID, "is_parallelizable": False}
    possible_agents = ["seller", "buyer"]

    def __init__(self, *, max_offers: int = 4, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_offers = max_offers

    def system_prompt(self, agent: str) -> str:
        return RULES.format(agent=agent, worth=self.worth[agent], rounds=self.max_offers)

    def start(self, rng: random.Random, options: Mapping[str, Any] | None) -> str:
        cost = rng.randint(1, 5)  # the seller's cost, then the buyer's value: a deal pays when value > cost
        self.worth = {"seller": cost, "buyer": rng.randint(cost, 9)}
        self.offers: list[int] = []
        for agent in self.agents:
            self.infos[agent]["worth"] = self.worth[agent]
        self.tell("seller", "Make the first offer.")
        return "seller"

    def parse(self, agent: str, reply: str) -> int | None:
        words = reply.lower().split()
        if words == ["accept"] and self.offers:
            return None  # None: accept the last offer
        if len(words) == 2 and words[0] == "offer" and words[1].isdigit() and int(words[1]) in PRICES:
            return int(words[1])
        raise InvalidReply("Reply 'offer N' with N from 1 to 9" + (", or 'accept'." if self.offers else "."))

    def play(self, agent: str, price: int | None) -> None:
        other = "buyer" if agent == "seller" else "seller"
        if price is None:
            deal = self.offers[-1]
            self.narrate(f"-- deal at {deal}")
            self.end({"seller": (deal - self.worth["seller"]) / 10, "buyer": (self.worth["buyer"] - deal) / 10},
                     price=deal)
            return
        self.offers.append(price)
        self.narrate(f"{agent} offers {price}")
        if len(self.offers) >= self.max_offers:
            self.end({"seller": 0.0, "buyer": 0.0}, price=None)
            return
        self.tell(other, f"The {agent} offers {price}.")
        self.pass_turn(other)


def env(**kwargs: Any) -> FastOrderEnforcingWrapper:
    """Make haggle with the standard wrappers (call-order checks)."""
    return FastOrderEnforcingWrapper(raw_env(**kwargs))


def fair(seed: int | None = None) -> FunctionPolicy:
    """A scripted player: take any offer at least as good as its worth, else ask 2 past its worth."""
    def act(obs: Mapping[str, Any]) -> str:
        rules, *rest = (m["content"] for m in obs["messages"] if m["role"] != "assistant")
        worth, seller = int(rules.split("worth ")[1].split()[0]), rules.startswith("You are the seller")
        offers = [int(line.split()[-1].rstrip(".")) for line in rest if line.startswith("The ")]
        if offers and (offers[-1] >= worth if seller else offers[-1] <= worth):
            return "accept"
        return f"offer {min(9, worth + 2) if seller else max(1, worth - 2)}"
    return FunctionPolicy(act, name="fair")


def corpus() -> list[str]:
    """Every text the env shows, for a word-level tokenizer."""
    prompts = [RULES.format(agent=a, worth=w, rounds=4) for a in raw_env.possible_agents for w in PRICES]
    return prompts + [f"The {a} offers {p}." for a in raw_env.possible_agents for p in PRICES] + [
        "Make the first offer.", "accept", *(f"offer {p}" for p in PRICES)]


SPEC = llm_zoo.register(EnvSpec(name=ENV_ID, env=env, roles=("seller", "buyer"), scripted={"fair": fair},
                                corpus=corpus, description="a seller and a buyer haggle over one item"))
