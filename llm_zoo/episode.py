"""Episode records: who saw what, who wrote which tokens, every reward and the facts behind it.

An :class:`Episode` is what :func:`llm_zoo.trainers.rollout.collect` returns for one env episode,
and what the trainer, the evaluators and the SFT export read. It holds the episode's setup (env id,
env kwargs, seed, options), the role and the policy of each agent, every :class:`Turn` in order,
the per-agent returns, the final ``infos`` of every agent, and whether the episode failed.

Hidden information stays hidden: a :class:`Turn` holds only the observation of the agent who
acted, exactly as the env showed it, so an agent's turns never hold what only its opponent saw.

Canonical form
--------------
Records are stored in JSON's own types, so that a record read back from JSONL is ``==`` to the
one written: observations, options, kwargs and infos become dicts with ``str`` keys, lists (never
tuples), ``str``, ``int``, ``float``, ``bool`` and ``None``. The conversion happens when a record
is built (``__post_init__``), so an env's tuple of messages is a list in the record. Values that
JSON cannot hold are converted on the way in: numpy scalars and arrays to numbers and lists, enums
to their values, sets to sorted lists, keys that are not strings to their JSON text (``1`` ->
``"1"``), and anything else to its ``str`` (lossy; keep env infos JSON-friendly to avoid it). Floats survive exactly: ``json`` writes the shortest ``repr`` that
reads back to the same float.

JSONL
-----
:func:`write_jsonl` writes one episode per line and :func:`read_jsonl` reads them back; a path
ending in ``.gz`` is gzip-compressed. Each line also carries the derived ``prompt_tokens`` and
``completion_tokens`` for readers such as ``jq``; loading recomputes them from the turns.

Loading is strict, since a file may come from anywhere: :meth:`Episode.from_dict` checks a record
against a JSON Schema (:data:`RECORD_SCHEMA`) with JSON's own types and no conversion, so
``"failed": "false"`` is not a bool, a step of ``2.7`` (or ``2.0``) is not an int, nor is a token
id of ``1.9``, and a number must be finite (``NaN`` and ``Infinity`` are refused anywhere in a line).
Whatever is wrong with a file (malformed JSON, a record of the wrong shape, nesting too deep, bytes
that are not UTF-8, a truncated gzip stream) is one :class:`EpisodeFormatError` naming the file and
line, never an error from deep inside a parser.

Writes are atomic: the lines go to a temporary file in the same folder, which is flushed, synced
to disk and then renamed over ``path`` (``os.replace``), so a reader or a crash mid-write sees the
old file or the new one, never a part (an interrupted write may leave its ``.<name>.*.tmp``
behind). An append copies the old file into the new one first.

Every Python ``str`` round-trips exactly, lone surrogates included (``"\udc80"``: byte-level
tokenizers decode invalid UTF-8 to such code points). The encoding: JSON as ``json.dumps`` writes
it with ``ensure_ascii=False``, encoded as UTF-8 with Python's ``surrogatepass`` error handler, so
each surrogate code point becomes its own three-byte sequence (``ED A0 80``-``ED BF BF``) and reads
back with the same handler. A text without surrogates, nearly every one, is plain UTF-8; a line
with one is not valid UTF-8 for strict readers (``jq`` shows U+FFFD there). The other candidates
lose data: strict UTF-8 cannot encode a surrogate at all (``write_jsonl`` used to raise, leaving an
empty file), and JSON's ``\\uXXXX`` escapes (``ensure_ascii=True``) are UTF-16, so ``json.loads``
joins an escaped high and low surrogate into one character: the two code points
``"\ud83d\ude00"`` would come back as the one ``"\U0001f600"``. Read these files with
:func:`read_jsonl`, or open them with ``errors="surrogatepass"``.

Chat export for SFT
-------------------
:meth:`Episode.to_chat` turns an episode into chat-format records (``{"messages": [...], ...}``,
the format of TRL's ``SFTTrainer`` and of chat templates), one per turn or one per agent's
conversation; :func:`export_chat_jsonl` writes them for many episodes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import gzip
import io
import json
import math
import operator
import os
import secrets
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

__all__ = ["RECORD_SCHEMA", "Episode", "EpisodeFormatError", "Turn", "atomic_writer", "export_chat_jsonl", "jsonable",
           "read_jsonl", "write_jsonl"]

_DERIVED_KEYS = ("prompt_tokens", "completion_tokens")


class EpisodeFormatError(ValueError):
    """A record or file that is not an episode as :func:`write_jsonl` writes it; the message says where and why."""


_IDS = {"type": ["array", "null"]}  # the items are checked by _check_numbers: a schema per token id costs 15 us
_MESSAGES = {"type": "array", "items": {"type": "object", "required": ["role"], "properties": {
    "role": {"type": "string"}, "content": {"type": ["string", "null"]}}}}
"""An observation's chat transcript, which ``to_chat`` and the SFT export read: role and content are text."""
_TURN_SCHEMA = {
    "type": "object",
    "properties": {"agent": {"type": "string"}, "role": {"type": "string"}, "step": {"type": "integer", "minimum": 0},
                   "observation": {"type": "object", "properties": {"messages": _MESSAGES}}, "reply": {"type": "string"},
                   "prompt_ids": _IDS,
                   "completion_ids": _IDS, "logprobs": _IDS,
                   "policy": {"type": ["string", "null"]}, "reward": {"type": "number"}},
}
RECORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "env_id": {"type": "string"}, "env_kwargs": {"type": "object"}, "seed": {"type": ["integer", "null"]},
        "options": {"type": ["object", "null"]},
        "roles": {"type": "object", "additionalProperties": {"type": "string"}},
        "policies": {"type": "object", "additionalProperties": {"type": "string"}},
        "turns": {"type": "array", "items": _TURN_SCHEMA},
        "returns": {"type": "object", "additionalProperties": {"type": "number"}},
        "infos": {"type": "object", "additionalProperties": {"type": "object"}},
        "failed": {"type": "boolean"}, "error": {"type": ["string", "null"]}, "wall_time": {"type": "number"},
        "prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"},
    },
}
"""The JSON Schema of one JSONL line (keys are checked separately, with a message listing them): JSON's own
types, where ``integer`` is an int written without a fraction and ``number`` is finite."""


def _finite(checker: Any, value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


@functools.cache
def _validator() -> Any:
    import jsonschema

    base = jsonschema.Draft202012Validator
    strict = base.TYPE_CHECKER.redefine_many({"integer": lambda checker, value: type(value) is int,
                                              "number": _finite})
    return jsonschema.validators.extend(base, type_checker=strict)(RECORD_SCHEMA)


def _check_record(data: Mapping[str, Any]) -> None:
    """Raise ``EpisodeFormatError`` naming the first place where ``data`` breaks :data:`RECORD_SCHEMA`.

    jsonschema costs about 0.4 ms a turn whose observation holds 6 messages (2.7 ms for a 6-turn
    episode; checked id by id, its 300-token prompts took 28 ms), so the token id and log-prob lists
    are checked here in Python instead.
    """
    error = next(iter(_validator().iter_errors(data)), None)
    if error is not None:
        where = error.json_path.replace("$", "episode", 1)
        raise EpisodeFormatError(f"{where}: {error.message[:200]} (expected {error.validator} {error.validator_value!r:.80}); "
                                 f"records are read as written, nothing is converted")
    for i, turn in enumerate(data.get("turns", ())):
        for key in ("prompt_ids", "completion_ids", "logprobs"):
            values = turn.get(key)
            if values is None:
                continue
            whole = key != "logprobs"
            if operator.countOf(map(type, values), int) != len(values) and (  # token ids: exact ints, >= 0
                    whole or not all(type(v) in (int, float) and math.isfinite(v) for v in values)):
                bad = next(v for v in values if type(v) is not int and (whole or not _finite(None, v)))
                raise EpisodeFormatError(f"episode.turns[{i}].{key}: {bad!r:.40} is not {'an int' if whole else 'a finite number'}; "
                                         f"records are read as written, nothing is converted")
            if whole and values and min(values) < 0:
                raise EpisodeFormatError(f"episode.turns[{i}].{key}: {min(values)} is not a token id (ids are >= 0)")


_PLAIN = frozenset({str, bool, int, float, type(None)})
"""Types that are already canonical: ``jsonable`` returns their values as they are."""


def jsonable(value: Any) -> Any:
    """Return ``value`` in canonical JSON form (see the module docstring); containers are copied."""
    kind = type(value)
    # exact built-in types first: observations are mostly dicts, tuples and plain str, and a
    # collector converts one per turn, so the ABC checks below are kept for the rare cases;
    # plain leaves are kept inside the comprehensions, saving a call for each
    if kind in _PLAIN:
        return value
    if kind is dict:
        return {
            k if type(k) is str else _key(k): v if type(v) in _PLAIN else jsonable(v)
            for k, v in value.items()
        }
    if kind is tuple or kind is list:
        return [v if type(v) in _PLAIN else jsonable(v) for v in value]
    if isinstance(value, enum.Enum):  # before str and int: StrEnum and IntEnum members are both
        return jsonable(value.value)
    if isinstance(value, str):
        return str.__str__(value)  # a Reply or another str subclass becomes a plain str
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {_key(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((jsonable(v) for v in value), key=repr)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if hasattr(value, "tolist"):  # numpy arrays and scalars, torch tensors
        return jsonable(value.tolist())
    return str(value)


def _as_dict(value: Any) -> dict[Any, Any]:
    """Return ``value`` ready for ``jsonable``: a dict as it is (``jsonable`` copies it), else ``dict(value)``."""
    return value if type(value) is dict else dict(value)


def _key(key: Any) -> str:
    """Return a mapping key as a ``str``: other keys become their JSON text (``1`` -> ``"1"``)."""
    key = jsonable(key)
    return key if isinstance(key, str) else json.dumps(key)


def _int_list(values: Sequence[Any] | None) -> list[int] | None:
    """Return ``values`` as a new list of ``int``s (None stays None)."""
    if values is None:
        return None
    if type(values) is list and operator.countOf(map(type, values), int) == len(values):
        # already clean, as token ids from a Reply or a tokenizer are: checking and copying costs
        # 40% of converting (counting the exact types is a quarter faster than a set of them)
        return values.copy()
    return list(map(int, values))


int_list = _int_list  # public for llm_zoo.policy (Reply checks its token ids the same way)


def _float_list(values: Sequence[Any] | None) -> list[float] | None:
    return None if values is None else list(map(float, values))


@dataclass
class Turn:
    """One reply of one agent: what it was shown, what it wrote, and what it got for it.

    Attributes:
        agent: The agent who acted (``"player_0"``).
        role: Its role (``"player"``), from the env's ``role_of``.
        step: How many ``env.step`` calls came before this one in the episode (dead-agent steps
            included), so turns sort by it and gaps show where agents were removed.
        observation: Exactly what the agent was shown: its observation dict (``"messages"`` plus
            env-specific keys such as ``"legal_actions"`` and ``"info_set"``), in canonical form.
        reply: The reply text as the policy wrote it (the env may truncate what it reads).
        prompt_ids: Token ids of the prompt the reply was sampled from; None for model-free policies.
        completion_ids: Token ids of the reply; None for model-free policies.
        logprobs: Sampling log-probability of each completion token; None for model-free policies.
        policy: Name of the policy that wrote the reply.
        reward: The reward the agent received from this turn until its next turn (or the end of
            the episode): the ``env.last()`` reward it was handed next.
    """

    agent: str
    role: str
    step: int
    observation: dict[str, Any]
    reply: str
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    policy: str | None = None
    reward: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.observation, Mapping):
            raise TypeError(
                f"Turn.observation must be the agent's observation dict ({{'messages': ...}}), "
                f"got {type(self.observation).__name__}: {repr(self.observation)[:200]}."
            )
        self.agent, self.role, self.reply = str(self.agent), str(self.role), str.__str__(str(self.reply))
        self.step, self.reward = int(self.step), float(self.reward)
        self.observation = jsonable(self.observation)
        self.prompt_ids = _int_list(self.prompt_ids)
        self.completion_ids = _int_list(self.completion_ids)
        self.logprobs = _float_list(self.logprobs)
        self.policy = None if self.policy is None else str(self.policy)

    @classmethod
    def unchecked(
        cls,
        agent: str,
        role: str,
        step: int,
        observation: dict[str, Any],
        reply: str,
        prompt_ids: list[int] | None,
        completion_ids: list[int] | None,
        logprobs: list[float] | None,
        policy: str,
    ) -> Turn:
        """Create a turn that owns the given records as they are, without the type checks of ``Turn(...)``.

        The caller guarantees what ``Turn(...)`` would otherwise check: the ids are lists of ``int``
        and the log-probs a list of ``float`` (or None), new lists held nowhere else (the turn keeps
        them), and ``observation`` is a ``dict``; it is still put in canonical form. The collector
        calls this with a :class:`~llm_zoo.policy.Reply`'s records, copied: checking every prompt
        token's type, then building the dataclass through its keyword ``__init__``, costs about
        1.5 us a turn, 1% of a turn of the Kuhn main job's rollout at batch 64. Given such
        arguments, the result equals ``Turn(...)`` with the same arguments (tested); given anything
        else, use that.
        """
        self = cls.__new__(cls)
        self.agent, self.role, self.step, self.reply = str(agent), str(role), int(step), str.__str__(reply)
        self.observation = jsonable(observation)
        self.prompt_ids, self.completion_ids, self.logprobs = prompt_ids, completion_ids, logprobs
        self.policy, self.reward = str(policy), 0.0
        return self

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat transcript the agent was shown (``observation["messages"]``)."""
        return self.observation.get("messages", [])


@dataclass
class Episode:
    """The record of one env episode; see the module docstring.

    Attributes:
        env_id: Versioned env name (``"kuhn_poker_v0"``).
        env_kwargs: Keyword arguments the env was built with, as far as the collector knew them.
        seed: The seed passed to ``reset``.
        options: The options passed to ``reset``.
        roles: Agent -> role, for every agent of the episode.
        policies: Agent -> name of the policy that served it.
        turns: Every reply, in the order they were made.
        returns: Agent -> sum of the rewards it received over the episode.
        infos: Agent -> its final ``infos`` entry (payoffs, forfeits, cards, ...).
        failed: True when the episode did not finish normally (an env or policy raised, or the
            collector's step cap was hit); ``turns``, ``returns`` and ``infos`` hold what happened
            until then.
        error: What went wrong: when ``failed``, the traceback text or a sentence; on an episode
            that finished, a problem after its end that spoilt nothing in it (its env's
            ``close()`` raised); else None.
        wall_time: Seconds from ``reset`` to the last step. With many envs run side by side it
            includes time spent on the other envs of the batch. Not compared by ``==``, so
            episodes replayed under the same seed are equal.
    """

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    options: dict[str, Any] | None = None
    roles: dict[str, str] = field(default_factory=dict)
    policies: dict[str, str] = field(default_factory=dict)
    turns: list[Turn] = field(default_factory=list)
    returns: dict[str, float] = field(default_factory=dict)
    infos: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: bool = False
    error: str | None = None
    wall_time: float = field(default=0.0, compare=False)

    def __post_init__(self) -> None:
        self.env_id = str(self.env_id)
        self.env_kwargs = jsonable(_as_dict(self.env_kwargs))
        self.seed = None if self.seed is None else int(self.seed)
        self.options = None if self.options is None else jsonable(_as_dict(self.options))
        self.roles = {str(a): str(r) for a, r in self.roles.items()}
        self.policies = {str(a): str(p) for a, p in self.policies.items()}
        self.turns = list(self.turns)
        for i, turn in enumerate(self.turns):
            if not isinstance(turn, Turn):
                raise TypeError(f"Episode.turns[{i}] must be a Turn, got {type(turn).__name__}.")
        self.returns = {str(a): float(r) for a, r in self.returns.items()}
        self.infos = {str(a): jsonable(_as_dict(i)) for a, i in self.infos.items()}
        self.failed = bool(self.failed)
        self.error = None if self.error is None else str(self.error)
        self.wall_time = float(self.wall_time)

    # ---- derived facts ----------------------------------------------------------------------

    @property
    def agents(self) -> list[str]:
        """The episode's agents, in the env's order."""
        return list(self.roles)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens over all turns (0 for model-free policies)."""
        return sum(len(t.prompt_ids) for t in self.turns if t.prompt_ids is not None)

    @property
    def completion_tokens(self) -> int:
        """Generated tokens over all turns (0 for model-free policies)."""
        return sum(len(t.completion_ids) for t in self.turns if t.completion_ids is not None)

    def turns_of(self, agent: str) -> list[Turn]:
        """Return the turns of ``agent``, in order."""
        return [t for t in self.turns if t.agent == agent]

    # ---- JSON -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Return the record as a JSON-ready dict (with the derived token counts)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "turns"}
        out["turns"] = [dataclasses.asdict(t) for t in self.turns]
        out["prompt_tokens"] = self.prompt_tokens
        out["completion_tokens"] = self.completion_tokens
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Episode:
        """Rebuild an episode from :meth:`to_dict`'s output; raise ``ValueError`` on unknown or missing keys."""
        if not isinstance(data, Mapping):
            raise TypeError(f"Episode.from_dict expects a dict, got {type(data).__name__}: {repr(data)[:200]}.")
        _check_keys(cls, {k: v for k, v in data.items() if k not in _DERIVED_KEYS}, "episode")
        turns = data.get("turns", [])
        for i, turn in enumerate(turns if isinstance(turns, list) else ()):
            if not isinstance(turn, Mapping):
                raise EpisodeFormatError(f"episode turn {i} must be an object, got {type(turn).__name__}.")
            _check_keys(Turn, turn, f"turn {i}")
        _check_record(data)
        data = {k: v for k, v in data.items() if k not in _DERIVED_KEYS}
        return cls(**{**data, "turns": [Turn(**turn) for turn in turns]})

    def to_json(self) -> str:
        """Return the record as one line of JSON (lone surrogates stay raw: write it as :func:`write_jsonl` does).

        Raises:
            ValueError: the record holds NaN or an infinity (JSON has none, and :meth:`from_json` refuses
                them); the message names the field.
        """
        data = self.to_dict()
        bad = _non_finite(data)
        if bad is not None:
            raise ValueError(f"episode.{bad[0]} is {bad[1]!r}; records hold finite numbers only (JSON has no NaN or "
                             "infinity), so set it to a finite number before writing")
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Episode:
        """Rebuild an episode from :meth:`to_json`'s output; ``from_json(e.to_json()) == e``.

        Raises:
            EpisodeFormatError: ``text`` is not one JSON object of an episode record (see the module
                docstring); NaN and infinities are refused.
        """
        try:
            data = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
        except RecursionError:
            raise EpisodeFormatError("nested deeper than JSON is read here (Python's recursion limit)") from None
        except ValueError as exc:
            raise EpisodeFormatError(f"not JSON: {exc}") from None
        return cls.from_dict(data)

    # ---- chat export ------------------------------------------------------------------------

    def to_chat(
        self,
        per: Literal["turn", "conversation"] = "turn",
        agents: Iterable[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Export the episode as chat-format records for supervised fine-tuning.

        Every record has ``"messages"`` (a list of ``{"role", "content"}`` dicts ending with the
        assistant reply to learn) and the facts to filter on: ``agent``, ``role``, ``policy``,
        ``reward``, ``return`` (the agent's episode return), ``env_id``, ``seed``.

        Args:
            per: ``"turn"``: one record per turn, whose messages are what the agent was shown plus
                its reply, with the turn's ``reward`` and ``step``. ``"conversation"``: one record
                per agent, its final transcript: the messages of its last observation plus its last
                reply, with ``reward`` equal to its return and ``turns`` its number of turns. Envs
                show an agent its own earlier replies as assistant messages, so that transcript
                holds all of them (as the env showed them, after any truncation).
            agents: Export only these agents; None exports all.
        """
        if per not in ("turn", "conversation"):
            raise ValueError(f"to_chat: per must be 'turn' or 'conversation', got {per!r}.")
        wanted = None if agents is None else {agents} if isinstance(agents, str) else set(agents)
        if wanted is not None and not wanted <= set(self.roles):
            raise ValueError(
                f"to_chat: unknown agents {sorted(wanted - set(self.roles))}; this episode has {self.agents}."
            )
        common = {"env_id": self.env_id, "seed": self.seed}
        if per == "turn":
            return [
                {
                    "messages": _chat(t),
                    "agent": t.agent,
                    "role": t.role,
                    "policy": t.policy,
                    "reward": t.reward,
                    "return": self.returns.get(t.agent, 0.0),
                    "step": t.step,
                    **common,
                }
                for t in self.turns
                if wanted is None or t.agent in wanted
            ]
        records = []
        for agent in self.agents:
            turns = self.turns_of(agent)
            if not turns or (wanted is not None and agent not in wanted):
                continue
            last = turns[-1]
            records.append({
                "messages": _chat(last),
                "agent": agent,
                "role": last.role,
                "policy": last.policy,
                "reward": self.returns.get(agent, 0.0),
                "return": self.returns.get(agent, 0.0),
                "turns": len(turns),
                **common,
            })
        return records


def _non_finite(value: Any, where: str = "") -> tuple[str, float] | None:
    """Return (path, value) of the first NaN or infinity in plain data, else None."""
    todo = [(where, value)]
    while todo:
        path, item = todo.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path.lstrip("."), item
        if isinstance(item, dict):
            todo.extend((f"{path}.{key}", v) for key, v in reversed(list(item.items())))
        elif isinstance(item, (list, tuple)):
            todo.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(item))))
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number; records hold finite numbers only")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # json keeps the last of a repeated key silently; a record never repeats one
        seen = [k for i, (k, _) in enumerate(pairs) if k in (p for p, _ in pairs[:i])]
        raise ValueError(f"key {seen[0]!r:.80} appears twice in one object")
    return out


def _chat(turn: Turn) -> list[dict[str, Any]]:
    return [dict(m) for m in turn.messages] + [{"role": "assistant", "content": turn.reply}]


def _check_keys(cls: type, data: Mapping[str, Any], what: str) -> None:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    required = [n for n, f in fields.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in data]
    if unknown or missing:
        raise EpisodeFormatError(
            f"{what} does not match the {cls.__name__} record: unknown keys {unknown}, missing keys {missing}; "
            f"expected keys {sorted(fields)}. Was it written by another version of llm_zoo?"
        )


# ---- files ------------------------------------------------------------------------------------

_ERRORS = "surrogatepass"
"""The UTF-8 error handler of every file here: lone surrogates as their own bytes (module docstring)."""


def _open(path: str | os.PathLike[str], mode: str) -> IO[str]:
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="utf-8", errors=_ERRORS)
    return open(path, mode, encoding="utf-8", errors=_ERRORS)


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str], *, append: bool = False) -> Iterator[IO[str]]:
    """Open ``path`` for writing text so that it changes all at once or not at all.

    Yields a text file on a temporary file in the same folder (UTF-8 with ``surrogatepass``, gzip
    when ``path`` ends in ``.gz``). When the block ends normally the file is flushed, synced to disk
    and renamed over ``path``; when it raises, the temporary file is removed and ``path`` is as it
    was. With ``append`` the new file starts with a copy of the old one's bytes (gzip members
    concatenate, which gzip readers read as one stream). The new file keeps the old one's
    permissions, or gets the usual ones (``0o666`` less the umask) when there was none.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with open(fd, "wb") as raw:
            with contextlib.suppress(FileNotFoundError):
                os.chmod(tmp, os.stat(path).st_mode & 0o7777)
                if append:
                    with open(path, "rb") as old:
                        while chunk := old.read(1 << 20):
                            raw.write(chunk)
            packed: IO[bytes] = gzip.GzipFile(filename=path.stem, mode="wb", fileobj=raw) \
                if path.suffix == ".gz" else raw
            text = io.TextIOWrapper(packed, encoding="utf-8", errors=_ERRORS, newline="\n", write_through=False)
            yield text
            text.flush()
            text.detach()
            if packed is not raw:
                packed.close()  # writes the gzip trailer; the raw file stays open
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable, where the OS allows it
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_jsonl(path: str | os.PathLike[str], episodes: Iterable[Episode], *, append: bool = False) -> int:
    """Write episodes to ``path``, one JSON object per line (gzip when it ends in ``.gz``); return the count.

    The write is atomic and lossless for every ``str`` (see the module docstring): if anything
    raises before the end (a bad item, the iterable itself, a full disk), ``path`` keeps its old
    content. A number that :func:`read_jsonl` would refuse (NaN, an infinity) is refused here, with a
    ``ValueError`` naming the item and field, so what is written reads back.

    Args:
        path: File to write; its folder must exist.
        episodes: The records to write.
        append: Add to the end of the file instead of replacing it.
    """
    count = 0
    with atomic_writer(path, append=append) as f:
        for i, episode in enumerate(episodes):
            if not isinstance(episode, Episode):
                raise TypeError(f"write_jsonl: item {i} is a {type(episode).__name__}, expected an Episode.")
            try:
                line = episode.to_json()
            except ValueError as exc:  # NaN or an infinity, which read_jsonl would refuse
                raise ValueError(f"write_jsonl: item {i}: {exc}; {os.fspath(path)} keeps its old content") from None
            f.write(line + "\n")
            count += 1
    return count


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Episode]:
    """Read episodes from ``path`` one at a time; blank lines are skipped.

    Raises:
        EpisodeFormatError: A line is not an episode record, or the file cannot be read as UTF-8
            JSONL (gzip when ``path`` ends in ``.gz``); the message names ``path`` and the line.
    """
    name, number = os.fspath(path), 0
    if Path(path).exists() and not Path(path).is_file():  # a FIFO would block, a device never end
        raise EpisodeFormatError(f"{name}: not a regular file; episode files are JSONL as write_jsonl writes them")
    with contextlib.ExitStack() as stack:
        try:
            f: IO[bytes] = stack.enter_context(gzip.open(path, "rb") if Path(path).suffix == ".gz" else open(path, "rb"))
            for number, raw in enumerate(f, start=1):
                line = raw.decode("utf-8", errors=_ERRORS)
                if not line.strip():
                    continue
                try:
                    episode = Episode.from_json(line)
                except (ValueError, TypeError, AttributeError, RecursionError) as exc:
                    raise EpisodeFormatError(f"{name}:{number}: not an episode record: {exc}") from None
                yield episode
        except UnicodeDecodeError as exc:
            raise EpisodeFormatError(f"{name}:{number}: not UTF-8 ({exc.reason} at byte {exc.start}); episode files "
                                     f"are UTF-8 JSONL as write_jsonl writes them") from None
        except (EOFError, OSError, zlib.error) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise EpisodeFormatError(f"{name}:{number + 1}: unreadable ({type(exc).__name__}: {exc}); the file is "
                                     f"truncated or not what write_jsonl writes") from None


def read_jsonl(path: str | os.PathLike[str]) -> list[Episode]:
    """Read every episode of a file written by :func:`write_jsonl`."""
    return list(iter_jsonl(path))


def export_chat_jsonl(
    path: str | os.PathLike[str],
    episodes: Iterable[Episode],
    *,
    per: Literal["turn", "conversation"] = "turn",
    agents: Iterable[str] | None = None,
    include_failed: bool = False,
) -> int:
    """Write the chat records of :meth:`Episode.to_chat` for many episodes, one per line; return the count.

    Args:
        path: File to write (gzip when it ends in ``.gz``), atomically and losslessly as
            :func:`write_jsonl` does.
        episodes: Episodes to export.
        per: ``"turn"`` or ``"conversation"``; see :meth:`Episode.to_chat`.
        agents: Export only these agents (an agent missing from an episode is skipped there).
        include_failed: Also export episodes that failed; by default they are left out.
    """
    wanted = None if agents is None else [agents] if isinstance(agents, str) else list(agents)
    count = 0
    with atomic_writer(path) as f:
        for episode in episodes:
            if episode.failed and not include_failed:
                continue
            mine = None if wanted is None else [a for a in wanted if a in episode.roles]
            for record in episode.to_chat(per, mine):
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
    return count
