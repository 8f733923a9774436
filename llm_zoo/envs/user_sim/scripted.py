"""Scripted players of user_sim: a faithful user, an assistant that solves every scenario, a random tool-caller.

All three are policies over observations alone, stateless: each reply is a function of the
transcript, so one policy object serves any number of envs side by side.

**The scripted user** reads its brief from its own system prompt (:func:`text.parse_brief`) and its
progress from its own earlier messages (an announcement per task, ``"One more thing: "`` before each
task after the first, ``"In that case, "`` before a fallback, ``"Are you sure?"`` when it pushed
back). It answers the assistant's latest message by keyword intents, in this order:

1. *identity asked* (a request sentence naming email, zip code, your name, verify, identify): it
   gives its email, or, when it does not remember it, its full name and zip code;
2. *unavailable* ("out of stock", "not available", ...) or *refused* ("can't", "cannot", "unable",
   "not eligible", "not possible", "unfortunately", ... with no proposal in the message): it falls
   back as its brief says (return instead, cancel instead, keep it, another refund destination),
   pushes back once if its persona insists, or accepts and moves on;
3. *proposal* ("shall I", "should I", "would you like me to", "confirm", "proceed", "(yes/no)",
   ...): yes only if the proposal names the action of the current task and no detail that
   contradicts the brief (another order id, an item not meant, another option, refund
   destination, reason, address or payment method); else no, with the detail it wants;
4. *details asked* (request sentences naming the order id, which item, the wanted size/colour,
   where the refund goes, the address, why, the payment method): it answers each one its current
   task has, and nothing else;
5. *done* (an action word of the task, e.g. "cancel", with "has been", "is now", "successfully",
   "done", ...): it announces the next task or says goodbye with the stop marker;
6. otherwise it restates what it wants.

A request sentence ends with "?" or asks ("please", "could you", "can you", "let me know", ...).

**The scripted assistant** follows the policies: it identifies the customer (asking for the email,
or name and zip code), reads the profile, finds the order (by id, or by the item the customer
names, looking through the customer's orders), checks status, return window and stock, asks for
each missing detail, proposes the exact action, and calls the tool only after a yes. It reads
intents from the user's messages with the keyword table :data:`INTENTS`; the conversation is cut
into segments, one per request, at its own "anything else?" and at the user's "one more thing".

**The random tool-caller** calls a random tool half of the time, with arguments drawn from ids
and strings seen in the conversation, and otherwise says one of a few stock support lines.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_zoo.envs.core import ENV_MARK, parse_tool_calls
from llm_zoo.envs.user_sim import env as env_module
from llm_zoo.envs.user_sim import text, world
from llm_zoo.envs.user_sim.scenarios import PERSONAS, Task
from llm_zoo.policy import Observation, Reply, SeededPolicy

ORDER_RE = re.compile(r"#W\d{7}")
EMAIL_RE = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
ADDRESS_RE = re.compile(r"\d+ [A-Za-z][A-Za-z ]*, [A-Za-z][A-Za-z ]*, [A-Z]{2} \d{5}")
NAME_RE = re.compile(r"\bname is ([A-Z][A-Za-z'-]+) ([A-Z][A-Za-z'-]+)")
ZIP_RE = re.compile(r"\bzip(?: code)? is (\d{5})\b", re.IGNORECASE)
_DIMS = sorted({d for dims in world.OPTION_DIMS.values() for d, _ in dims})
_PRODUCTS = {name.lower(): pid for pid, name in world.PRODUCT_NAMES.items()}

# ---------------------------------------------------------------------------------------------
# Keyword tables (both players)
# ---------------------------------------------------------------------------------------------

NEXT_TASK = "One more thing: "
FALLBACK = "In that case, "
INSIST = "Are you sure? I really need this sorted out. Can't you make an exception just this once?"
ACCEPT = "Okay, I understand."

REQUEST_CUES = ("please", "could you", "can you", "would you", "let me know", "tell me", "provide", "share",
                "need your", "need the", "may i have")
CONFIRM_CUES = ("shall i", "should i", "should we", "shall we", "do you want me to", "would you like me to",
                "can i go ahead", "may i go ahead", "may i proceed", "can i proceed", "okay to proceed", "ok to proceed",
                "would you like to proceed", "do you want to proceed", "would you like that", "is that okay",
                "is that ok", "does that work", "sound good", "do i have your permission", "confirm",
                "is that correct", "is this correct", "is that right", "yes/no", "yes or no", "go ahead?", "proceed?")
UNAVAILABLE_CUES = ("out of stock", "not in stock", "not available", "unavailable", "sold out")
REFUSAL_CUES = ("can't", "cannot", "can not", "unable", "not able to", "not eligible", "isn't eligible",
                "not possible", "isn't possible", "not allowed", "isn't allowed", "unfortunately", "no longer be")
DONE_CUES = ("has been", "have been", "is now", "are now", "successfully", "all set", "is done", "i've ", "i have ",
             "completed", "processed", "submitted", "done:", "done.", "done!")
TOPICS: dict[str, tuple[str, ...]] = {
    "identity": ("email", "e-mail", "zip", "postal code", "verify", "identify", "authenticate", "your name",
                 "full name"),
    "order": ("order id", "order number", "which order", "order #?", "what order"),
    "item": ("which item", "what item", "which product", "which of the items", "which one", "which ones"),
    "wanted": ("instead", "which size", "what size", "which color", "what color", "which colour", "variant",
               "which option", "prefer", *_DIMS),
    "refund": ("refund",),
    "address": ("address",),
    "reason": ("why", "reason"),
    "payment": ("payment method", "pay with", "which card", "how would you like to pay", "which payment"),
}
"""Topic -> words that ask for it in a request sentence (the scripted user's reading of questions)."""

ACTION_WORDS = {"cancel": ("cancel",), "return": ("return", "refund"),
                "exchange": ("exchange", "swap", "switch", "replace", "change", "updated", "modified"),
                "order_address": ("address",), "default_address": ("address",),
                "payment": ("payment", "pay", "gift card", "paypal")}
FORBIDDEN_WORDS = {"cancel": ("return", "exchange"), "return": ("cancel", "exchange"),
                   "exchange": ("cancel", "return", "refund"), "order_address": ("cancel", "return", "exchange"),
                   "default_address": ("cancel", "return", "exchange"), "payment": ("cancel", "return", "exchange")}
"""Task kind -> words a proposal or report must (ACTION) or must not (FORBIDDEN) contain to be about that task."""

INTENTS = (
    ("cancel", re.compile(r"\bcancel", re.IGNORECASE)),
    ("return", re.compile(r"\breturn\b", re.IGNORECASE)),
    ("exchange", re.compile(rf"\bexchange\b|\bswap\b|\b(?:wrong|different) (?:{'|'.join(_DIMS)}|colour)\b",
                            re.IGNORECASE)),
    ("default_address", re.compile(r"\baddress\b.*\b(?:account|profile)\b|\bmoved\b", re.IGNORECASE)),
    ("order_address", re.compile(r"\baddress\b", re.IGNORECASE)),
    ("payment", re.compile(r"\bpayment method (?:of|on|for)\b|\bchange (?:the |my )?payment\b|\bpay (?:for|with)\b",
                           re.IGNORECASE)),
)
"""User text -> request kind, first match wins (the scripted assistant's reading of requests)."""
SWITCH_CUES = ("instead", "in that case", "actually", "rather")
YES = re.compile(r"^\W*(?:yes|yeah|yep|sure|ok|okay|correct|that's right|please do|please go ahead|go ahead)\b",
                 re.IGNORECASE)
NO = re.compile(r"^\W*no\b|\bdon't\b|\bdo not\b", re.IGNORECASE)
NOT_KNOWN = re.compile(r"don't (?:know|have|remember)|do not (?:know|have|remember)|not sure|no idea", re.IGNORECASE)
ANYTHING_ELSE = "Is there anything else I can help you with?"
SHALL_I = "Shall I go ahead? (yes/no)"


def _sentences(message: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.?!])\s+|\n+", message) if s.strip()]


def _has(text_: str, cues: Sequence[str]) -> bool:
    return any(c in text_ for c in cues)


def _products_in(message: str) -> list[str]:
    low = message.lower()
    return [pid for name, pid in _PRODUCTS.items() if name in low]


# ---------------------------------------------------------------------------------------------
# The scripted user
# ---------------------------------------------------------------------------------------------


@dataclass
class _UserState:
    """Where the user stands, read from its own messages."""

    index: int  # current task
    fallback: bool  # the current task fell back (exchange -> return/cancel, refund -> other destination)
    insisted: bool


def _announce(task: Task) -> str:
    """The sentence that opens a task: what the user wants, without details."""
    if task.kind == "cancel":
        return "I'd like to cancel an order."
    if task.kind == "return":
        return "I'd like to return some things I bought." if ";" in (task.fact("items") or "") else \
            "I'd like to return something I bought."
    if task.kind == "exchange":
        dim = (task.fact("wanted") or "size x").split()[0]
        if "not shipped" in (task.fact("order state") or ""):
            return f"I ordered an item in the wrong {dim}, and it hasn't shipped yet. Can I get a different one?"
        return f"I'd like to exchange an item for a different {dim}."
    if task.kind == "order_address":
        return "I need to change the shipping address of one of my orders."
    if task.kind == "default_address":
        return "I've moved, so I need to update the address on my account."
    return "I'd like to change the payment method of one of my orders."


def _effective_kind(task: Task, fallback: bool) -> str:
    """The kind the task has now: an exchange that fell back is a return or a cancellation."""
    code = task.fact("if unavailable")
    if task.kind == "exchange" and fallback and code in ("return_original", "return_gift_card"):
        return "return"
    if task.kind == "exchange" and fallback and code == "cancel":
        return "cancel"
    return task.kind


def _refund_goal(task: Task, fallback: bool) -> str | None:
    """Where the refund should go now: "gift card", "original payment method", a card label, or None."""
    code = task.fact("if unavailable")
    if task.kind == "exchange":
        return {"return_original": "original payment method", "return_gift_card": "gift card"}.get(code or "")
    if task.kind == "return":
        return task.fact("if refund refused") if fallback and task.fact("if refund refused") else task.fact("refund to")
    return None


def _reason_goal(task: Task, fallback: bool) -> str | None:
    if task.kind == "exchange" and fallback and task.fact("if unavailable") == "cancel":
        return "no longer needed"
    return task.fact("reason")


class ScriptedUser:
    """Plays the user of a user_sim scenario from its system prompt; see the module docstring.

    The wording hooks (the class attributes below, :meth:`voice`, :meth:`announce`, :meth:`say_answer`,
    :meth:`say_fallback`) are what :class:`ParaphrasedUser` rewords; the reading of the assistant's
    messages and the decisions stay the same.
    """

    NEXT = NEXT_TASK
    FALLBACK = FALLBACK
    INSIST = INSIST
    ACCEPT = ACCEPT
    AS_I_SAID = "As I said, "

    def voice(self, persona: Mapping[str, str]) -> Mapping[str, str]:
        """Return the persona's words: ``hello``, ``ack``, ``yes`` (an explicit consent) and ``bye``."""
        return persona

    def announce(self, task: Task) -> str:
        """Return the sentence that opens ``task``."""
        return _announce(task)

    def say_answer(self, task: Task, fallback: bool, topic: str) -> str | None:
        """Return the answer to a question on ``topic`` about ``task``, or None if the task has none."""
        return self._answer(task, fallback, topic)

    def say_fallback(self, what: str, destination: str = "") -> str:
        """Return the words of a fallback: ``keep``, ``cancel``, ``return`` or ``refund`` (to ``destination``)."""
        return {"keep": "I'll keep it as it is.", "cancel": "please cancel the whole order instead; I no longer need it.",
                "return": "I'd like to return it instead.",
                "refund": f"please refund it to the {destination} instead."}[what]

    def reply(self, messages: Sequence[dict[str, str]]) -> str:
        """Return the user's next message for the transcript ``messages``."""
        brief = text.parse_brief(messages[0]["content"])
        persona = self.voice(brief.persona)
        own = [m["content"] for m in messages[1:] if m["role"] == "assistant"]
        if not own:
            return f"{persona['hello']} {self.announce(brief.tasks[0])}"
        state = self._state(own, len(brief.tasks))
        task = brief.tasks[state.index]
        last = messages[-1]["content"] if messages[-1]["role"] == "user" else ""
        low = last.lower()
        requests = [s.lower() for s in _sentences(last) if s.rstrip().endswith("?") or _has(s.lower(), REQUEST_CUES)]
        asked = {topic for topic, cues in TOPICS.items() for s in requests if _cue_in(s, topic, cues)}
        if "identity" in asked:
            return self.say_identity(brief, " ".join(requests))
        confirm = _has(low, CONFIRM_CUES)
        if _has(low, UNAVAILABLE_CUES) or (_has(low, REFUSAL_CUES) and not confirm):
            return self._refused(brief, task, state, low)
        if confirm:
            problem = self._judge(task, state.fallback, low)
            return problem or persona["yes"]
        answers = [self.say_answer(task, state.fallback, topic) for topic in TOPICS if topic in asked]
        answers = [a for a in answers if a]
        if answers:
            return " ".join(([persona["ack"]] if persona["ack"] else []) + answers)
        kind = _effective_kind(task, state.fallback)
        if _has(low, DONE_CUES) and _has(low, ACTION_WORDS[kind]):
            return self._next(brief, state.index, "")
        opening = self.announce(task)
        return self.AS_I_SAID + opening[0].lower() + opening[1:]

    def _state(self, own: Sequence[str], n_tasks: int) -> _UserState:
        index = min(sum(self.NEXT in m for m in own), n_tasks - 1)
        starts = [i for i, m in enumerate(own) if self.NEXT in m]
        since = own[starts[-1]:] if starts else own
        return _UserState(index, any(self.FALLBACK in m for m in since), any(self.INSIST in m for m in since))

    @staticmethod
    def say_identity(brief: text.Brief, asked: str) -> str:
        """Return the answer to an identity question: the email, or the full name and zip code."""
        ident = brief.identity
        email = ident.get("email", "")
        if "@" in email and ("email" in asked or "e-mail" in asked or "zip" not in asked):
            return f"My email is {email}."
        forgot = "" if "@" in email else "I don't remember which email I used. "
        return f"{forgot}My name is {ident['name']} and my zip code is {ident['zip']}."

    def _next(self, brief: text.Brief, index: int, lead: str) -> str:
        """Move on after a task ends: announce the next one, or say goodbye."""
        lead = f"{lead} " if lead else ""
        if index + 1 < len(brief.tasks):
            return f"{lead}{self.NEXT}{self.announce(brief.tasks[index + 1])}"
        return f"{lead}{self.voice(brief.persona)['bye']} {text.STOP}"

    def _refused(self, brief: text.Brief, task: Task, state: _UserState, low: str) -> str:
        if not state.fallback:
            if task.kind == "exchange" and _has(low, UNAVAILABLE_CUES):
                code = task.fact("if unavailable")
                if code == "keep":
                    return self._next(brief, state.index, self.FALLBACK + self.say_fallback("keep"))
                return self.FALLBACK + self.say_fallback("cancel" if code == "cancel" else "return")
            destination = task.fact("if refund refused")
            if task.kind == "return" and destination and "refund" in low:
                return self.FALLBACK + self.say_fallback("refund", destination)
        if task.fact("if refused") == "insist once, then accept" and not state.insisted:
            return self.INSIST
        return self._next(brief, state.index, self.ACCEPT)

    @staticmethod
    def _answer(task: Task, fallback: bool, topic: str) -> str | None:
        kind = _effective_kind(task, fallback)
        order_id = task.fact("order id")
        if topic == "order" and order_id:
            if order_id.startswith("#"):
                return f"It's order {order_id}."
            return f"I don't know the order id, but it's the order with the {order_id.rpartition('order with the ')[2]}."
        if topic == "item" and task.fact("items"):
            return "The " + (task.fact("items") or "").replace("; ", " and the ") + "."
        if topic == "wanted" and kind == "exchange" and task.fact("wanted"):
            return f"I'd like it in {task.fact('wanted')}."
        refund = _refund_goal(task, fallback)
        if topic == "refund" and kind == "return" and refund:
            return f"Please refund it to the {refund}."
        if topic == "address" and task.fact("new address"):
            return f"The new address is {task.fact('new address')}."
        reason = _reason_goal(task, fallback)
        if topic == "reason" and kind == "cancel" and reason:
            return "I ordered it by mistake." if reason == "ordered by mistake" else "I no longer need it."
        if topic == "payment" and kind == "payment":
            return f"I'd like to pay with my {'gift card' if task.fact('pay with') == 'gift card' else 'PayPal account'}."
        return None

    @staticmethod
    def _judge(task: Task, fallback: bool, proposal: str) -> str | None:
        """Return None if the proposal matches the task, else the user's "no" with what it wants."""
        kind = _effective_kind(task, fallback)
        want = "As I said, " + _announce(task)[0].lower() + _announce(task)[1:] if not fallback else \
            "That's not what I asked for."  # the words of a no stay the plain user's in the paraphrase too
        if not _has(proposal, ACTION_WORDS[kind]) or _has(proposal, FORBIDDEN_WORDS[kind]):
            return f"No, that's not what I want. {want}"
        order_id = task.fact("order id") or ""
        if order_id.startswith("#") and any(o.lower() != order_id.lower() for o in ORDER_RE.findall(proposal.upper())):
            return f"No, it's about order {order_id}."
        items = task.fact("items")
        if items and kind in ("return", "exchange"):
            mine = {p.split(" (")[0].lower() for p in items.split("; ")}
            contents = {p.split(" (")[0].lower() for p in (task.fact("order contents") or "").split("; ")}
            if any(p in proposal for p in contents - mine):
                return f"No, only the {items.replace('; ', ' and the ')}."
        wanted = task.fact("wanted")
        if kind == "exchange" and wanted and not _mentions_option(proposal, wanted):
            return f"No, I want it in {wanted}."
        refund = _refund_goal(task, fallback)
        if kind == "return" and refund:
            named = _named_destination(proposal, task.fact("paid with") or "", task.fact("refund to") or "")
            goal = "gift card" if refund == "gift card" else ("original" if refund == "original payment method"
                                                               else "other")
            if named != goal and not (named is None and goal == "original"):
                return f"No, I'd like the refund to go to the {refund}."
        reason = _reason_goal(task, fallback)
        if kind == "cancel" and reason:
            other = "mistake" if reason == "no longer needed" else "no longer"
            if other in proposal:
                return "No, " + ("I ordered it by mistake." if reason == "ordered by mistake" else "I no longer need it.")
        address = task.fact("new address")
        if address and any(world.normalize_address(a).lower() != address.lower()
                           for a in ADDRESS_RE.findall(_restore_case(proposal))):
            return f"No, the new address is {address}."
        pay = task.fact("pay with")
        if kind == "payment" and pay:
            mine_word = "gift card" if pay == "gift card" else "paypal"
            if mine_word not in proposal:
                return f"No, I want to pay with my {pay}."
        return None


PARAPHRASED_VOICES: dict[str, dict[str, str]] = {
    "polite": {"hello": "Good afternoon!", "ack": "Certainly.", "yes": "Yes, that's right, please proceed.",
               "bye": "That's everything, thank you kindly."},
    "terse": {"hello": "Hey.", "ack": "", "yes": "Yep, do it.", "bye": "Fine, thanks. Bye."},
    "chatty": {"hello": "Hey, lovely to chat with you!", "ack": "Absolutely!", "yes": "Yeah, please do, that's lovely.",
               "bye": "Brilliant, thank you ever so much, take care!"},
    "impatient": {"hello": "Quick question, I'm short on time.", "ack": "Right.", "yes": "Go ahead, fast please.",
                  "bye": "Good, that's it then."},
    "insistent": {"hello": "Good day.", "ack": "Certainly.", "yes": "Yes, please proceed.",
                  "bye": "Very well, thank you. That's all."},
}
"""Persona name -> the paraphrasing user's words (each ``yes`` one that :func:`text.is_consent` accepts)."""


class ParaphrasedUser(ScriptedUser):
    """The scripted user with other words: other persona voices, openings, answers, fallbacks and yeses.

    It reads the same brief, keeps the same goals and makes the same decisions as
    :class:`ScriptedUser`; only what it writes differs (the facts inside stay verbatim: ids,
    emails, addresses, options). It answers whether an assistant serves the customer or only the
    one simulator it trained with. Its yeses are explicit consents by :func:`text.is_consent`;
    its refusals still open with "No," (they are the plain user's).
    """

    NEXT = "Also, there is one more thing: "
    FALLBACK = "In which case, "
    INSIST = "Really? This matters a lot to me. Is there no way to make an exception?"
    ACCEPT = "Alright, I see."
    AS_I_SAID = "Like I mentioned, "

    def voice(self, persona: Mapping[str, str]) -> Mapping[str, str]:
        name = next(n for n, p in PERSONAS.items() if p["description"] == persona["description"])
        return PARAPHRASED_VOICES[name]

    def announce(self, task: Task) -> str:
        if task.kind == "cancel":
            return "Could you cancel one of my orders for me?"
        if task.kind == "return":
            return "Please help me return a purchase."
        dim = (task.fact("wanted") or "size x").split()[0]
        if task.kind == "exchange" and "not shipped" in (task.fact("order state") or ""):
            return f"I picked the wrong {dim} in an order that hasn't shipped. Could that still be changed?"
        if task.kind == "exchange":
            return f"I got the wrong {dim} and want to swap it for another one."
        if task.kind == "order_address":
            return "One of my orders should go to a different address."
        if task.kind == "default_address":
            return "I moved house, so my account needs the new address."
        return "I want to pay for one of my orders with another method."

    def say_answer(self, task: Task, fallback: bool, topic: str) -> str | None:
        plain = self._answer(task, fallback, topic)
        if plain is None:
            return None
        kind = _effective_kind(task, fallback)
        order_id = task.fact("order id") or ""
        if topic == "order" and order_id.startswith("#"):
            return f"The order number is {order_id}."
        if topic == "order":
            return f"I'm not sure of the number; it's the one with the {order_id.rpartition('order with the ')[2]}."
        if topic == "item":
            return "Just the " + (task.fact("items") or "").replace("; ", " and the ") + "."
        if topic == "wanted":
            return f"I'd prefer {task.fact('wanted')}."
        if topic == "refund":
            return f"Send the refund to the {_refund_goal(task, fallback)}, please."
        if topic == "address":
            return f"Please use {task.fact('new address')}."
        if topic == "reason":
            return "It was a mistake to order it." if _reason_goal(task, fallback) == "ordered by mistake" \
                else "I don't need it anymore."
        if topic == "payment" and kind == "payment":
            return f"Use my {'gift card' if task.fact('pay with') == 'gift card' else 'PayPal'}, please."
        return plain

    @staticmethod
    def say_identity(brief: text.Brief, asked: str) -> str:
        ident = brief.identity
        email = ident.get("email", "")
        if "@" in email and ("email" in asked or "e-mail" in asked or "zip" not in asked):
            return f"It's {email}."
        forgot = "" if "@" in email else "I forgot which email I used. "
        return f"{forgot}The name is {ident['name']}, and the zip is {ident['zip']}."

    def say_fallback(self, what: str, destination: str = "") -> str:
        return {"keep": "I'll just keep it then.", "cancel": "please cancel the entire order instead; I don't need it anymore.",
                "return": "I'd rather return it.", "refund": f"put the refund on the {destination} then."}[what]


def _cue_in(sentence: str, topic: str, cues: Sequence[str]) -> bool:
    if topic == "address":  # "email address" asks for the email, not an address
        return bool(re.search(r"(?<!email )(?<!e-mail )\baddress", sentence))
    if topic == "wanted":
        return any(re.search(rf"\b{re.escape(c)}\b", sentence) for c in cues)
    return _has(sentence, cues)


def _restore_case(low: str) -> str:
    """Upper-case state codes again (``", ma 01970"`` -> ``", MA 01970"``) so that :data:`ADDRESS_RE` reads them."""
    return re.sub(r"(?<=, )([a-z]{2})(?= \d{5})", lambda m: m.group(1).upper(), low)


def _named_destination(proposal: str, paid_with: str, asked: str) -> str | None:
    """Which refund destination a proposal names: "gift card", "original", "other" or None."""
    if "gift card" in proposal:
        return "gift card"
    if asked and asked.lower() not in ("gift card", "original payment method") and asked.lower() in proposal:
        return "other"
    if "original" in proposal or (paid_with and paid_with.lower() in proposal):
        return "original"
    return None


def _mentions_option(proposal: str, wanted: str) -> bool:
    """Whether a (lower-case) proposal names the wanted option: "size l", "in l", "l size", or a bare "navy"."""
    dim, _, value = wanted.partition(" ")
    dim, value = re.escape(dim), re.escape(value.lower())
    if re.search(rf"\b{dim}:? {value}\b|\bin (?:an? |the )?{value}\b|\b{value}[ -]{dim}\b", proposal):
        return True
    return len(value) >= 3 and re.search(rf"\b{value}\b", proposal) is not None


# ---------------------------------------------------------------------------------------------
# The scripted assistant
# ---------------------------------------------------------------------------------------------


@dataclass
class _Event:
    kind: str  # "user", "say" or "call"
    text: str = ""
    name: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    error: str | None = None


def _events(messages: Sequence[dict[str, str]]) -> list[_Event]:
    """Read the assistant's transcript as user messages, own messages to the user, and tool calls with results."""
    out: list[_Event] = []
    pending: list[Any] = []
    for m in messages[1:]:
        role, content = m["role"], m["content"]
        if role == "assistant":
            calls = parse_tool_calls(content)
            if calls:
                pending = list(calls)
            else:
                out.append(_Event("say", content))
        elif role == "tool":
            call = pending.pop(0) if pending else None
            event = _Event("call", name=call.name if call else "", args=dict(call.arguments) if call else {})
            if content.startswith("error:"):
                event.error = content[len("error:"):].strip()
            else:
                try:
                    event.result = json.loads(content)
                except json.JSONDecodeError:
                    event.result = content
            out.append(event)
        elif not content.startswith(ENV_MARK):  # the env's own feedback, which no customer can imitate
            out.append(_Event("user", content))
    return out


def _say(message: str) -> str:
    return message


def _call(*calls: tuple[str, dict[str, Any]]) -> str:
    return "\n".join(f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in calls)


class _Knowledge:
    """What the assistant has learned: from tool results (the truth) and the segment's user messages."""

    def __init__(self, messages: Sequence[dict[str, str]]) -> None:
        self.events = _events(messages)
        self.customer_id: str | None = None
        self.profile: dict[str, Any] | None = None
        self.orders: dict[str, dict[str, Any]] = {}
        self.products: dict[str, dict[str, Any]] = {}
        for e in self.events:
            if e.kind != "call" or e.error or not isinstance(e.result, dict):
                continue
            if e.name in ("find_customer_by_email", "find_customer_by_name_zip"):
                self.customer_id = e.result.get("customer_id")
            elif e.name == "get_customer":
                self.profile = e.result
            elif e.name == "get_order":
                self.orders[e.result["order_id"]] = e.result
            elif e.name == "get_product":
                self.products[e.result["product_id"]] = e.result
        start = 0
        for i, e in enumerate(self.events):
            if (e.kind == "say" and ANYTHING_ELSE in e.text) or (e.kind == "user" and NEXT_TASK.strip().lower()
                                                                 in e.text.lower()):
                start = i + 1 if e.kind == "say" else i
        self.segment = self.events[start:]

    def user_texts(self, segment: bool = True) -> list[str]:
        return [e.text for e in (self.segment if segment else self.events) if e.kind == "user"]

    def tried(self, name: str, args: dict[str, Any]) -> bool:
        return any(e.kind == "call" and e.name == name and e.args == args for e in self.events)

    def last_say(self) -> str:
        return next((e.text for e in reversed(self.events) if e.kind == "say"), "")

    def last_user(self) -> str:
        return next((e.text for e in reversed(self.events) if e.kind == "user"), "")

    def outcome(self, name: str, args: dict[str, Any]) -> _Event | None:
        """The segment's call of ``name`` with ``args``, if one was made."""
        return next((e for e in reversed(self.segment) if e.kind == "call" and e.name == name and e.args == args), None)

    def after(self, marker: str) -> list[str]:
        """User messages of the segment after the assistant's last message containing ``marker``."""
        index = max((i for i, e in enumerate(self.segment) if e.kind == "say" and marker in e.text), default=None)
        if index is None:
            return []
        return [e.text for e in self.segment[index + 1:] if e.kind == "user"]

    def intent(self) -> str | None:
        intent = None
        for message in self.user_texts():
            found = next((kind for kind, pattern in INTENTS if pattern.search(message)), None)
            if found is None:
                continue
            if intent is None or (found != intent and _has(message.lower(), SWITCH_CUES)):
                intent = found
        return intent


NOTES = {"cancel": "cancel an order", "return": "return items of an order", "exchange": "exchange an item",
         "default_address": "change the address on the account", "order_address": "change an order's shipping address",
         "payment": "change an order's payment method"}
"""Request kind -> the task as the noting assistant restates it (``Task: ...``) before its tool calls."""


class ScriptedAssistant:
    """Solves user_sim scenarios by the policies with a correct tool sequence; see the module docstring.

    With ``notes``, each reply with tool calls opens with the request it serves, once one is known (``Task: cancel an
    order.``): the text of a tool-call reply stays in the assistant's own transcript (the customer never sees it), so
    a model fitted to these traces restates the task next to each decision instead of reading it off the customer's
    first message, hundreds of tokens back.
    """

    def __init__(self, notes: bool = False) -> None:
        self.notes = notes

    def reply(self, messages: Sequence[dict[str, str]]) -> str:
        """Return the assistant's next reply (a message or tool calls) for the transcript ``messages``."""
        k = _Knowledge(messages)
        reply = self._next(k)
        intent = k.intent() if self.notes and reply.startswith("<tool_call>") else None
        return f"Task: {NOTES[intent]}.\n{reply}" if intent is not None else reply

    def _next(self, k: _Knowledge) -> str:
        if k.customer_id is None:
            return self._identify(k)
        if k.profile is None or k.profile.get("customer_id") != k.customer_id:
            return _call(("get_customer", {"customer_id": k.customer_id}))
        intent = k.intent()
        if intent is None:
            return _say("How can I help you today?")
        return getattr(self, f"_{intent}")(k)

    # ---- steps --------------------------------------------------------------------------------

    @staticmethod
    def _identify(k: _Knowledge) -> str:
        texts = k.user_texts(segment=False)
        emails = [e for t in texts for e in EMAIL_RE.findall(t)]
        if emails and not k.tried("find_customer_by_email", {"email": emails[-1]}):
            return _call(("find_customer_by_email", {"email": emails[-1]}))
        names = [m.groups() for t in texts for m in NAME_RE.finditer(t)]
        zips = [z for t in texts for z in ZIP_RE.findall(t)]
        if names and zips:
            args = {"first_name": names[-1][0], "last_name": names[-1][1], "zip": zips[-1]}
            if not k.tried("find_customer_by_name_zip", args):
                return _call(("find_customer_by_name_zip", args))
        if any(e.kind == "call" and e.name.startswith("find_customer") for e in k.events):
            return _say("I couldn't find an account with those details. Could you please give me the email on your "
                        "account, or your full name and zip code?")
        return _say("I can help with that. First, could you please give me the email on your account, so I can "
                    "verify your identity?")

    def _order(self, k: _Knowledge) -> dict[str, Any] | str:
        """Find the order the segment is about: a dict, or the reply that gets closer to it."""
        assert k.profile is not None
        mine = k.profile["orders"]
        ids = [o for t in k.user_texts() for o in ORDER_RE.findall(t.upper())]
        if ids:
            order_id = ids[-1]
            if order_id not in mine:
                return _say(f"I couldn't find order {order_id} on your account. Could you check the order id?")
            return k.orders.get(order_id) or _call(("get_order", {"order_id": order_id}))
        described = [t for t in k.user_texts() if NOT_KNOWN.search(t) and _products_in(t)]
        if described:
            missing = [o for o in mine if o not in k.orders]
            if missing:
                return _call(*[("get_order", {"order_id": o}) for o in missing])
            products = set(_products_in(described[-1]))
            matches = [k.orders[o] for o in mine if any(i["product_id"] in products for i in k.orders[o]["items"])]
            if len(matches) == 1:
                return matches[0]
        return _say("Which order is it about? Please tell me the order id; it looks like #W1234567.")

    @staticmethod
    def _items(k: _Knowledge, order: dict[str, Any], verb: str) -> list[dict[str, Any]] | str:
        items = order["items"]
        if len(items) == 1:
            return items
        for message in reversed(k.after("Which item")):
            chosen = [i for i in items if i["product"].lower() in message.lower()]
            if chosen:
                return chosen
        listed = ", ".join(_item_text(i) for i in items)
        return _say(f"Which item from order {order['order_id']} would you like to {verb}? It has: {listed}.")

    @staticmethod
    def _refuse(k: _Knowledge, message: str) -> str:
        if k.last_say().startswith(message):
            return _say(f"{message} {ANYTHING_ELSE}")
        return _say(message)

    @staticmethod
    def _act(k: _Knowledge, call: tuple[str, dict[str, Any]], proposal: str, report: str) -> str:
        """Propose ``call``, make it after a yes, and report its outcome."""
        done = k.outcome(*call)
        if done is not None and done.error is None:
            return _say(f"Done: {report} {ANYTHING_ELSE}")
        if done is not None:
            return _say(f"I'm sorry, that didn't work: {done.error}. {ANYTHING_ELSE}")
        question = f"{proposal} {SHALL_I}"
        answer = k.last_user()
        if k.last_say() == question and YES.search(answer) and not NO.search(answer):
            return _call(call)
        return _say(question)

    # ---- one method per request kind -----------------------------------------------------------

    def _cancel(self, k: _Knowledge) -> str:
        order = self._order(k)
        if isinstance(order, str):
            return order
        oid = order["order_id"]
        if order["status"] != "pending":
            return self._refuse(k, f"I'm sorry, but order {oid} {_status_phrase(order)}, so it can't be cancelled: "
                                   "only orders that haven't shipped yet can be.")
        reason = None
        for message in reversed(k.user_texts()):
            low = message.lower()
            if "mistake" in low:
                reason = "ordered by mistake"
            elif re.search(r"no longer need|don't need|do not need|not need", low):
                reason = "no longer needed"
            if reason:
                break
        if reason is None:
            return _say("May I ask why you'd like to cancel it: is it no longer needed, or was it ordered by mistake?")
        return self._act(k, ("cancel_order", {"order_id": oid, "reason": reason}),
                         f"I'll cancel order {oid} (reason: {reason}); the full {order['total']} will be refunded "
                         f"to {order['payment']}.",
                         f"order {oid} has been cancelled, and {order['total']} will be refunded to {order['payment']}.")

    def _return(self, k: _Knowledge) -> str:
        order = self._order(k)
        if isinstance(order, str):
            return order
        oid = order["order_id"]
        refusal = _window_refusal(order, "returned")
        if refusal:
            return self._refuse(k, refusal)
        items = self._items(k, order, "return")
        if isinstance(items, str):
            return items
        assert k.profile is not None
        gift = next((p for p in k.profile["payment_methods"] if p["kind"] == "gift_card"), None)
        destination: dict[str, Any] | str | None = None
        for message in reversed(k.user_texts()):
            low = message.lower()
            other = next((p for p in k.profile["payment_methods"] if p["label"].lower() in low
                          and p["payment_id"] != order["payment_id"] and p["kind"] != "gift_card"), None)
            if "gift card" in low:
                destination = gift or "a gift card (you don't have one)"
            elif "original" in low or order["payment"].lower() in low:
                destination = {"payment_id": order["payment_id"], "label": order["payment"]}
            elif other is not None:
                destination = other["label"]
            if destination is not None:
                break
        if destination is None:
            if gift is None:
                destination = {"payment_id": order["payment_id"], "label": order["payment"]}
            else:
                return _say(f"Should the refund go to the original payment method ({order['payment']}) or to "
                            "your gift card?")
        if isinstance(destination, str):
            return self._refuse(k, f"I'm sorry, but refunds can only go to the original payment method "
                                   f"({order['payment']}) or to a gift card, so I can't refund to {destination}.")
        lines = [i["line"] for i in items]
        what = " and the ".join(_item_text(i) for i in items)
        amount = world.money(sum(round(float(i["price"].lstrip("$")) * 100) for i in items))
        return self._act(k, ("return_items", {"order_id": oid, "item_lines": lines,
                                              "refund_payment_id": destination["payment_id"]}),
                         f"I'll return the {what} from order {oid} and refund {amount} to your {destination['label']}.",
                         f"the return of the {what} has been requested, and {amount} will be refunded to your "
                         f"{destination['label']}.")

    def _exchange(self, k: _Knowledge) -> str:
        order = self._order(k)
        if isinstance(order, str):
            return order
        oid, status = order["order_id"], order["status"]
        if status != "pending":
            refusal = _window_refusal(order, "exchanged")
            if refusal:
                return self._refuse(k, refusal)
        items = self._items(k, order, "exchange")
        if isinstance(items, str):
            return items
        item = items[0]
        product = k.products.get(item["product_id"])
        if product is None:
            return _call(("get_product", {"product_id": item["product_id"]}))
        options = dict(item["options"])
        for message in reversed(k.user_texts()):
            changed = _wanted_options(message, item)
            if changed:
                options.update(changed)
                break
        else:
            dims = world.OPTION_DIMS[item["product_id"]]
            offer = " and ".join(f"{dim} {', '.join(values)}" for dim, values in dims)
            return _say(f"What would you like instead? The {item['product']} comes in {offer}.")
        target = next((v for v in product["variants"] if v["options"] == options), None)
        if target is None or target["in_stock"] < 1:
            return self._refuse(k, f"I'm sorry, but the {item['product']} in {world.describe_options(options)} is "
                                   "out of stock, so I can't exchange it.")
        new = f"{item['product']} ({world.describe_options(options)})"
        args = {"order_id": oid, "item_lines": [item["line"]], "new_variant_ids": [target["variant_id"]]}
        if status == "pending":
            return self._act(k, ("modify_order_items", args),
                             f"I'll change the {_item_text(item)} in order {oid} to the {new} before it ships, at no "
                             "extra cost.",
                             f"order {oid} has been updated: it now has the {new}.")
        return self._act(k, ("exchange_items", args),
                         f"I'll exchange the {_item_text(item)} from order {oid} for the {new}, at no extra cost.",
                         f"the exchange has been requested; you'll receive the {new}.")

    def _order_address(self, k: _Knowledge) -> str:
        order = self._order(k)
        if isinstance(order, str):
            return order
        oid = order["order_id"]
        if order["status"] != "pending":
            return self._refuse(k, f"I'm sorry, but order {oid} {_status_phrase(order)}, so its shipping address "
                                   "can't be changed anymore.")
        address = _latest_address(k)
        if address is None:
            return _say("What is the new shipping address, in full?")
        return self._act(k, ("modify_order_address", {"order_id": oid, "address": address}),
                         f"I'll change the shipping address of order {oid} to {address}.",
                         f"the shipping address of order {oid} has been updated to {address}.")

    def _default_address(self, k: _Knowledge) -> str:
        address = _latest_address(k)
        if address is None:
            return _say("What is your new address, in full?")
        assert k.customer_id is not None
        return self._act(k, ("update_customer_address", {"customer_id": k.customer_id, "address": address}),
                         f"I'll update the address on your account to {address}.",
                         f"the address on your account has been updated to {address}.")

    def _payment(self, k: _Knowledge) -> str:
        order = self._order(k)
        if isinstance(order, str):
            return order
        oid = order["order_id"]
        if order["status"] != "pending":
            return self._refuse(k, f"I'm sorry, but order {oid} {_status_phrase(order)}, so its payment method "
                                   "can't be changed anymore.")
        assert k.profile is not None
        methods = [p for p in k.profile["payment_methods"] if p["payment_id"] != order["payment_id"]]
        chosen = None
        for message in reversed(k.user_texts()):
            low = message.lower()
            chosen = next((p for p in methods if (p["kind"] == "gift_card" and "gift card" in low)
                           or (p["kind"] == "paypal" and "paypal" in low) or p["label"].lower() in low), None)
            if chosen:
                break
        if chosen is None:
            labels = ", ".join(p["label"] for p in methods)
            return _say(f"Which payment method would you like to use instead? On file you have: {labels}.")
        total = order["total"]
        if chosen["kind"] == "gift_card" and _cents(chosen["balance"]) < _cents(total):
            return self._refuse(k, f"I'm sorry, but your gift card balance ({chosen['balance']}) doesn't cover the "
                                   f"order total ({total}), so I can't switch the payment to it.")
        return self._act(k, ("modify_order_payment", {"order_id": oid, "payment_id": chosen["payment_id"]}),
                         f"I'll switch the payment of order {oid} ({total}) to your {chosen['label']}.",
                         f"the payment method of order {oid} has been changed to your {chosen['label']}.")


def _cents(amount: str) -> int:
    return round(float(amount.lstrip("$")) * 100)


def _item_text(item: dict[str, Any]) -> str:
    return f"{item['product']} ({world.describe_options(item['options'])})"


def _status_phrase(order: dict[str, Any]) -> str:
    return {"shipped": "has already shipped", "delivered": "has already been delivered",
            "cancelled": "is already cancelled"}.get(order["status"], f"is {order['status']}")


def _window_refusal(order: dict[str, Any], verb: str) -> str | None:
    """Why a delivered-order action is refused (not delivered, or past the window), or None."""
    oid = order["order_id"]
    if order["status"] != "delivered":
        return f"I'm sorry, but order {oid} hasn't been delivered, so it can't be {verb} yet."
    days = (world.TODAY - dt.date.fromisoformat(order["delivered_on"])).days
    if days > world.RETURN_WINDOW_DAYS:
        return (f"I'm sorry, but order {oid} was delivered on {order['delivered_on']}, more than "
                f"{world.RETURN_WINDOW_DAYS} days ago, so it can't be {verb} anymore.")
    return None


def _latest_address(k: _Knowledge) -> str | None:
    for message in reversed(k.user_texts()):
        found = ADDRESS_RE.findall(message)
        if found:
            return world.normalize_address(found[-1])
    return None


def _wanted_options(message: str, item: dict[str, Any]) -> dict[str, str]:
    """Options a user message asks for that differ from the item's: ``"size L"``, or a bare value like "navy"."""
    low = message.lower()
    changed = {}
    for dim, values in world.OPTION_DIMS[item["product_id"]]:
        for value in values:
            if value == item["options"][dim]:
                continue
            spelled = re.search(rf"\b{re.escape(dim)} {re.escape(value.lower())}\b", low)
            bare = len(value) >= 3 and re.search(rf"\b{re.escape(value.lower())}\b", low)
            if spelled or bare:
                changed[dim] = value
    return changed


# ---------------------------------------------------------------------------------------------
# The random tool-caller
# ---------------------------------------------------------------------------------------------

NO_TOOLS_LINE = "I'm sorry, I can't help with that."
"""Every reply of the do-nothing assistant: the world never changes, so it succeeds exactly where nothing should."""

RANDOM_LINES = (
    "How can I help you today?", "Could you tell me more?", "Could you give me the email on your account?",
    "Which order is it about?", "Which item do you mean?", "Shall I go ahead? (yes/no)",
    "Done! Is there anything else I can help you with?", "I'm sorry, I can't do that.",
)
_TOKENS = re.compile(r"#W\d{7}|\bC\d{4}\b|\bPM\d{4}\b|\bV\d{4}\b|\bP\d{2}\b|[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_SPECS = {name: parameters for name, _, parameters in world.TOOL_SPECS}


class RandomToolCaller:
    """Calls a random tool half of the time, with arguments drawn from strings seen in the conversation."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def reply(self, messages: Sequence[dict[str, str]]) -> str:
        """Return a random reply: a tool call or a stock support line."""
        if self.rng.random() < 0.5:
            return self.rng.choice(RANDOM_LINES)
        seen = [t for m in messages[1:] for t in _TOKENS.findall(m["content"])]
        seen += [a for m in messages[1:] for a in ADDRESS_RE.findall(m["content"])]
        name = self.rng.choice(world.TOOL_NAMES)
        args = {key: self._value(spec, seen) for key, spec in _SPECS[name]["properties"].items()}
        return _call((name, args))

    def _value(self, spec: dict[str, Any], seen: Sequence[str]) -> Any:
        if "enum" in spec:
            return self.rng.choice(spec["enum"])
        if spec["type"] == "array":
            return [self._value(spec["items"], seen) for _ in range(self.rng.randint(1, 2))]
        if spec["type"] == "integer":
            return self.rng.randint(1, 3)
        return self.rng.choice(seen) if seen and self.rng.random() < 0.9 else self.rng.choice(("x", "Ada Abbott", "12345"))


# ---------------------------------------------------------------------------------------------
# Policies
# ---------------------------------------------------------------------------------------------

_USERS = {"scripted": ScriptedUser(), "paraphrase": ParaphrasedUser()}
_ASSISTANTS = {"scripted": ScriptedAssistant(), "scripted_notes": ScriptedAssistant(notes=True)}


class ScriptedPolicy(SeededPolicy):
    """A policy for either seat: the scripted user in the user's, the given assistant in the assistant's.

    The seat is read from the observation's system prompt. Args: ``assistant`` is ``"scripted"``
    (the solver), ``"random_tools"`` (the random tool-caller) or ``"none"`` (user seat only: a
    ``ValueError`` in the assistant's); ``user`` is ``"scripted"``, ``"paraphrase"``
    (:class:`ParaphrasedUser`) or ``"random"`` (random lines,
    then the stop marker after a few turns); ``seed`` seeds the random players.
    """

    remote_ok = True  # plain Python state, no model: it may act in a Ray actor beside the envs

    def __init__(self, assistant: str = "scripted", user: str = "scripted", seed: int | None = None,
                 name: str | None = None) -> None:
        assistants = (*_ASSISTANTS, "random_tools", "none_tools", "none")
        if assistant not in assistants:
            raise ValueError(f"assistant must be one of {', '.join(map(repr, assistants))}; got {assistant!r}")
        if user not in ("scripted", "paraphrase", "random"):
            raise ValueError(f"user must be 'scripted', 'paraphrase' or 'random'; got {user!r}")
        self.assistant, self.user = assistant, user
        self.name = name or f"{user}_user+{assistant}_assistant"
        super().__init__(seed)

    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations, key="messages")
        return [Reply(self._reply(list(obs["messages"])), policy=self.name) for obs in observations]

    def _reply(self, messages: list[dict[str, str]]) -> str:
        if not messages or messages[0].get("role") != "system":
            raise ValueError("a user_sim observation starts with its system prompt; got "
                             f"{(messages[:1] or ['nothing'])[0]!r:.120}")
        if text.is_user_prompt(messages[0]["content"]):
            if self.user in _USERS:
                return _USERS[self.user].reply(messages)
            own = sum(m["role"] == "assistant" for m in messages)
            return text.STOP if own >= 3 else self._rng.choice(RANDOM_LINES)
        if self.assistant in _ASSISTANTS:
            return _ASSISTANTS[self.assistant].reply(messages)
        if self.assistant == "random_tools":
            return RandomToolCaller(self._rng).reply(messages)
        if self.assistant == "none_tools":
            return NO_TOOLS_LINE
        raise ValueError(f"policy {self.name!r} plays only the user seat; it was given the assistant's observation")


def scripted(seed: int | None = None) -> ScriptedPolicy:
    """Return the scripted player of either seat: the faithful user, or the assistant that solves the scenario."""
    return ScriptedPolicy("scripted", "scripted", seed, name="scripted")


def scripted_user(seed: int | None = None) -> ScriptedPolicy:
    """Return the scripted user (it refuses the assistant's seat)."""
    return ScriptedPolicy("none", "scripted", seed, name="scripted_user")


def random_tools(seed: int | None = None) -> ScriptedPolicy:
    """Return the random tool-caller in the assistant's seat (and the scripted user in the user's)."""
    return ScriptedPolicy("random_tools", "scripted", seed, name="random_tools")


def scripted_paraphrase(seed: int | None = None) -> ScriptedPolicy:
    """Return the paraphrasing user (:class:`ParaphrasedUser`) in the user's seat, the scripted assistant in the other."""
    return ScriptedPolicy("scripted", "paraphrase", seed, name="scripted_paraphrase")


def scripted_notes(seed: int | None = None) -> ScriptedPolicy:
    """Return the scripted assistant that restates the task before its tool calls (``ScriptedAssistant(notes=True)``),
    with the scripted user in the user's seat: a warm start's teacher."""
    return ScriptedPolicy("scripted_notes", "scripted", seed, name="scripted_notes")


def no_tools(seed: int | None = None) -> ScriptedPolicy:
    """Return the do-nothing assistant (it never calls a tool), with the scripted user in the user's seat."""
    return ScriptedPolicy("none_tools", "scripted", seed, name="no_tools")


USERS = {"scripted": ScriptedUser, "scripted_paraphrase": ParaphrasedUser}
"""Name -> the user simulator class an evaluation can seat (``evaluate_policies(..., user=NAME)``)."""

PLAYERS = {"scripted": scripted, "scripted_notes": scripted_notes, "random_tools": random_tools,
           "scripted_paraphrase": scripted_paraphrase, "no_tools": no_tools}
"""Name -> factory(seed=...) of the scripted players, as the CLI and benchmarks name them."""


# ---------------------------------------------------------------------------------------------
# Traces and the corpus
# ---------------------------------------------------------------------------------------------


def scripted_transcripts(scenarios: Sequence[str] | None = None, seeds: Sequence[int] = (0,), user: str = "scripted",
                         **env_kwargs: Any) -> list[tuple[dict[str, str], ...]]:
    """Play the scripted assistant against a scripted user on each template x seed; return the transcripts.

    Per episode, the assistant's final transcript, then the user's (each a tuple of chat messages).
    """
    player = ScriptedPolicy("scripted", "paraphrase" if user == "scripted_paraphrase" else "scripted")
    out = []
    for name in scenarios or env_module.SCENARIOS:
        for seed in seeds:
            game = env_module.env(**env_kwargs)
            game.reset(seed=seed, options={"scenario": name})
            for _agent in game.agent_iter():
                observation, _, terminated, truncated, _ = game.last()
                game.step(None if terminated or truncated else str(player.act([observation])[0]))
            out += [game.unwrapped.observe(agent)["messages"] for agent in ("assistant", "user")]
            game.close()
    return out


@functools.lru_cache(maxsize=1)
def corpus() -> tuple[str, ...]:
    """Return the text the env shows (both prompt styles, both user simulators), for a tiny model's BPE tokenizer."""
    texts = []
    for prompt in ("full", "compact"):
        for user in USERS:
            for messages in scripted_transcripts(seeds=(0,), user=user, prompt=prompt):
                texts += [m["content"] for m in messages]
    return tuple(texts)
