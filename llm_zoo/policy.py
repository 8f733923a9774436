"""The policy contract: who acts, what it is shown, what it writes, and the policies that need no model.

This module is the bottom layer's contract, as PettingZoo's ``AECEnv`` is: every env's scripted players
implement :class:`Policy` (Kuhn's and Leduc's as a :class:`TabularPolicy`), the model-backed policies
(:mod:`llm_zoo.policies`) implement it too, and the envs' own evaluators read a model-backed policy
through :class:`ScoresTokens` alone, never through its class.

A policy maps a batch of observations to a batch of replies. An observation is what an llm_zoo env
hands to the agent whose turn it is: a mapping whose ``"messages"`` entry is a tuple of
``{"role", "content"}`` dicts, plus env-specific keys such as Kuhn poker's ``"legal_actions"``.
A reply is a :class:`Reply`, which is a ``str`` and so goes straight to ``env.step``; model-backed
policies also attach what the trainer needs (prompt and completion token ids, sampling log-probs).

This module imports neither torch nor transformers; the model-backed policies live in their own
modules and are loaded lazily by :mod:`llm_zoo.policies`, which re-exports the names here.
"""

from __future__ import annotations

import random
import string
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from llm_zoo.episode import int_list

if sys.version_info >= (3, 12):
    from typing import override
else:  # typing_extensions comes with gymnasium, a core dependency
    from typing_extensions import override

__all__ = ["FunctionPolicy", "Observation", "Policy", "PromptTooLong", "RandomPolicy", "Reply", "ScoresTokens",
           "SeededPolicy", "TabularPolicy", "require_scores_tokens"]

Observation = Mapping[str, Any]
"""An env observation: ``{"messages": (...), ...}``."""

_REPR_TEXT_CHARS = 60


class PromptTooLong(ValueError):  # noqa: N818 - names the situation, as rollout's _TooLong does
    """Some observations of a batch encode to prompts longer than the policy takes (its ``max_prompt_tokens``).

    ``rows`` are their indices in the batch: :func:`llm_zoo.trainers.rollout.collect` ends those
    episodes (failed, with this message) and plays the rest of the batch on.
    """

    def __init__(self, message: str, rows: Sequence[int]) -> None:
        super().__init__(message)
        self.rows = tuple(rows)

    @classmethod
    def check(cls, name: str, prompts: Sequence[Sequence[int]], limit: int | None) -> None:
        """Raise for the prompts longer than ``limit`` tokens (``None``: no limit), naming their rows.

        The one check every model-backed policy runs on its encoded prompts before generating, so the
        cap holds whichever engine samples (transformers or vLLM).
        """
        if limit is None:
            return
        too_long = [i for i, p in enumerate(prompts) if len(p) > limit]
        if too_long:
            raise cls(f"{name}: the prompt of observation(s) {too_long[:10]} is {len(prompts[too_long[0]])} tokens, "
                      f"over max_prompt_tokens={limit}; raise max_prompt_tokens (config field max_prompt_tokens, "
                      "within memory_limit_gb) or shorten the env's prompts (fewer turns).", too_long)


class Reply(str):
    """A policy's reply: the text itself, plus optional per-reply training records.

    ``Reply`` subclasses ``str``, so it compares, hashes and is accepted everywhere as its text, and
    an env sees only that text. The records ride along as attributes; string methods (``strip``,
    slicing, ...) return plain ``str`` and drop them.

    Attributes:
        prompt_ids: Token ids of the prompt the reply was sampled from, without padding.
        completion_ids: Token ids of the completion, including the end-of-turn token when one was
            generated.
        logprobs: Sampling log-probability of each completion token, ``len(completion_ids)`` long.
        policy: Name of the policy that wrote the reply.

    The ids are kept as lists of ``int`` and the log-probs as a list of ``float`` (the constructor
    converts what it is given), and the collector copies them into its records as they are: assign
    only such lists to a reply's attributes.
    """

    prompt_ids: list[int] | None
    completion_ids: list[int] | None
    logprobs: list[float] | None
    policy: str | None

    def __new__(
        cls,
        text: str,
        *,
        prompt_ids: Sequence[int] | None = None,
        completion_ids: Sequence[int] | None = None,
        logprobs: Sequence[float] | None = None,
        policy: str | None = None,
    ) -> Reply:
        """Create a reply; raise ``TypeError``/``ValueError`` on inconsistent records."""
        if not isinstance(text, str):
            raise TypeError(f"Reply text must be a str, got {type(text).__name__}: {_clip(repr(text))}.")
        if logprobs is not None and completion_ids is None:
            raise ValueError(
                "Reply got logprobs but no completion_ids; pass the tokens the log-probs belong to."
            )
        if logprobs is not None and completion_ids is not None and len(logprobs) != len(completion_ids):
            raise ValueError(
                f"Reply needs one log-prob per completion token: got {len(logprobs)} logprobs for "
                f"{len(completion_ids)} completion_ids."
            )
        self = super().__new__(cls, text)
        self.prompt_ids = int_list(prompt_ids)
        self.completion_ids = int_list(completion_ids)
        self.logprobs = None if logprobs is None else [float(x) for x in logprobs]
        self.policy = policy
        return self

    @classmethod
    def unchecked(
        cls,
        text: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        logprobs: list[float],
        policy: str | None,
    ) -> Reply:
        """Create a reply that owns the given lists as they are, without the checks and copies of ``Reply(...)``.

        The caller guarantees what ``Reply(...)`` would otherwise check: ``text`` is a ``str``, the
        ids are lists of ``int`` and the log-probs a list of ``float``, one per completion token, all
        new lists held nowhere else (the reply keeps them, so a later change to one would change the
        reply). A model-backed policy that built each record itself calls this: the checks cost about
        2 us a reply (a type test per prompt token, then a copy), 2% of a turn of a one-token rollout
        at batch 64. Given such arguments, the result equals ``Reply(text, prompt_ids=...,
        completion_ids=..., logprobs=..., policy=...)`` (tested); given anything else, use that.
        """
        self = str.__new__(cls, text)
        self.prompt_ids = prompt_ids
        self.completion_ids = completion_ids
        self.logprobs = logprobs
        self.policy = policy
        return self

    @property
    def text(self) -> str:
        """The reply as a plain ``str``."""
        return str.__str__(self)

    def __reduce__(self) -> tuple[Any, ...]:
        # str's default reduction would rebuild a bare Reply through __new__ and then restore the
        # attributes as instance state; spelling it out keeps pickle, copy and deepcopy one path.
        return (_rebuild_reply, (self.text, dict(self.__dict__)))

    def __repr__(self) -> str:
        parts = [_clip(repr(self.text), _REPR_TEXT_CHARS)]
        if self.policy is not None:
            parts.append(f"policy={self.policy!r}")
        if self.prompt_ids is not None:
            parts.append(f"prompt_ids=<{len(self.prompt_ids)} tokens>")
        if self.completion_ids is not None:
            parts.append(f"completion_ids=<{len(self.completion_ids)} tokens>")
        if self.logprobs is not None:
            parts.append(f"logprob={sum(self.logprobs):.4g}")
        return f"Reply({', '.join(parts)})"


def _rebuild_reply(text: str, records: dict[str, Any]) -> Reply:
    """Rebuild a pickled :class:`Reply` from its text and attributes."""
    reply = Reply(text)
    reply.__dict__.update(records)
    return reply


class Policy(ABC):
    """Maps a batch of observations to a batch of replies.

    Contract for :meth:`act`:

    - It takes a sequence of observations (each a mapping with ``"messages"``) and returns a list of
      :class:`Reply`, one per observation, in the same order, so ``len(out) == len(observations)``.
      Replies are independent: no reply is written from another observation in the batch.
    - It may raise ``TypeError``/``ValueError`` on malformed input (not a sequence of mappings, a
      missing key it needs), with a message that names the offending observation; a raise means the
      whole batch failed and no reply was produced.
    - All randomness comes from the policy's own RNG, set by :meth:`seed`; global random state is
      left alone.

    Attributes:
        name: Shown in ``Reply.policy`` and in logs.
    """

    name: str = "policy"
    remote_ok: bool = False
    """Whether the policy may act in another process (a Ray actor beside the envs): True only for a policy whose
    whole state is plain Python that pickles (a table, a scripted player), never for one holding a model."""

    # ---- override these -------------------------------------------------------------------

    @abstractmethod
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        """Reply to each observation, in order; see the class docstring for the contract."""

    def seed(self, seed: int | None) -> None:  # noqa: B027 (a no-op default: deterministic policies have no RNG)
        """Reseed the policy's RNG; ``None`` draws fresh entropy. Policies without randomness ignore it."""

    # ---- the base owns everything below -------------------------------------------------

    def __call__(self, observation: Observation) -> Reply:
        """Reply to a single observation: ``act([observation])[0]``."""
        replies = self.act([observation])
        if len(replies) != 1:
            raise RuntimeError(
                f"{type(self).__name__}.act returned {len(replies)} replies for 1 observation; "
                "act must return exactly one reply per observation."
            )
        return replies[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    @staticmethod
    def check_batch(observations: Sequence[Observation], *, key: str | None = None) -> None:
        """Raise ``TypeError`` unless ``observations`` is a sequence of mappings (each holding ``key``)."""
        if isinstance(observations, Mapping) or isinstance(observations, (str, bytes)):
            raise TypeError(
                f"act() takes a sequence of observations, got a single {type(observations).__name__}; "
                "call policy(observation) or policy.act([observation])."
            )
        if not isinstance(observations, Sequence):
            raise TypeError(
                f"act() takes a sequence (list or tuple) of observations, got {type(observations).__name__}."
            )
        for i, obs in enumerate(observations):
            if not isinstance(obs, Mapping):
                raise TypeError(
                    f"observation {i} should be a mapping such as {{'messages': (...)}}, "
                    f"got {type(obs).__name__}: {_clip(repr(obs))}."
                )
            if key is not None and key not in obs:
                raise ValueError(
                    f"observation {i} has no {key!r} key (keys: {sorted(map(str, obs))}); "
                    f"this policy needs the env's {key!r}."
                )


class SeededPolicy(Policy):
    """A policy whose randomness is one private ``random.Random``, reseeded by :meth:`seed`.

    Subclasses call ``super().__init__(seed)`` and draw from ``self._rng``.
    """

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)

    @override
    def seed(self, seed: int | None) -> None:
        self._rng.seed(seed)


class RandomPolicy(SeededPolicy):
    """Replies at random: a uniform pick from ``obs["legal_actions"]`` when the env offers them,
    otherwise random printable text of 0 to ``max_chars`` characters.

    Args:
        seed: Seed of the policy's own ``random.Random``; ``None`` draws fresh entropy.
        max_chars: Longest free-text reply.
        name: Shown in ``Reply.policy``.
    """

    remote_ok = True  # plain Python state, no model: it may act in a Ray actor beside the envs

    _ALPHABET = string.ascii_letters + string.digits + string.punctuation + " "

    def __init__(self, seed: int | None = None, max_chars: int = 32, *, name: str = "random") -> None:
        if max_chars < 0:
            raise ValueError(f"RandomPolicy needs max_chars >= 0, got {max_chars!r}.")
        self.name = name
        self.max_chars = max_chars
        super().__init__(seed)

    @override
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations)
        return [Reply(self._pick(obs), policy=self.name) for obs in observations]

    def _pick(self, obs: Observation) -> str:
        legal = obs.get("legal_actions")
        if legal:
            return self._rng.choice(list(legal))
        length = self._rng.randint(0, self.max_chars)
        return "".join(self._rng.choice(self._ALPHABET) for _ in range(length))


class FunctionPolicy(Policy):
    """Wraps a callable ``observation -> str`` (a scripted player, a lookup table, a human prompt).

    A returned :class:`Reply` passes through unchanged; a plain ``str`` is wrapped with
    ``policy=name``.

    Args:
        fn: Called once per observation, in order.
        name: Shown in ``Reply.policy``; defaults to the function's ``__name__``.
    """

    def __init__(self, fn: Callable[[Observation], str], name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionPolicy needs a callable observation -> str, got {type(fn).__name__}.")
        self.fn = fn
        self.name = name if name is not None else getattr(fn, "__name__", type(fn).__name__)

    @override
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations)
        replies = []
        for obs in observations:
            out = self.fn(obs)
            if isinstance(out, Reply):
                replies.append(out)
            elif isinstance(out, str):
                replies.append(Reply(out, policy=self.name))
            else:
                raise TypeError(
                    f"FunctionPolicy {self.name!r}: the function should return a str reply, "
                    f"got {type(out).__name__}: {_clip(repr(out))}."
                )
        return replies


class TabularPolicy(SeededPolicy):
    """Sample each reply from ``table[obs["info_set"]]``, a mapping ``move -> probability``.

    For game-theoretic players (Kuhn poker's Nash equilibria, CFR's average strategy) and anything
    a classic learner exposes as a table. The env must put the acting agent's information state in
    ``obs["info_set"]``.

    Args:
        table: information state -> {move: probability}; e.g. ``theory.nash_policy(0.0)``.
        reply_format: how a move is written as a reply (``"[{}]"`` gives ``"[bet]"``).
        seed: seed of the policy's own RNG.
        name: shown in ``Reply.policy``.
    """

    remote_ok = True  # plain Python state, no model: it may act in a Ray actor beside the envs

    def __init__(self, table: Mapping[str, Mapping[str, float]], *, reply_format: str = "[{}]",
                 seed: int | None = None, name: str = "tabular") -> None:
        self.table = {k: dict(v) for k, v in table.items()}
        self.reply_format = reply_format
        self.name = name
        super().__init__(seed)

    @override
    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        self.check_batch(observations, key="info_set")
        replies = []
        for obs in observations:
            info_set = obs["info_set"]
            if info_set not in self.table:
                raise ValueError(f"{self.name}: no entry for info set {info_set!r}; the table has "
                                 f"{len(self.table)} entries, e.g. {sorted(self.table)[:3]}")
            row = self.table[info_set]
            move = self._rng.choices(list(row), weights=list(row.values()))[0]
            replies.append(Reply(self.reply_format.format(move), policy=self.name))
        return replies


@runtime_checkable
class ScoresTokens(Protocol):
    """A policy that writes its replies as tokens and can score any tokens exactly: what an exact reading needs.

    An exact reading of a model's strategy (the poker envs' headline evaluations,
    :mod:`llm_zoo.envs.kuhn_poker.evaluate` and :mod:`llm_zoo.envs.leduc_poker.evaluate`) shows the
    policy each information state's observation and reads the probability of each reply from the
    model's log-probabilities instead of sampling. It reads those through this protocol only, never
    through a policy's class or its tokenizer. :class:`~llm_zoo.policies.TransformersPolicy`
    implements it. ``isinstance(policy, ScoresTokens)`` tells whether a policy does; an evaluator
    handed one that does not raises ``TypeError`` naming this protocol, or reads the policy by
    sampling where it offers that (``method="sampled"``).

    Log-probabilities are those of the policy's own sampling distribution before any decoding mask
    or top-p cut: ``log_softmax(logits / temperature)``, at temperature 1 for a greedy policy.
    """

    max_new_tokens: int
    """The longest reply the policy writes, in tokens."""
    eos_token_ids: Sequence[int]
    """The tokens that end a reply; a scored reply that ends its turn ends with the first."""
    constrain: bool
    """Whether the policy samples only the replies an observation lists in ``legal_actions``."""
    vocab_size: int
    """How many token ids there are: what an enumeration of every reply ranges over."""

    def encode_prompts(self, observations: Sequence[Observation]) -> list[list[int]]:
        """Return the token ids of the prompt each observation becomes, as :meth:`Policy.act` samples after them."""
        ...

    def encode_reply(self, text: str) -> list[int]:
        """Return the token ids ``text`` is written in as a reply, without the end of turn."""
        ...

    def decode_replies(self, completions: Sequence[Sequence[int]]) -> list[str]:
        """Return the reply each completion's token ids make, as :meth:`Policy.act` decodes them."""
        ...

    def next_token_logprobs(self, prompts_ids: Sequence[Sequence[int]]) -> Any:
        """Return the log-probabilities of the token after each prompt: a ``torch.Tensor`` ``[rows, vocab]`` on the CPU."""
        ...

    def logprobs_of(self, prompts_ids: Sequence[Sequence[int]],
                    completions_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        """Return the log-probability of each completion token after its prompt (teacher-forced), one list per row."""
        ...


def require_scores_tokens(policy: object, *, reader: str, otherwise: str) -> ScoresTokens:
    """Return ``policy`` if it implements :class:`ScoresTokens`; else raise ``TypeError`` naming ``reader`` and the way out.

    ``reader`` says who reads log-probs (``"kuhn_poker_v0's exact evaluation"``), ``otherwise`` what to do
    instead (seat another policy, or read it by sampling).
    """
    if not isinstance(policy, ScoresTokens):
        raise TypeError(f"{reader} reads a policy's strategy from its log-probs, so it needs a policy that scores "
                        f"tokens (llm_zoo.policy.ScoresTokens, as TransformersPolicy does); got {type(policy).__name__}, "
                        f"which does not. Seat a model-backed policy, or {otherwise}.")
    return policy


def _clip(text: str, limit: int = 200) -> str:
    """Shorten ``text`` to ``limit`` characters, marking the cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
