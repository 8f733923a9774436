"""The text-env base that every llm_zoo env stands on.

A :class:`TextEnv` is a PettingZoo AEC env whose action is the agent's reply, a ``str``, and whose
observation is a dict holding ``"messages"``: everything this agent may see, starting with its
system prompt, as ``{"role", "content"}`` dicts ready for a chat template. The base owns the
bookkeeping every env needs and the subclass owns the game:

* spaces (``Text`` actions, ``Dict`` of ``Sequence``/``Text`` observations) with a broad charset,
  and sanitising of text before it enters an observation;
* reward bookkeeping in PettingZoo's convention (``rewards``, ``_cumulative_rewards``, dead steps);
* bad replies: an error message and a retry, then a forfeit after ``max_retries``;
* tool calls read by :mod:`llm_zoo.toolcalls` (the Hermes / Qwen ``<tool_call>`` blocks and the
  Llama 3 JSON form; the server reads replies by the same grammar), checked against their JSON
  schemas by ``jsonschema``; a tool call keeps the turn and its result comes back as a ``tool``
  message;
* a step cap (``max_steps``) so that no policy can keep an episode alive forever;
* the transcript behind ``render()``.

The shapes it was designed against: a turn-based two-player game (Kuhn poker), a solver followed by
a judge who both use tools in one workspace (agentic judge), one proposer then N solvers who never
see each other (proposer-solver), and a long tool-using conversation (user simulation). Each is a
subclass that implements the hooks in the first section below and calls the helpers in the second.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError, best_match, relevance
from pettingzoo import AECEnv
from pettingzoo.utils.env_logger import EnvLogger
from pettingzoo.utils.wrappers import OrderEnforcingWrapper
from pettingzoo.utils.wrappers.order_enforcing import AECOrderEnforcingIterable, AECOrderEnforcingIterator

from llm_zoo import toolcalls
from llm_zoo.toolcalls import ToolCall, parse_tool_calls

if sys.version_info >= (3, 12):
    from typing import override
else:  # typing_extensions comes with gymnasium, a core dependency
    from typing_extensions import override

__all__ = [
    "CHARSET",
    "ENV_MARK",
    "LINE_BREAKS",
    "FastOrderEnforcingWrapper",
    "InvalidReply",
    "MoveReader",
    "TextEnv",
    "Tool",
    "ToolCall",
    "ToolError",
    "check_option_keys",
    "message_space",
    "parse_tool_calls",
    "sanitize",
    "split_lines",
    "terminal_safe",
    "text_space",
    "tools_prompt",
]

# Characters an observation may hold. Broad enough for prose, code, JSON, card suits and common
# punctuation in European languages; anything else is replaced by U+FFFD before it reaches an
# observation. Kept to ~1.5k characters because gymnasium's Text space copies its charset into a
# frozenset per instance and samples from it with numpy. "\n" is its only line break: U+2028 and
# U+2029 are left out (as are CR, VT, FF, U+001C-U+001E and U+0085, which str.splitlines and many
# readers also break lines at), so that no text quoted line by line can hide a line inside a line.
# ENV_MARK is in it, but sanitize replaces it: only the env writes it, after sanitising
# (TextEnv.tell's ``mark``).
ENV_MARK = "\u2699"
"""Opens every message the env itself writes to an agent (feedback on an invalid reply, an env's
own notices) in envs where agents' free text reaches each other (``TextEnv.marks_env_messages``).
:func:`sanitize` replaces it in every other text, so no agent can write an imitation of the env."""
_RANGES = [(0x20, 0x7E), (0xA0, 0x17F), (0x2000, 0x2027), (0x202A, 0x206F), (0x20A0, 0x20BF), (0x2190, 0x21FF),
           (0x2200, 0x22FF), (0x2500, 0x25FF), (0x2600, 0x26FF), (0x2700, 0x27BF)]
CHARSET: str = "\t\n" + "".join(chr(c) for lo, hi in _RANGES for c in range(lo, hi + 1)) + "\ufffd"
_CHARSET_SET = frozenset(CHARSET) - {ENV_MARK}  # what sanitize keeps
_REPLACEMENT = "\ufffd"
_TRUNCATION_MARK = " …[truncated]"
LINE_BREAKS = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
"""Every line break :meth:`str.splitlines` knows (``\\r\\n`` as one): what quoting must split at."""


def sanitize(text: str, max_chars: int) -> str:
    """Return ``text`` with characters outside :data:`CHARSET` (and :data:`ENV_MARK`) replaced and its length clipped.

    ``\\r\\n`` becomes ``\\n``; every other line break but ``\\n`` (:data:`LINE_BREAKS`) becomes U+FFFD,
    so sanitising never makes a line break where there was none.
    """
    if len(text) > max_chars:
        keep = max(0, max_chars - len(_TRUNCATION_MARK))
        text = text[:keep] + _TRUNCATION_MARK[: max_chars - keep]
    if _CHARSET_SET.issuperset(text):  # the common case, in one C-level pass: ~4x faster than a Python loop
        return text
    text = text.replace("\r\n", "\n")
    return "".join(c if c in _CHARSET_SET else _REPLACEMENT for c in text)


def split_lines(text: str) -> list[str]:
    """Split ``text`` at every line break of :data:`LINE_BREAKS`; ``""`` and a trailing break give an empty line."""
    return LINE_BREAKS.split(text)


def terminal_safe(text: str) -> str:
    """Return ``text`` fit for a terminal: every control, format, separator or surrogate character but
    ``\\n`` and ``\\t`` written as a ``\\uXXXX`` escape (no escape sequence, bidi override or lone
    surrogate reaches the terminal, and printing cannot raise)."""
    if text.isprintable() or all(c.isprintable() or c in "\n\t" for c in text):
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else f"\\u{ord(c):04x}" if ord(c) < 0x10000
                   else f"\\U{ord(c):08x}" for c in text)


def _quoted_tail(text: str) -> str:
    """Return agent-written text for the transcript: each line after the first behind ``"  | "``, so that
    no line of it can pass for one of the env's own narration lines."""
    return "\n  | ".join(split_lines(text))


# Checking a text is a set lookup per character, and envs repeat themselves: every episode starts
# with the same few system prompts, and game messages come from a small vocabulary. Texts up to
# these lengths are sanitised through memos, which in Kuhn poker save ~5% of a step.
_PROMPT_MEMO_CHARS = 16384  # x 64 entries x 4 bytes a character: 4 MB at most
_sanitize_prompt = functools.lru_cache(maxsize=64)(sanitize)
_MESSAGE_MEMO_CHARS = 1024  # x 1024 entries: 4 MB at most
_sanitize_message = functools.lru_cache(maxsize=1024)(sanitize)


def text_space(max_length: int, min_length: int = 0) -> spaces.Text:
    """Build a ``Text`` space over :data:`CHARSET`."""
    return spaces.Text(max_length=max_length, min_length=min_length, charset=CHARSET)


def message_space(max_chars: int) -> spaces.Sequence:
    """Build the space of a chat transcript: a tuple of ``{"role", "content"}`` dicts."""
    return spaces.Sequence(
        spaces.Dict({"role": text_space(16, 1), "content": text_space(max_chars)}), stack=False
    )


# ---------------------------------------------------------------------------------------------
# Tool calls
# ---------------------------------------------------------------------------------------------

class ToolError(Exception):
    """Raised by a tool for a bad call; the message goes back to the agent as the tool's result."""


class InvalidReply(Exception):  # noqa: N818 - it names the situation, as PettingZoo's IllegalMove does
    """Raised by :meth:`TextEnv.parse` for a reply that is not a valid move; the message is feedback."""


class MoveReader:
    """Reads one move of a card game out of a free-text reply (the poker envs' parser, one copy).

    ``moves`` is the game's move enum, each value a lower-case word. The canonical reply of a move
    is its word in square brackets (``"[bet]"``) and is read without a regex. Otherwise the reader
    is lenient about case and surrounding text, strict about ambiguity: if the reply has bracketed
    moves only those count, else whole words do (``"I bet"`` is a bet, ``"betting"`` is not), and a
    reply naming two different moves, or none, is not a move.
    """

    def __init__(self, moves: type[Any]) -> None:
        self._moves = moves
        names = "|".join(re.escape(m.value) for m in moves)
        self.canonical = {f"[{m.value}]": m for m in moves}
        self._bracketed = re.compile(rf"\[\s*({names})\s*\]", re.IGNORECASE)
        self._word = re.compile(rf"(?<![\w-])({names})(?![\w-])", re.IGNORECASE)

    def named(self, reply: str) -> set[str]:
        """Return the moves a reply names: its bracketed ones if it has any, else its whole words."""
        return {m.lower() for m in self._bracketed.findall(reply)} or {m.lower() for m in self._word.findall(reply)}

    def parse(self, reply: str, legal: Sequence[Any]) -> Any | None:
        """Return the legal move ``reply`` names, or None (no move, several, or one not in ``legal``)."""
        move = self.canonical.get(reply)
        if move is None:
            found = self.named(reply)
            if len(found) != 1:
                return None
            move = self._moves(found.pop())
        return move if move in legal else None

    def feedback(self, reply: str, legal: Sequence[Any]) -> str:
        """Explain why a reply was not read as a legal move."""
        found = sorted(self.named(reply))
        expected = " or ".join(f"[{self._moves(m).value}]" for m in legal)
        if not found:
            return f"expected one of {expected}; no move found in {reply[-120:]!r}."
        if len(found) > 1:
            return f"expected exactly one move, {expected}; the reply names {len(found)}: {', '.join(found)}."
        return f"{found[0]} is not legal now; expected {expected}."


@dataclass(frozen=True)
class Tool:
    """A function an agent may call: its OpenAI-format declaration and the Python behind it.

    ``fn`` takes the call's arguments as keyword arguments and returns the result as text (or any
    JSON-serialisable value). It raises :class:`ToolError` for a call the domain refuses.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: Callable[..., Any] = field(repr=False, compare=False)

    def schema(self) -> dict[str, Any]:
        """Return the declaration in OpenAI function format."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": dict(self.parameters)}}


def check_arguments(schema: Mapping[str, Any], value: Any, path: str = "arguments") -> str | None:
    """Check a tool call's ``value`` against its declared JSON Schema, with the ``jsonschema`` library.

    Returns None when it conforms, else one sentence for the agent naming the offending field, what
    was expected and what came (``arguments.n must be <= 5; got 6``). ``integer`` means a JSON integer
    written without a fraction (``3``, not ``3.0``) and never a boolean, so that the Python behind a
    tool receives an ``int``. Of several problems the one :func:`jsonschema.exceptions.best_match`
    ranks first is told (the first found of equals), among the first 64 found (a huge wrong array costs no more than a short one).

    Raises:
        ValueError: ``schema`` is not a valid JSON Schema (a bug in the tool's declaration).
    """
    errors = itertools.islice(_validator(_schema_key(schema)).iter_errors(value), 64)
    error = best_match(errors, key=_first_of_equals)
    return None if error is None else _describe(error, path)


# JSON Schema's draft 2020-12 with one change: ``integer`` admits Python ints only (not 3.0, not True).
_ToolArguments = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, v: isinstance(v, int) and not isinstance(v, bool)),
)
_JSON_TYPE_NAMES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                    (list, "array"), (dict, "object"), (type(None), "null"))


def _first_of_equals(error: ValidationError) -> tuple[Any, ...]:
    """Rank as jsonschema does, less its tie-break on the path, so that of equals the first found is told."""
    shallow, _, *rest = relevance(error)
    return (shallow, *rest)


def _schema_key(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, default=lambda o: dict(o) if isinstance(o, Mapping) else list(o))


@functools.lru_cache(maxsize=512)
def _validator(key: str) -> Any:
    """Return the validator of one declaration (JSON text), checked once and kept."""
    schema = json.loads(key)
    try:
        _ToolArguments.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"a tool's parameters must be a valid JSON Schema (draft 2020-12): {exc.message}; "
                         f"got {key[:200]!r}") from None
    return _ToolArguments(schema)


def _describe(error: ValidationError, root: str) -> str:
    """Say in one sentence what ``error`` found: the field, what it expects, what came."""
    path = root + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    kind, expected, got = error.validator, error.validator_value, error.instance
    shown = f"{got!r:.80}"
    if kind == "type":
        kinds = [expected] if isinstance(expected, str) else list(expected)
        name = next(n for t, n in _JSON_TYPE_NAMES if isinstance(got, t)) if got is not None else "null"
        return f"{path} must be of type {'/'.join(kinds)}; got {name} {shown}"
    if kind == "required":
        missing = next((n for n in expected if n not in got), expected[0] if expected else "?")
        return f"{path} is missing the required field {missing!r}"
    if kind == "additionalProperties":
        known = error.schema.get("properties", {})
        extra = next((n for n in got if n not in known), "?")
        return f"{path} has an unknown field {extra!r:.80}; expected fields {sorted(known)}"
    if kind == "enum":
        return f"{path} must be one of {list(expected)!r:.300}; got {shown}"
    if kind in _BOUNDS:
        return f"{path} must be {_BOUNDS[kind]} {expected}; got {shown}"
    if kind in _SIZES:
        unit, at = _SIZES[kind]
        return f"{path} must have {at} {expected} {unit}; got {len(got)}"
    if kind == "const":
        return f"{path} must be {expected!r:.80}; got {shown}"
    if kind == "pattern":
        return f"{path} must match the pattern {expected!r:.80}; got {shown}"
    return f"{path} does not conform ({kind}): {error.message:.200}"


_BOUNDS = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
_SIZES = {"maxLength": ("characters", "at most"), "minLength": ("characters", "at least"),
          "maxItems": ("items", "at most"), "minItems": ("items", "at least"),
          "maxProperties": ("fields", "at most"), "minProperties": ("fields", "at least")}


def tools_prompt(tools: Sequence[Tool]) -> str:
    """Describe tools for a system prompt, in the convention of Qwen's and Hermes' chat templates."""
    if not tools:
        return ""
    declared = "\n".join(json.dumps(t.schema(), ensure_ascii=False) for t in tools)
    return (
        "\n\n# Tools\n\nYou may call functions. They are declared below as JSON schemas:\n"
        f"<tools>\n{declared}\n</tools>\n\n"
        "To call one, write <tool_call>{\"name\": <function-name>, \"arguments\": <arguments-object>}</tool_call>. "
        "You may write several calls in one reply. Each result comes back to you in a tool message, "
        "and the turn stays yours. A reply without a tool call is your answer."
    )


# ---------------------------------------------------------------------------------------------
# The base env
# ---------------------------------------------------------------------------------------------


class TextEnv(AECEnv):
    """A PettingZoo AEC env whose actions are text replies and whose observations are chat transcripts.

    Args:
        render_mode: ``"ansi"`` (``render()`` returns the transcript), ``"human"`` (prints it) or None.
        max_retries: how many invalid replies in a row an agent is re-prompted after, with feedback,
            before it forfeits. 0 forfeits at the first invalid reply.
        max_reply_chars: replies are truncated to this many characters before they are read.
        max_message_chars: any message longer than this is clipped before it enters an observation.
        max_tool_calls: tool calls allowed per agent per episode; past it, a call is an invalid reply.
        max_steps: steps (replies) per episode after which every agent is truncated.
    """

    metadata: dict[str, Any] = {"render_modes": ["human", "ansi"], "name": "text_env", "is_parallelizable": False}
    marks_env_messages: bool = False
    """Whether the env's own messages to an agent (the feedback on an invalid reply, and whatever a
    subclass tells with ``mark=True``) open with :data:`ENV_MARK`. An env in which one agent's free
    text reaches another as a user message sets it, so that no agent can write a byte-identical
    imitation of the env's feedback; the poker envs, whose agents see only parsed moves, do not."""

    reset_options: tuple[str, ...] | None = None
    """The keys of ``reset(options=...)`` the env reads, or None where it does not say. ``reset`` ignores any other
    key (PettingZoo's api_test resets with one no env reads); where an env names its keys, the options a run lists
    (a curriculum's, a warm start's, an evaluation's) are checked against them by :func:`check_option_keys`, so that
    a misspelt key is refused instead of silently playing the seed's draw."""

    zero_sum: bool = False
    """Whether the agents' rewards sum to 0 in every episode; the default :meth:`forfeit_rewards` then keeps
    a forfeit zero-sum too (the others share the forfeiter's loss)."""

    # ---- override these ---------------------------------------------------------------------

    possible_agents: list[str]

    def role_of(self, agent: str) -> str:
        """Return the role of an agent: its name without a trailing ``_<index>``."""
        head, _, tail = agent.rpartition("_")
        return head if head and tail.isdigit() else agent

    def system_prompt(self, agent: str) -> str:
        """Return the system prompt of ``agent`` for the episode just started (tools are appended)."""
        raise NotImplementedError

    def start(self, rng: random.Random, options: Mapping[str, Any] | None) -> str:
        """Set up a new episode and return the agent who acts first.

        Runs inside ``reset`` after the bookkeeping is fresh, so it may call :meth:`tell` and write
        ``infos``. All randomness must come from ``rng``. Raises ``ValueError`` for bad ``options``.
        """
        raise NotImplementedError

    def parse(self, agent: str, reply: str) -> Any:
        """Read ``agent``'s reply as a move; raise :class:`InvalidReply` with feedback if it is none."""
        raise NotImplementedError

    def play(self, agent: str, move: Any) -> None:
        """Apply a parsed move: tell others what they may see, give rewards, pass the turn or end.

        Must leave the env either with the turn passed (:meth:`pass_turn`) or the episode ended
        (:meth:`end`); staying with the same agent is allowed (it acts again).
        """
        raise NotImplementedError

    def tools(self, agent: str) -> Sequence[Tool]:
        """Return the tools ``agent`` may call in this episode (none by default)."""
        return ()

    def describe_tools(self, agent: str, tools: Sequence[Tool]) -> str:
        """Return the text appended to ``agent``'s system prompt to declare ``tools`` (JSON schemas by default)."""
        return tools_prompt(tools)

    def forfeit_rewards(self, agent: str) -> dict[str, float]:
        """Return the rewards that end an episode in which ``agent`` forfeited.

        By default -1 to ``agent``; in a :attr:`zero_sum` env the others share +1, so the rewards still sum to 0.
        An agent left out gets 0. Runs once, when the forfeit ends the episode; it must not raise.
        """
        if not self.zero_sum:
            return {agent: -1.0}
        others = [a for a in self.agents if a != agent]
        return {agent: -1.0, **{a: 1.0 / len(others) for a in others}}

    def extra_spaces(self) -> dict[str, spaces.Space]:
        """Return spaces of env-specific observation keys beside ``"messages"`` (none by default)."""
        return {}

    def extra_observation(self, agent: str) -> dict[str, Any]:
        """Return the env-specific observation keys of ``agent`` (matching :meth:`extra_spaces`)."""
        return {}

    def on_close(self) -> None:
        """Release an episode's resources (workspaces, databases); called by reset and close."""

    def action_menu(self) -> tuple[str, ...] | None:
        """Return every canonical reply, in a fixed order, for envs whose moves form a finite menu.

        Discrete adapters number the menu and mask it with ``obs["legal_actions"]``. None (the
        default) means replies are free text and no discrete view exists.
        """
        return None

    def features(self, agent: str) -> np.ndarray:
        """Return a fixed-size float32 vector of what ``agent`` knows, for classic learners.

        Only envs with an :meth:`action_menu` need it; the vector must be a function of the agent's
        information (never of hidden state).
        """
        raise NotImplementedError(f"{type(self).__name__} has no vector features; it has no discrete view")

    def feature_space(self) -> gymnasium.spaces.Box | None:
        """Return the ``Box`` that every :meth:`features` vector lies in, or None if unknown (the default).

        Discrete adapters use it as the space of their vector observation; with None they probe one
        vector for its shape and declare it unbounded.
        """
        return None

    # ---- the base owns everything below -----------------------------------------------------

    def __init__(
        self,
        *,
        render_mode: str | None = None,
        max_retries: int = 1,
        max_reply_chars: int = 4096,
        max_message_chars: int = 16384,
        max_tool_calls: int = 64,
        max_steps: int = 1024,
    ) -> None:
        super().__init__()
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None; got {render_mode!r}")
        for name, value, low in (("max_retries", max_retries, 0), ("max_reply_chars", max_reply_chars, 1),
                                 ("max_message_chars", max_message_chars, 64), ("max_tool_calls", max_tool_calls, 0),
                                 ("max_steps", max_steps, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}; got {value!r}")
        self.render_mode = render_mode
        self.max_retries = max_retries
        self.max_reply_chars = max_reply_chars
        self.max_message_chars = max_message_chars
        self.max_tool_calls = max_tool_calls
        self.max_steps = max_steps
        self.agents = []
        self._observation_spaces: dict[str, spaces.Space] = {}
        self._action_spaces: dict[str, spaces.Space] = {}
        self._messages: dict[str, list[dict[str, str]]] = {}
        self._log: list[str] = []
        self._rendered = 0

    # Spaces are built on first use, one object per agent and env instance (seed_test seeds them
    # per agent); rollouts that never ask for them skip the cost of gymnasium's Text charsets.
    def observation_space(self, agent: str) -> gymnasium.spaces.Space:
        if agent not in self._observation_spaces:
            self._check_agent(agent)
            self._observation_spaces[agent] = spaces.Dict(
                {"messages": message_space(self.max_message_chars), **self.extra_spaces()})
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.spaces.Space:
        if agent not in self._action_spaces:
            self._check_agent(agent)
            self._action_spaces[agent] = text_space(self.max_reply_chars)
        return self._action_spaces[agent]

    @property
    def observation_spaces(self) -> dict[str, spaces.Space]:
        return {a: self.observation_space(a) for a in self.possible_agents}

    @property
    def action_spaces(self) -> dict[str, spaces.Space]:
        return {a: self.action_space(a) for a in self.possible_agents}

    def _check_agent(self, agent: str) -> None:
        if agent not in self.possible_agents:
            raise KeyError(f"unknown agent {agent!r}; this env's agents are {self.possible_agents}")

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.on_close()
        self.rng = random.Random(seed)
        self.episode_seed = seed
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {"role": self.role_of(a), "invalid_replies": 0, "tool_calls": 0, "forfeit": False}
                      for a in self.agents}
        self._messages = {a: [] for a in self.agents}
        self._retries = dict.fromkeys(self.agents, 0)
        self._steps = 0
        self._log = []
        self._rendered = 0
        first = self.start(self.rng, options)
        for agent in self.agents:
            prompt = self.system_prompt(agent)
            tools = self.tools(agent)
            if tools:  # else the prompt may stay the very str the memo below holds, its hash computed
                prompt += self.describe_tools(agent, tools)
            memo = _sanitize_prompt if len(prompt) <= _PROMPT_MEMO_CHARS else sanitize
            self._messages[agent].insert(0, {"role": "system", "content": memo(prompt, self.max_message_chars)})
        self.agent_selection = first

    def observe(self, agent: str) -> dict[str, Any]:
        # fresh dicts: a caller that edits its observation must not edit what the env shows next
        messages = tuple([m.copy() for m in self._messages.get(agent, ())])
        return {"messages": messages, **self.extra_observation(agent)}

    def step(self, action: str | None) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        if not isinstance(action, str):
            raise TypeError(f"{agent}'s action must be a str (the reply text); got {type(action).__name__} {action!r:.80}")
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        self._steps += 1
        reply = action[: self.max_reply_chars]
        if len(action) > self.max_reply_chars:
            self.infos[agent]["truncated_replies"] = self.infos[agent].get("truncated_replies", 0) + 1
        self.tell(agent, reply, role="assistant")
        if self.render_mode is not None:
            self.narrate(f"{agent}: {_quoted_tail(reply if len(reply) <= 300 else reply[:300] + ' …')}")
        tools = self.tools(agent)
        calls = toolcalls.parse(reply).calls if tools else ()
        if calls:
            self._run_tools(agent, {t.name: t for t in tools}, calls)
        else:
            try:
                move = self.parse(agent, reply)
            except InvalidReply as exc:
                self._invalid(agent, str(exc))
            else:
                self._retries[agent] = 0
                self.play(agent, move)
        done = self._done()
        if self._steps >= self.max_steps and not done:
            for a in self.agents:
                self.truncations[a] = True
                self.infos[a]["truncated_by"] = "max_steps"
            self.narrate(f"-- truncated after {self._steps} steps (max_steps)")
            done = True
        if done:
            self._deads_step_first()
        self._accumulate_rewards()
        if self.render_mode == "human":
            self.render()

    def render(self) -> str | None:
        """Return (``"ansi"``) or print (``"human"``) the transcript, every line :func:`terminal_safe`."""
        if self.render_mode is None:
            gymnasium.logger.warn("render() was called without a render_mode; pass render_mode='ansi' or 'human'.")
            return None
        if self.render_mode == "ansi":
            return terminal_safe("\n".join(self._log))
        new = self._log[self._rendered:]
        if new:
            text = terminal_safe("\n".join(new))
            encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
            print(text.encode(encoding, "backslashreplace").decode(encoding, "replace"))
        self._rendered = len(self._log)
        return None

    def close(self) -> None:
        self.on_close()

    # ---- helpers for subclasses -------------------------------------------------------------

    def tell(self, agent: str, content: str, role: str = "user", *, mark: bool = False) -> None:
        """Append a message to what ``agent`` sees, sanitised and clipped to the observation space.

        With ``mark`` (for the env's own words, never another agent's) the message opens with
        :data:`ENV_MARK`, which sanitising removes from every other text: no agent can imitate it.
        """
        memo = _sanitize_message if len(content) <= _MESSAGE_MEMO_CHARS else sanitize
        if mark:
            content = ENV_MARK + " " + memo(content, self.max_message_chars - 2)
        else:
            content = memo(content, self.max_message_chars)
        self._messages[agent].append({"role": role, "content": content})

    def narrate(self, line: str) -> None:
        """Add a line to the transcript that ``render`` shows (not to any agent's observation).

        Without a ``render_mode`` nothing can show the transcript, so it is not kept; a subclass may
        test ``self.render_mode is not None`` to skip formatting a line that would be dropped.
        """
        if self.render_mode is not None:
            self._log.append(line)

    def reward(self, agent: str, value: float) -> None:
        """Give ``agent`` a reward in this step."""
        self.rewards[agent] += float(value)

    def pass_turn(self, agent: str) -> None:
        """Make ``agent`` the next to act."""
        if agent not in self.agents:
            raise ValueError(f"cannot pass the turn to {agent!r}; live agents are {self.agents}")
        self.agent_selection = agent

    def end(self, rewards: Mapping[str, float] | None = None, **facts: Any) -> None:
        """End the episode: give final rewards and record ``facts`` in every agent's info."""
        for agent, value in (rewards or {}).items():
            self.reward(agent, value)
        for agent in self.agents:
            self.terminations[agent] = True
            self.infos[agent].update(facts)

    def forfeit(self, agent: str, reason: str) -> None:
        """End the episode with ``agent`` forfeiting, for ``reason``."""
        self.infos[agent]["forfeit"] = True
        self.narrate(f"-- {agent} forfeits: {reason}")
        self.end(self.forfeit_rewards(agent), forfeited_by=agent, forfeit_reason=reason)

    def _done(self) -> bool:
        for a in self.agents:  # a loop, not all(<generator>): this runs at every step
            if not (self.terminations[a] or self.truncations[a]):
                return False
        return True

    def _invalid(self, agent: str, feedback: str) -> None:
        self.infos[agent]["invalid_replies"] += 1
        self._retries[agent] += 1
        mark = self.marks_env_messages
        if self._retries[agent] > self.max_retries:
            self.tell(agent, f"Invalid reply: {feedback} You have no retries left and forfeit.", mark=mark)
            self.forfeit(agent, f"invalid reply: {feedback}")
        else:
            self.tell(agent, f"Invalid reply: {feedback} Reply again.", mark=mark)
            self.narrate(f"-- invalid reply from {agent}: {feedback}")

    def _run_tools(self, agent: str, tools: Mapping[str, Tool], calls: Sequence[ToolCall]) -> None:
        for call in calls:
            self.infos[agent]["tool_calls"] += 1
            if self.infos[agent]["tool_calls"] > self.max_tool_calls:
                self._invalid(agent, f"the tool-call budget of {self.max_tool_calls} per episode is spent; "
                                     "answer without tools.")
                return
            result = self._call_tool(agent, tools, call)
            self.tell(agent, result, role="tool")
            self.narrate(f"   [{_quoted_tail(call.name[:80]) or '?'}] -> {_quoted_tail(result[:200])}")

    def _call_tool(self, agent: str, tools: Mapping[str, Tool], call: ToolCall) -> str:
        if call.error:
            return f"error: {call.error}"
        tool = tools.get(call.name)
        if tool is None:
            return f"error: unknown tool {call.name!r:.80}; available tools are {sorted(tools)}"
        problem = check_arguments(tool.parameters, call.arguments)
        if problem:
            return f"error: {problem}"
        try:
            result = tool.fn(**call.arguments)
        except ToolError as exc:
            return f"error: {exc}"
        except Exception as exc:  # a tool bug must not end the run; it is recorded for the developer
            self.infos[agent].setdefault("tool_failures", []).append(f"{call.name}: {type(exc).__name__}: {exc}")
            return f"error: the tool {call.name} failed ({type(exc).__name__})"
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)


# ---------------------------------------------------------------------------------------------
# Call-order checks
# ---------------------------------------------------------------------------------------------


def _after_reset(name: str) -> property:
    """Forward attribute ``name`` to the wrapped env, refusing it before reset as PettingZoo does."""

    def get(self: FastOrderEnforcingWrapper) -> Any:
        if not self._has_reset:
            raise AttributeError(f"{name} cannot be accessed before reset")
        return getattr(self.env, name)

    return property(get, doc=f"The wrapped env's ``{name}`` (an AttributeError before reset).")


class FastOrderEnforcingWrapper(OrderEnforcingWrapper):
    """PettingZoo's :class:`OrderEnforcingWrapper` with direct hot paths; the same checks, errors and warnings.

    PettingZoo's wrapper reaches ``agent_selection``, ``rewards``, ``terminations`` and the like
    through ``__getattr__``, which Python calls only after a failed lookup: about 0.8 us an access,
    five in each ``last()``, more than a whole Kuhn poker step takes. Here they are properties, and
    ``reset``, ``step``, ``observe``, ``last`` and the agent iterator reach the wrapped env directly
    (so a subclass overriding ``observe`` must override ``last`` too). Every other attribute still
    goes through PettingZoo's ``__getattr__``.
    """

    rewards = _after_reset("rewards")
    terminations = _after_reset("terminations")
    truncations = _after_reset("truncations")
    infos = _after_reset("infos")
    agent_selection = _after_reset("agent_selection")
    agents = _after_reset("agents")

    @override
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self._has_reset = True
        self._has_updated = True
        self.env.reset(seed=seed, options=options)

    @override
    def step(self, action: Any) -> None:
        if not self._has_reset:
            EnvLogger.error_step_before_reset()
        elif not self.env.agents:
            self._has_updated = True
            EnvLogger.warn_step_after_terminated_truncated()
        else:
            self._has_updated = True
            self.env.step(action)

    @override
    def observe(self, agent: Any) -> Any:
        if not self._has_reset:
            EnvLogger.error_observe_before_reset()
        return self.env.observe(agent)

    @override
    def agent_iter(self, max_iter: int = 2**63) -> AECOrderEnforcingIterable:
        if not self._has_reset:
            EnvLogger.error_agent_iter_before_reset()
        return _FastIterable(self, max_iter)

    @override
    def last(self, observe: bool = True) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if not self._has_reset:  # PettingZoo's last() reads agent_selection first, which raises this
            raise AttributeError("agent_selection cannot be accessed before reset")
        env = self.env
        agent = env.agent_selection
        assert agent is not None
        return (env.observe(agent) if observe else None, env._cumulative_rewards[agent],
                env.terminations[agent], env.truncations[agent], env.infos[agent])

    @override
    def __str__(self) -> str:
        # what PettingZoo's wrapper shows for its own class: the env's name, as if unwrapped
        return str(self.env) if hasattr(self, "metadata") else repr(self)


class _FastIterable(AECOrderEnforcingIterable):
    @override
    def __iter__(self) -> _FastIterator:
        return _FastIterator(self.env, self.max_iter)


class _FastIterator(AECOrderEnforcingIterator):
    """PettingZoo's checked agent iterator, reading the wrapped env directly."""

    @override
    def __next__(self) -> Any:
        wrapper = self.env
        if not wrapper.env.agents or self.iters_til_term <= 0:
            raise StopIteration
        self.iters_til_term -= 1
        assert wrapper._has_updated, "need to call step() or reset() in a loop over `agent_iter`"
        wrapper._has_updated = False
        return wrapper.env.agent_selection


def check_option_keys(env: Any, options: Iterable[Mapping[str, Any] | None], where: str) -> None:
    """Refuse reset options with a key ``env`` does not read (``ValueError`` naming ``where``, the key and the keys
    the env reads); an env whose :attr:`TextEnv.reset_options` is None (or that is not a ``TextEnv``) is not checked."""
    unwrapped = getattr(env, "unwrapped", env)
    declared = getattr(unwrapped, "reset_options", None)
    if declared is None:
        return
    seen: set[int] = set()
    for option in options:
        if option is None or id(option) in seen:
            continue
        seen.add(id(option))
        unknown = sorted(str(k) for k in option if k not in declared)
        if unknown:
            name = unwrapped.metadata.get("name", type(unwrapped).__name__)
            raise ValueError(f"{where}: {name} reads the reset options {list(declared)}, and {dict(option)!r:.200} "
                             f"also has {unknown}, which it would ignore; fix or drop them")
