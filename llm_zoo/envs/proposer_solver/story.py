"""Integer mode's stories: a small controlled language of plain English whose text alone determines the answer.

An integer-mode PROBLEM is a story about one person and one kind of item, told in the sentence
forms of :data:`FORMS`, one quantity operation per sentence. :func:`read` computes the answer from
the text alone, so the answer is a function of what the solvers see, by construction; the
proposer's ``f()`` must agree with it (``verify.validate``). The scripted proposer writes stories
in a subset of these forms and the scripted solvers read them with :func:`read` too: one grammar.

Everything outside the grammar is refused, never guessed at: the text may hold only ASCII letters,
digits, spaces, line breaks and ``.``, ``,`` and ``?`` (so no lookalike digits, no invisible or
line-separating characters); runs of spaces and line breaks count as one space; a sentence ends
with ``.`` or ``?`` before a space or the end, and every sentence must match exactly one form in
full. Numbers are whole, written as ASCII digits without leading zeros, at most :data:`MAX_NUMBER`;
the person is one capitalised name of 2 to 20 letters (not ``Then`` or ``How``), the same in every
sentence; the item is one word of :data:`ITEMS`, a plain count noun, never a unit (a dozen, a pair)
nor a word of the forms, the same in every sentence (plural in the question, maybe singular before).
A count may go below zero (giving away 5 of 3 leaves -2; half of -7, rounded down, is -4), as the
solvers are told, but never past :data:`rules.MAX_INTEGER` in magnitude, and a count below zero
cannot be shared.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from llm_zoo.envs.proposer_solver.rules import MAX_INTEGER, TaskInvalid

MAX_NUMBER = 999_999
"""Largest number a story may state."""
ITEMS: tuple[str, ...] = (
    "apples", "balls", "beads", "blocks", "books", "bottles", "buttons", "candles", "cards", "coins", "cookies",
    "crayons", "cups", "eggs", "flowers", "grapes", "keys", "marbles", "nuts", "oranges", "pears", "pencils", "pens",
    "plums", "rocks", "seeds", "shells", "shirts", "socks", "stamps", "stickers", "tickets", "toys",
)
"""The items a story may count, as plurals; a sentence may name one in the singular (the plural less its s)."""

_NAME = r"(?P<name>[A-Z][a-z]{1,19})"
_N = r"(?P<n>\d+)"
_M = r"(?P<m>\d+)"
_ITEM = r"(?P<item>[a-z]+)"
_BAGS = r"(?:bags?|box(?:es)?|packs?)"


@dataclass(frozen=True)
class Form:
    """One sentence form: how it is written (:data:`FORMS` documents it), its pattern, and what it does."""

    text: str
    pattern: re.Pattern[str]
    apply: Callable[[int, int, int], int]  # (count, n, m) -> the count after the sentence


def _form(text: str, pattern: str, apply: Callable[[int, int, int], int]) -> Form:
    return Form(text, re.compile(pattern), apply)


def _share(count: int, n: int, m: int) -> int:
    if n < 1:
        raise ValueError("cannot share among 0 friends")
    if count < 0:
        raise ValueError(f"cannot share a count below zero ({count})")
    return count % n


FIRST: tuple[Form, ...] = (
    _form("NAME has N ITEMS.", rf"{_NAME} has {_N} {_ITEM}\.", lambda c, n, m: n),
    _form("NAME has N bags/boxes/packs of M ITEMS.", rf"{_NAME} has {_N} {_BAGS} of {_M} {_ITEM}\.",
          lambda c, n, m: n * m),
)
"""The forms of a story's first sentence: how many the person has to start with."""
STEPS: tuple[Form, ...] = (
    _form("NAME finds/gets/receives/buys/wins N more [ITEMS].",
          rf"{_NAME} (?:finds|gets|receives|buys|wins) {_N} more(?: {_ITEM})?\.", lambda c, n, m: c + n),
    _form("NAME gives away/loses/eats/sells N [ITEMS].",
          rf"{_NAME} (?:gives away|loses|eats|sells) {_N}(?: {_ITEM})?\.", lambda c, n, m: c - n),
    _form("NAME buys/gets/receives N bags/boxes/packs of M [more] [ITEMS].",
          rf"{_NAME} (?:buys|gets|receives) {_N} {_BAGS} of {_M}(?: more)?(?: {_ITEM})?\.",
          lambda c, n, m: c + n * m),
    _form("NAME gives each of N friends M [ITEMS].", rf"{_NAME} gives each of {_N} friends? {_M}(?: {_ITEM})?\.",
          lambda c, n, m: c - n * m),
    _form("NAME doubles them.", rf"{_NAME} doubles them\.", lambda c, n, m: 2 * c),
    _form("NAME triples them.", rf"{_NAME} triples them\.", lambda c, n, m: 3 * c),
    _form("NAME loses/gives away/eats/sells half of them, rounded down.",
          rf"{_NAME} (?:loses|gives away|eats|sells) half of them, rounded down\.", lambda c, n, m: c // 2),
    _form("NAME shares them equally among N friends and keeps the remainder.",
          rf"{_NAME} shares them equally among {_N} friends? and keeps the remainder\.", _share),
)
"""The forms of the sentences between the first and the question, each of which may begin with ``Then``."""
QUESTION = _form("How many ITEMS does NAME have [now]?", rf"How many {_ITEM} does {_NAME} have(?: now)?\?",
                 lambda c, n, m: c)
"""The form of the last sentence, the story's one question."""
FORMS = "\n".join([*(f"  {f.text}  (first)" for f in FIRST), *(f"  [Then] {f.text}" for f in STEPS),
                   f"  {QUESTION.text}  (last)"])
"""The sentence forms as a proposer is told them, one a line."""
GRAMMAR = (
    "Write the PROBLEM as a story in these sentence forms only, one sentence each:\n" + FORMS + "\n"
    f"NAME is one person's capitalised name (the same in every sentence); N and M are whole numbers written as "
    f"digits (at most {MAX_NUMBER}); ITEMS is one of {', '.join(ITEMS)} (the same in every sentence; "
    "before the question it may be singular, as apple); a/b means one of them, [x] that x may be left out. "
    "Use nothing else: no other words, symbols or sentences."
)
"""The grammar as a proposer is told it (text.py's integer-mode instructions, and every refusal)."""

_ALLOWED = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n.,?")
_RESERVED_NAMES = frozenset({"Then", "How"})


@dataclass(frozen=True)
class Reading:
    """A story as read: its answer and the count after each sentence (the question's is the answer)."""

    answer: int
    counts: tuple[int, ...]

    @property
    def sentences(self) -> int:
        return len(self.counts)


def read(problem: str) -> Reading:
    """Read an integer-mode PROBLEM in the grammar of :data:`FORMS` and return its answer.

    Raises:
        TaskInvalid: ``undetermined``, naming the first character, number or sentence it could not read
            and listing the forms.
    """
    strange = next((c for c in problem if c not in _ALLOWED), None)
    if strange is not None:
        _refuse(f"the PROBLEM holds {strange!r} (U+{ord(strange):04X}); a story is written in ASCII letters, "
                "digits, spaces and . , ? only")
    text = " ".join(problem.split())  # only spaces and line breaks are left to split on
    sentences = re.split(r"(?<=[.?]) ", text)  # "2.5" and "2.Then" stay inside a sentence, which then reads as none
    if not text.endswith((".", "?")):
        _refuse(f"the PROBLEM does not end with . or ?: {_clip(text[-80:])!r}")
    for number in re.findall(r"\d+", text):
        if (number.startswith("0") and number != "0") or int(number) > MAX_NUMBER:
            _refuse(f"the PROBLEM states {number[:20]!r}; numbers are whole, written as digits without leading "
                    f"zeros, at most {MAX_NUMBER}")
    if len(sentences) < 2:
        _refuse("a story has a first sentence and a question at least")
    counts: list[int] = []
    person = item = None
    for i, sentence in enumerate(sentences):
        if i == 0:
            forms, body = FIRST, sentence
        elif i == len(sentences) - 1:
            forms, body = (QUESTION,), sentence
        else:
            forms, body = STEPS, sentence.removeprefix("Then ")
        matches = [(form, match) for form in forms if (match := form.pattern.fullmatch(body))]
        role = "the first" if i == 0 else "the question" if i == len(sentences) - 1 else "a step"
        where = f"sentence {i + 1} ({role})"
        if len(matches) != 1:
            _refuse(f"{where}, {_clip(sentence)!r}, " + ("reads two ways" if matches else "matches none of its forms"))
        form, match = matches[0]
        groups = match.groupdict()
        name, noun = groups.get("name"), groups.get("item")
        if name in _RESERVED_NAMES:
            _refuse(f"{where}, {_clip(sentence)!r}: {name!r} is a word of the forms, not a name")
        person = person or name
        if name != person:
            _refuse(f"{where}, {_clip(sentence)!r}, is about {name}; the story is about {person}")
        if noun is not None:
            plural = noun if noun in ITEMS else noun + "s" if noun + "s" in ITEMS and i < len(sentences) - 1 else None
            if plural is None:
                _refuse(f"{where}, {_clip(sentence)!r}, counts {noun!r}; the items are: {', '.join(ITEMS)} "
                        "(plural in the question)")
            item = item or plural
            if plural != item:
                _refuse(f"{where}, {_clip(sentence)!r}, counts {plural}; the story counts {item}")
        count = counts[-1] if counts else 0
        try:
            count = form.apply(count, int(groups.get("n") or 0), int(groups.get("m") or 0))
        except ValueError as exc:
            _refuse(f"{where}, {_clip(sentence)!r}: {exc}")
        if abs(count) > MAX_INTEGER:
            _refuse(f"{where}, {_clip(sentence)!r}, brings the count to {count:.3e}; at most {MAX_INTEGER:.0e} in "
                    "magnitude")
        counts.append(count)
    return Reading(counts[-1], tuple(counts))


def _clip(sentence: str) -> str:
    return sentence if len(sentence) <= 80 else sentence[:77] + "..."


def _refuse(why: str) -> NoReturn:
    raise TaskInvalid("undetermined", f"{why}. The env reads the answer from the PROBLEM itself. {GRAMMAR}")
