"""The model-facing text of user_sim: both system prompts, and reading the user's brief back.

The user's system prompt holds the persona, the hidden goal in prose, and the facts the user knows
as ``- key: value`` lines under ``identity`` and ``task N: <kind>`` headers. The lines serve an LLM
user and :func:`parse_brief` alike: the scripted user reads its brief from its own observation,
exactly as a model would, so any policy can play the user seat from the same prompt.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llm_zoo.envs.core import Tool
from llm_zoo.envs.user_sim import world
from llm_zoo.envs.user_sim.scenarios import PERSONAS, Scenario, Task

STOP = "###STOP###"
"""The marker with which the user ends the conversation."""
KICKOFF = "(The support chat is open. Write your first message to the assistant.)"
USER_HEAD = "You are {name}, a customer of {shop}, an online shop, chatting with its support assistant."
ASSISTANT_HEAD = "You are the customer-support assistant of {shop}, an online shop."

IF_UNAVAILABLE = {
    "keep": "keep the item as it is",
    "return_original": "return it instead, with the refund to the original payment method",
    "return_gift_card": "return it instead, with the refund to your gift card",
    "cancel": "cancel the whole order instead, because you no longer need it",
}
"""Fallback code of an exchange -> how the user's brief says it."""
IF_REFUSED = {"accept": "accept it", "insist once, then accept": "push back once, then accept it"}
REASONS = {"ordered by mistake": "you ordered it by mistake", "no longer needed": "you no longer need it"}

HOW_TO_TALK = (
    "How to talk: write one short message per turn, as a customer would, in your own words. Open by saying "
    "what you need, without the details. Give a detail from the list above only when the assistant asks for "
    "it, and never invent one you were not given. Say yes to a proposed action only if it is exactly what "
    "your goal asks for; otherwise say no and what you want. Take the tasks in order. When every task is "
    f"done, or the assistant has said that what is left cannot be done and you have accepted it, write a "
    f"short goodbye followed by {STOP}"
)


# ---------------------------------------------------------------------------------------------
# The assistant's prompt
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def assistant_prompt() -> str:
    """Return the assistant's system prompt: role, today, policies, how to talk (the tools are appended)."""
    policies = "\n".join(f"- {p}" for p in world.POLICIES)
    return (
        f"{ASSISTANT_HEAD.format(shop=world.SHOP_NAME)} Today is {world.TODAY.isoformat()}. You help "
        "customers with their orders and accounts through the tools below; what the tools return is the "
        f"truth about the shop.\n\nPolicies:\n{policies}\n\n"
        "A reply without a tool call is sent to the customer; a reply with a tool call is not shown to them. "
        "Ask for one thing at a time. The customer ends the chat when they are done."
    )


def compact_assistant_prompt() -> str:
    """Return the short assistant prompt of ``prompt="compact"``: role, today, the consent rule (tools appended)."""
    return (f"{ASSISTANT_HEAD.format(shop=world.SHOP_NAME)} Today is {world.TODAY.isoformat()}. Identify the "
            "customer first. Before a change, say what you will do and wait for their yes.")


def compact_tools(tools: Sequence[Tool]) -> str:
    """Declare tools by name and argument names only (``prompt="compact"``), with the call syntax."""
    listed = "\n".join(f"- {t.name}({', '.join(t.parameters['properties'])})" for t in tools)
    return ("\n\nTools:\n" + listed + '\nCall one as <tool_call>{"name": ..., "arguments": {...}}</tool_call>; '
            "its result comes back to you.")


# ---------------------------------------------------------------------------------------------
# The user's prompt
# ---------------------------------------------------------------------------------------------


def _order_phrase(task: Task) -> str:
    order_id = task.fact("order id") or ""
    if order_id.startswith("#"):
        return f"order {order_id}"
    return f"your order with the {_ref_product(order_id)} (you don't know its id)"


def _ref_product(order_fact: str) -> str:
    return order_fact.rpartition("order with the ")[2]


def goal_sentence(task: Task) -> str:
    """Describe one task of the user's goal in a sentence or two."""
    f = dict(task.facts)
    order = _order_phrase(task) if "order id" in f else ""
    if task.kind == "cancel":
        text = f"Cancel {order}, because {REASONS[f['reason']]}."
    elif task.kind == "return":
        text = f"Return the {f['items'].replace('; ', ' and the ')} from {order}, with the refund to your {f['refund to']}."
        if "if refund refused" in f:
            text += f" If that is not allowed, take the refund to your {f['if refund refused']} instead."
    elif task.kind == "exchange":
        text = (f"Get the {f['items']} from {order} switched to {f['wanted']}. If that is not available, "
                f"{IF_UNAVAILABLE[f['if unavailable']]}.")
    elif task.kind == "order_address":
        text = f"Have {order} shipped to {f['new address']}."
    elif task.kind == "default_address":
        text = f"Update the address on your account to {f['new address']}."
    else:
        text = f"Pay {order} with your {f['pay with']} instead."
    if "if refused" in f:
        text += f" If the assistant says it cannot be done, {IF_REFUSED[f['if refused']]}."
    return text


def _fact_line(key: str, value: str) -> str:
    if key == "if unavailable":
        value = IF_UNAVAILABLE[value]
    return f"- {key}: {value}"


def user_prompt(scenario: Scenario) -> str:
    """Return the user's system prompt: persona, hidden goal, the facts they know, how to talk."""
    identity = dict(scenario.identity)
    goals = "\n".join(f"{i}. {goal_sentence(t)}" for i, t in enumerate(scenario.tasks, 1))
    facts = ["identity"] + [f"- {k}: {v}" for k, v in scenario.identity]
    for i, task in enumerate(scenario.tasks, 1):
        facts.append(f"task {i}: {task.kind}")
        facts += [_fact_line(k, v) for k, v in task.facts]
    return (
        f"{USER_HEAD.format(name=identity['name'], shop=world.SHOP_NAME)} {scenario.persona['description']}\n\n"
        f"Your goal, which the assistant cannot see:\n{goals}\n\n"
        "What you know (reveal a detail only when the assistant asks for it):\n" + "\n".join(facts) +
        f"\n\n{HOW_TO_TALK}"
    )


_CONSENT = re.compile(r"^\W*(?:yes|yeah|yep|yup)\b|\b(?:go ahead|please do|do it|proceed|i confirm|confirmed)\b",
                      re.IGNORECASE)
_DISSENT = re.compile(r"^\W*no\b|\b(?:don't|do not|not yet|wait|hold on|stop)\b", re.IGNORECASE)


def is_consent(message: str) -> bool:
    """Tell whether a customer's message is an explicit yes to a proposed action.

    It opens with "yes" (or "yeah", "yep", "yup"), or says "go ahead", "please do", "do it",
    "proceed" or "I confirm"; and it holds no "no" at its start, "don't", "do not", "not yet",
    "wait", "hold on" or "stop". An acknowledgement ("Sure.", "Okay, I understand.", "Of
    course!") before an answer is not a yes: an assistant that asks a question must not be able
    to take the answer's politeness for consent.
    """
    return bool(_CONSENT.search(message)) and not _DISSENT.search(message)


def is_user_prompt(system: str) -> bool:
    """Tell whether a system prompt is the user's (else it is the assistant's)."""
    return system.startswith("You are ") and f", a customer of {world.SHOP_NAME}," in system.split("\n", 1)[0]


@dataclass(frozen=True)
class Brief:
    """What a user's system prompt says: persona, identity facts, and per task its kind and facts."""

    persona: Mapping[str, str]
    identity: Mapping[str, str]
    tasks: Sequence[Task]


_HEADER = re.compile(r"^(identity|task \d+: (\w+))$")
_FACT = re.compile(r"^- ([a-z ]+): (.*)$")
_UNAVAILABLE_CODES = {v: k for k, v in IF_UNAVAILABLE.items()}


def parse_brief(system: str) -> Brief:
    """Read a user's system prompt (as :func:`user_prompt` writes it) back into a :class:`Brief`.

    Raises ``ValueError`` naming what is missing when the prompt is not a user_sim user's prompt.
    """
    persona = next((p for p in PERSONAS.values() if p["description"] in system), None)
    if persona is None:
        raise ValueError(f"not a user_sim user's system prompt (no known persona in it): {system[:120]!r}")
    identity: dict[str, str] = {}
    tasks: list[tuple[str, list[tuple[str, str]]]] = []
    section: str | None = None
    for line in system.splitlines():
        header = _HEADER.match(line)
        if header:
            section = "identity" if header.group(1) == "identity" else "task"
            if section == "task":
                tasks.append((header.group(2), []))
            continue
        fact = _FACT.match(line)
        if fact and section == "identity":
            identity[fact.group(1)] = fact.group(2)
        elif fact and section == "task":
            key, value = fact.group(1), fact.group(2)
            tasks[-1][1].append((key, _UNAVAILABLE_CODES.get(value, value) if key == "if unavailable" else value))
    if not identity or not tasks:
        raise ValueError(f"the user's system prompt lists no {'identity' if not identity else 'task'} facts; "
                         "expected lines such as '- email: ...' under 'identity' and 'task 1: <kind>'")
    return Brief(persona, identity, tuple(Task(kind, tuple(facts)) for kind, facts in tasks))
