"""# User simulation: a support assistant with tools, a customer with a hidden goal

| | |
|---|---|
| Import | `from llm_zoo import user_sim_v0` |
| Registered as | `pettingzoo.make("aec", "llm_zoo/user_sim-v0")` |
| Agents | `user`, `assistant` (roles of the same names) |
| Turn order | the user opens; then they alternate; tool calls keep the assistant's turn |
| Action | a reply (`str`); the assistant may write `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` |
| Observation | `messages` (chat transcript) |
| Reward | assistant: 1 if the final world equals the goal world, else 0, or with `reward="partial"` the share of the goal's changes made less the wrong ones (minus `turn_penalty` per turn); user: the same success, or 0 |
| Max turns | `max_turns` messages between the two (default 40), plus the assistant's tool calls |

A customer (`user`) chats with the support assistant (`assistant`) of an online shop, Brightcart.
Each episode draws a world from the seed: a private in-memory SQLite database of customers,
payment methods, products with variants and stock, and orders with their items (see
`llm_zoo.envs.user_sim.world`). Into it a scenario template (36 of them, shipped in
`scenarios.json`) plants a customer with a persona and a hidden goal: cancel an order, return
items, exchange an item for another size or colour (or else return it, keep it, or cancel),
change a shipping address or the account's address, pay with another method, or two of these in
turn. Some goals are forbidden by the shop's policies (a shipped order, an expired return window),
and then the right outcome is that nothing changes. The assistant acts on the world only through
its tools, which enforce the policies; it is rewarded by what actually changed in the world.

## Observation
`obs["messages"]` holds what the agent may see. The user's system prompt holds the persona, the
goal and the facts it knows (identity, order ids, items, wanted options, addresses), then a
`⚙ (The support chat is open ...)` message; after that, the assistant's replies arrive as `user`
messages. Every message the env itself writes to an agent (that one, and the feedback on an
invalid reply) opens with the env's mark `⚙` (`core.ENV_MARK`), which is removed from everything
the agents write, so neither agent can pass its words off as the env's. The assistant's system prompt holds today's date, the shop's policies and the tools,
declared in OpenAI function format; then the user's messages, and each tool result as a `tool`
message. The assistant never sees the user's prompt; the user never sees tool calls or results.

## Action
Any `str`. A user reply is sent to the assistant; a reply holding the stop marker `###STOP###`
ends the episode (nothing after the marker is read). An assistant reply with one or more tool
calls runs them in order and keeps the turn; a reply without a tool call is sent to the user.
Only the user's marker ends the conversation; in an assistant reply it is plain text.

The tools that change the world (cancel, modify, return, exchange, update an address) run only on
the customer's consent, the shop's second policy enforced: the customer's latest message, written
after the assistant last wrote to them, must be an explicit yes (it opens with "yes" or says "go
ahead", "please do", ..., and holds no "no" or "don't"; an acknowledgement such as "Sure." before
an answer is not one; `text.is_consent`). Else the call is refused with an `error: ...` result.
The consent is read from the user's own message only, so nothing the assistant writes can give it,
and one yes allows one change: the call that makes it spends the yes (a refused call does not).

## Rewards
At the end (the user's stop marker, `max_turns`, or a forfeit) the final world is compared, field
by field, with the goal world: the initial world after the scenario's correct action calls. The
assistant gets 1 if they are equal (every change the goal needs, and nothing else), else 0, minus
`turn_penalty` times its number of turns (messages to the user). With `reward="partial"` a
failure still earns the share of the goal's changes the final world holds, less the changes it
made wrongly: `max(0, right - wrong) / required` over fields (and whole rows where a world lacks
the row; `world.progress`), where `required` counts what the goal changes, `right` those the
final world holds as the goal does, and `wrong` every field it changed to anything else (another
value for a required field, or a field the goal leaves alone). A cancellation with the wrong
reason earns 2 of 4 on `cancel_mistake` (status and two stock counts right, the reason wrong);
any change where nothing must change, and any failure where the goal changes nothing, earns 0;
only success earns 1. The user gets the same success with `user_reward="success"` (the default: a
cooperative user), or 0 with `"zero"`. `infos[agent]` carries `success`, `progress` (the partial
score, whichever reward is paid), `diff` (one sentence per differing field, e.g.
`orders[#W1234567].status: expected 'cancelled', got 'pending' (unchanged)`), `scenario`, `turns`
and `ended_by` (`"stop"`, `"max_turns"` or `"forfeit"`).

## Invalid moves
An empty reply (or, for the user, nothing before the stop marker on its first turn) is answered
with feedback and the same agent replies again, up to `max_retries` times in a row (default 1);
the next one forfeits: the forfeiter gets `-forfeit_penalty` (default 0) and the other agent its
reward as above. Bad tool calls (unknown tool, malformed JSON, wrong argument types, a call the
policies refuse) are not invalid replies: they come back as `error: ...` tool results. Past
`max_tool_calls` (default 64) tool calls in an episode, a tool call is an invalid reply.

## Options
`reset(options={"scenario": "<template id>"})` picks the template (default: drawn from the seed,
among `scenarios`); `user_sim_v0.SCENARIOS` lists the ids. Env arguments beside the rules' ones:
`prompt="compact"` gives the assistant a short system prompt (role, date, the consent rule, and the
tools by name and argument names instead of JSON schemas: 818 characters instead of 7354), for
small models; the tools enforce the same policies either way. `scenarios=[...]` restricts the
templates an episode draws from (`user_sim_v0.LEARNING_SCENARIOS`: the twelve single-task
templates of the shortest conversations, which the default training uses).

## Version History
* v0: initial release. Before the first tagged release (issue 15): the action tools need the
  customer's explicit yes, one per change; a string argument that is not text (a lone surrogate)
  is an `error: ...` result; the persona the customer speaks with is drawn from the seed (the
  template's persona told the goal: every impatient customer asking to cancel had a shipped order).
  Issue 16: the `prompt` and `scenarios` arguments (new options; the defaults keep the observations
  of before byte for byte). Issue 40: the env's own messages open with its mark `⚙`; tool calls are
  read by `llm_zoo.toolcalls` (the Llama 3 JSON form as well; a call without `"arguments"`, or with
  a key beside `name` and `arguments`, is an `error: ...` result). Issue 39: the `reward` argument
  (`"partial"`) and `infos[agent]["progress"]` (new; the default reward is unchanged).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from llm_zoo.envs.core import FastOrderEnforcingWrapper, InvalidReply, TextEnv, Tool, ToolError
from llm_zoo.envs.user_sim import scenarios, text, world

ENV_ID = "user_sim_v0"
AGENTS = ("user", "assistant")
REWARD_RANGE = (0.0, 1.0)  # before turn penalties and forfeits
SCENARIOS = tuple(scenarios.TEMPLATES)
USER_REWARDS = ("success", "zero")
REWARDS = ("success", "partial")
PROMPTS = ("full", "compact")
LEARNING_SCENARIOS = ("cancel_mistake", "cancel_no_longer_needed_name_zip", "cancel_shipped_refused",
                      "cancel_delivered_insists", "cancel_among_two_pending", "order_address_pending",
                      "order_address_shipped_refused", "default_address_only", "payment_to_paypal",
                      "payment_to_gift_card", "payment_gift_card_short", "return_window_expired")
"""The single-task templates of the shortest conversations (7-9 assistant turns with the scripted
assistant): the subset a tiny model trains on by default (``scenarios=LEARNING_SCENARIOS``)."""
WARM_START_SCENARIOS = ("cancel_mistake", "cancel_shipped_refused", "order_address_pending",
                        "default_address_only", "payment_to_paypal", "return_window_expired")
"""The held-in templates of :data:`LEARNING_SCENARIOS`: a warm start's traces come from these only,
the other six are held out (the evaluation reports the two apart, so generalisation is measured)."""


class raw_env(TextEnv):  # noqa: N801 - PettingZoo's module pattern names the class raw_env
    """The user-simulation env; see the module docstring.

    Args:
        max_turns: messages between user and assistant (tool calls not counted) after which the
            episode is truncated and judged.
        turn_penalty: subtracted from the assistant's reward per turn (message to the user).
        reward: the assistant's reward before the turn penalty: ``"success"`` (1 or 0) or
            ``"partial"`` (1 on success, else the share of the goal's changes made less the wrong ones;
            module docstring, "Rewards").
        user_reward: ``"success"`` (the user shares the assistant's success) or ``"zero"``.
        forfeit_penalty: reward lost by an agent who forfeits after too many empty replies.
        world_customers: background customers in each generated world.
        prompt: the assistant's system prompt: ``"full"`` (policies, tools as JSON schemas) or
            ``"compact"`` (role, date, the consent rule, tools by name and argument names): about
            a sixth of the length, for small models; the tools enforce the policies either way.
        scenarios: the templates an episode draws from when ``reset`` names none (default: all).
        **kwargs: the base options of :class:`llm_zoo.envs.core.TextEnv` (``render_mode``,
            ``max_retries``, ``max_tool_calls``, ...).
    """

    metadata = {"render_modes": ["human", "ansi"], "name": ENV_ID, "is_parallelizable": False}
    reset_options = ("scenario",)
    possible_agents = list(AGENTS)
    marks_env_messages = True  # each agent's free text reaches the other as a user message

    def __init__(self, *, max_turns: int = 40, turn_penalty: float = 0.0, reward: str = "success",
                 user_reward: str = "success", forfeit_penalty: float = 0.0, world_customers: int = 8, prompt: str = "full",
                 scenarios: Sequence[str] | None = None, **kwargs: Any) -> None:
        if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
            raise ValueError(f"max_turns must be an integer >= 1; got {max_turns!r}")
        for name, value in (("turn_penalty", turn_penalty), ("forfeit_penalty", forfeit_penalty)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a number >= 0; got {value!r}")
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {REWARDS}; got {reward!r}")
        if user_reward not in USER_REWARDS:
            raise ValueError(f"user_reward must be one of {USER_REWARDS}; got {user_reward!r}")
        if not isinstance(world_customers, int) or isinstance(world_customers, bool) or world_customers < 0:
            raise ValueError(f"world_customers must be an integer >= 0; got {world_customers!r}")
        if prompt not in PROMPTS:
            raise ValueError(f"prompt must be one of {PROMPTS}; got {prompt!r}")
        if isinstance(scenarios, str) or (scenarios is not None and (
                not scenarios or not set(scenarios) <= set(SCENARIOS))):
            raise ValueError("scenarios must be a non-empty list of template ids from user_sim_v0.SCENARIOS; got "
                             f"{scenarios!r:.200}")
        self.prompt = prompt
        self.scenarios = SCENARIOS if scenarios is None else tuple(scenarios)
        self.max_turns = max_turns
        self.turn_penalty = float(turn_penalty)
        self.reward_kind = reward
        self.user_reward = user_reward
        self.forfeit_penalty = float(forfeit_penalty)
        self.world_customers = world_customers
        self.possible_agents = list(AGENTS)
        self._shop: world.Shop | None = None
        # bound once: each tool reaches this instance's current shop, never another instance's
        self._tools = tuple(Tool(name, description, parameters, self._tool_fn(name))
                            for name, description, parameters in world.TOOL_SPECS)
        super().__init__(**kwargs)

    # ---- hooks ----------------------------------------------------------------------------

    def system_prompt(self, agent: str) -> str:
        if agent == "user":
            return text.user_prompt(self.scenario)
        return text.assistant_prompt() if self.prompt == "full" else text.compact_assistant_prompt()

    def describe_tools(self, agent: str, tools: Sequence[Tool]) -> str:
        return super().describe_tools(agent, tools) if self.prompt == "full" else text.compact_tools(tools)

    def tools(self, agent: str) -> Sequence[Tool]:
        return self._tools if agent == "assistant" else ()

    def start(self, rng: random.Random, options: Mapping[str, Any] | None) -> str:
        name = (options or {}).get("scenario")
        if name is None:
            name = rng.choice(self.scenarios)
        elif name not in scenarios.TEMPLATES:
            raise ValueError(f"options['scenario'] must be one of user_sim_v0.SCENARIOS; got {name!r}")
        self._shop = world.generate(rng, self.world_customers)
        self.scenario = scenarios.instantiate(scenarios.TEMPLATES[name], self._shop, rng)
        self._initial = self._shop.dump()
        self._goal = scenarios.goal_state(self._shop, self.scenario)
        self._turns = {a: 0 for a in AGENTS}
        self._consent = False  # the customer's latest message, since the assistant last spoke, is an unspent yes
        for agent in AGENTS:
            self.infos[agent].update(scenario=name, group=name)
        self.tell("user", text.KICKOFF, mark=True)
        self.narrate(f"user_sim: scenario {name}, customer {self.scenario.customer_id}")
        return "user"

    def parse(self, agent: str, reply: str) -> tuple[str, bool]:
        stop = agent == "user" and text.STOP in reply
        message = reply.split(text.STOP, 1)[0].strip() if stop else reply.strip()
        if not message and not (stop and sum(self._turns.values()) > 0):
            raise InvalidReply(f"expected a message to the {'assistant' if agent == 'user' else 'customer'}; "
                               f"got {reply[:80]!r}.")
        return message, stop

    def play(self, agent: str, move: tuple[str, bool]) -> None:
        message, stop = move
        if stop:
            self._finish("stop")
            return
        other = AGENTS[1 - AGENTS.index(agent)]
        self.tell(other, message)
        self._consent = agent == "user" and text.is_consent(message)
        self._turns[agent] += 1
        if sum(self._turns.values()) >= self.max_turns:
            self._finish("max_turns")
            return
        self.pass_turn(other)

    def forfeit_rewards(self, agent: str) -> dict[str, float]:
        rewards = self._judge("forfeit")
        rewards[agent] = -self.forfeit_penalty
        return rewards

    def on_close(self) -> None:
        if self._shop is not None:
            self._shop.close()
            self._shop = None

    # ---- internals ------------------------------------------------------------------------

    def _tool_fn(self, name: str) -> Any:
        def call(**arguments: Any) -> Any:
            assert self._shop is not None, "a tool was called outside an episode"
            if name not in world.ACTION_TOOLS:
                return self._shop.call(name, arguments)
            if not self._consent:
                raise ToolError(f"{name} changes the customer's records, which needs their explicit yes first: "
                                "tell them exactly what you will do and wait for their yes (the second policy)")
            result = self._shop.call(name, arguments)
            self._consent = False  # one yes, one change: a refused call (ToolError above) leaves it for a retry
            return result

        return call

    def _judge(self, ended_by: str) -> dict[str, float]:
        """Compare the world with the goal; record the facts in infos; return both agents' rewards."""
        assert self._shop is not None
        final = self._shop.dump()
        diff = world.diff(self._goal, final, self._initial)
        success = float(not diff)
        right, wrong, required = world.progress(self._goal, final, self._initial)
        partial = 1.0 if success else max(0, right - wrong) / required if required else 0.0
        if not success and partial >= 1.0:  # progress counts every differing field: only equal worlds reach 1
            raise AssertionError(f"user_sim: a failed episode scored {partial} ({right}, {wrong}, {required})")
        facts = {"success": bool(success), "progress": partial, "diff": diff, "turns": dict(self._turns),
                 "ended_by": ended_by}
        for agent in AGENTS:
            self.infos[agent].update(facts)
        self.narrate(f"-- ended by {ended_by}: {'success' if success else 'failure'}"
                     + "".join(f"\n   {line}" for line in diff))
        paid = success if self.reward_kind == "success" else partial
        return {"assistant": paid - self.turn_penalty * self._turns["assistant"],
                "user": success if self.user_reward == "success" else 0.0}

    def _finish(self, ended_by: str) -> None:
        rewards = self._judge(ended_by)
        if ended_by == "max_turns":
            for agent in AGENTS:
                self.reward(agent, rewards[agent])
                self.truncations[agent] = True
        else:
            self.end(rewards)

    def world_digest(self) -> str:
        """Return a hash of this instance's world (for checking that nothing else touched it)."""
        assert self._shop is not None, "reset() must come before world_digest()"
        return self._shop.digest()


def env(**kwargs: Any) -> FastOrderEnforcingWrapper:
    """Make the user-simulation env with the standard wrappers (call-order checks); see :class:`raw_env`."""
    return FastOrderEnforcingWrapper(raw_env(**kwargs))
