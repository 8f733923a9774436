"""proposer_solver story: integer mode's controlled language, read to an answer from the text alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_zoo.envs.proposer_solver.rules import MAX_INTEGER, TaskInvalid
from llm_zoo.envs.proposer_solver.story import FIRST, FORMS, GRAMMAR, ITEMS, MAX_NUMBER, QUESTION, STEPS, read

ASK = "How many apples does Ana have now?"

# one sentence per way of writing each form (its alternatives and optional parts), with what it does to 10
WRITTEN: list[tuple[str, str, int]] = [
    *[(f"Ana {verb} 3 more{item}.", STEPS[0].text, 13) for verb in ("finds", "gets", "receives", "buys", "wins")
      for item in ("", " apples")],
    *[(f"Ana {verb} 3{item}.", STEPS[1].text, 7) for verb in ("gives away", "loses", "eats", "sells")
      for item in ("", " apples")],
    *[(f"Ana {verb} 2 {bags} of 3{more}{item}.", STEPS[2].text, 16) for verb in ("buys", "gets", "receives")
      for bags in ("bags", "boxes", "packs") for more in ("", " more") for item in ("", " apples")],
    ("Ana buys 1 bag of 3 apples.", STEPS[2].text, 13), ("Ana gets 1 box of 3.", STEPS[2].text, 13),
    *[(f"Ana gives each of 2 friends 3{item}.", STEPS[3].text, 4) for item in ("", " apples")],
    ("Ana gives each of 1 friend 1 apple.", STEPS[3].text, 9),
    ("Ana doubles them.", STEPS[4].text, 20), ("Ana triples them.", STEPS[5].text, 30),
    *[(f"Ana {verb} half of them, rounded down.", STEPS[6].text, 5)
      for verb in ("loses", "gives away", "eats", "sells")],
    ("Ana shares them equally among 3 friends and keeps the remainder.", STEPS[7].text, 1),
    ("Ana shares them equally among 1 friend and keeps the remainder.", STEPS[7].text, 0),
]


@pytest.mark.parametrize(("sentence", "form", "after"), WRITTEN, ids=[w[0] for w in WRITTEN])
def test_every_way_of_writing_a_step_reads_as_its_one_form(sentence, form, after):
    # it matches its own form and no other, with or without "Then", and does what the form says
    for body in (sentence, f"Then {sentence}"):
        reading = read(f"Ana has 10 apples. {body} {ASK}")
        assert reading.answer == after and reading.counts == (10, after, after)
    assert [f.text for f in (*FIRST, *STEPS, QUESTION) if f.pattern.fullmatch(sentence)] == [form]


def test_an_honest_story_in_the_widened_grammar_reads_to_its_answer():
    problem = ("Dev has 2 boxes of 6 marbles.\nThen Dev wins 5 more marbles. Dev sells 1 marble.  Then Dev triples "
               "them.\n  Dev gives each of 4 friends 2 marbles. Then Dev shares them equally among 5 friends and "
               "keeps the remainder. Dev receives 3 packs of 10 more. How many marbles does Dev have?")
    assert read(problem).counts == (12, 17, 16, 48, 40, 0, 30, 30) and read(problem).answer == 30
    assert read("Ana has 1 apple. How many apples does Ana have?").answer == 1
    # a count may go below zero, and halves round toward minus infinity, as the solvers are told
    assert read("Ana has 3 apples. Ana gives away 10. Ana loses half of them, rounded down. " + ASK).answer == -4


REFUSED = [
    ("I flipped a coin. What did I get?", "matches none of its forms"),
    ("I flip 1 coin: heads is 1, tails is 0. What did I get?", "':'"),
    ("Ana has 3 apples. " + ASK + " " + ASK, "sentence 2"),  # a second question
    ("Ana has 3 apples. Then Ana finds 2.5 more. " + ASK, "sentence 2"),  # a clause after a period in a number
    ("Ana has 3 apples. Then Ana finds 2. Ben gives Ana 7 more. " + ASK, "sentence 2"),
    ("Ana has 3 apples. Then Ana gives away -2. " + ASK, "'-'"),
    ("Ana has \uff13 apples. " + ASK, "U+FF13"),  # full-width 3
    ("Ana has \u0663 apples. " + ASK, "U+0663"),  # Arabic-Indic 3
    ("Ana has 3 apples.\u2028Then Ana doubles them. " + ASK, "U+2028"),  # a line separator inside the story
    ("Ana has 3 apples. Then Ana doubles them\u200b. " + ASK, "U+200B"),  # zero width
    ("Ana has 3 apples.\tThen Ana doubles them. " + ASK, "U+0009"),
    ("Ana has 3 \u0430pples. " + ASK, "U+0430"),  # a Cyrillic a
    ("Ana has 1000000 apples. " + ASK, "at most 999999"),
    ("Ana has 007 apples. " + ASK, "leading"),
    ("Ana has 3 apples. Then Ana triples them. " * 1 + "Then Ana buys 999999 bags of 999999. " * 1
     + "Then Ana triples them. " * 4, "matches none"),  # no question at the end
    ("Ana has 999999 bags of 999999 apples. " + "Then Ana triples them. " * 8 + ASK, "at most 1e+15"),
    ("A" + "a" * 999 + " has 3 apples. How many apples does A" + "a" * 999 + " have now?", "sentence 1 (the first)"),
    ("Ana has 3 apples. Then Ben finds 2 more. " + ASK, "is about Ben; the story is about Ana"),
    ("Ana has 3 apples. How many apples does Ben have now?", "is about Ben"),
    ("Ana has 3 apples. Then Ana finds 2 more pears. " + ASK, "counts pears; the story counts apples"),
    ("Ana has 3 apples. How many pears does Ana have now?", "counts pears"),
    ("Ana has 3 apples. How many apple does Ana have now?", "counts 'apple'"),  # the question names the plural
    ("Ana has 3 dozens. How many dozens does Ana have now?", "counts 'dozens'"),  # a unit, not an item
    ("Ana has 3 bags. Then Ana buys 2 bags of 5. How many bags does Ana have now?", "counts 'bags'"),
    ("Ana has 3 apples. Then Ana shares them equally among 0 friends and keeps the remainder. " + ASK,
     "0 friends"),
    ("Ana has 3 apples. Then Ana gives away 5. Then Ana shares them equally among 2 friends and keeps the "
     "remainder. " + ASK, "below zero"),
    ("Then has 3 apples. How many apples does Then have now?", "a word of the forms"),
    ("Ana has 3 apples. Then Ana finds 2 more", "does not end"),
    ("Ana has 3 apples. then Ana finds 2 more. " + ASK, "sentence 2"),
    ("Ana has 3 apples. Then Then Ana finds 2 more. " + ASK, "sentence 2"),
    ("Ana has 3 apples and 2 pears. " + ASK, "sentence 1 (the first)"),
    ("Ana has 3 apples. Ana finds 2 more.Ana eats 5. " + ASK, "sentence 2"),
    (ASK, "a first sentence and a question"),
    ("", "does not end"),
]


@pytest.mark.parametrize(("problem", "said"), REFUSED, ids=[f"{i}" for i in range(len(REFUSED))])
def test_what_the_reader_cannot_read_in_full_is_refused_naming_it(problem, said):
    with pytest.raises(TaskInvalid) as info:
        read(problem)
    assert info.value.code == "undetermined" and said in info.value.detail, info.value.detail
    assert info.value.detail.endswith(GRAMMAR) and FORMS in GRAMMAR  # every refusal lists the forms


def test_whitespace_is_normalised_and_the_bounds_hold():
    one = read("Ana has 3 apples. Then Ana doubles them. " + ASK)
    assert read("  Ana has 3\napples.\n\nThen  Ana doubles\n them.   " + ASK + "\n") == one
    assert read(f"Ana has {MAX_NUMBER} apples. {ASK}").answer == MAX_NUMBER
    big = read(f"Ana has {MAX_NUMBER} bags of {MAX_NUMBER} apples. Then Ana doubles them. {ASK}").answer
    assert big == 2 * MAX_NUMBER**2 <= MAX_INTEGER
    assert all(i.endswith("s") and i[:-1] not in ITEMS for i in ITEMS)


WORDS = ["Ana", "Then", "has", "3", "more", "apples", "apple", "bags", "of", "4", "gives", "away", "each", "friends",
         "friend", "half", "them,", "rounded", "down", "loses", "buys", "gets", "doubles", "them", "shares",
         "equally", "among", "and", "keeps", "the", "remainder", "eats", "sells", "finds", "wins", "receives",
         "triples", "box", "packs"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12))
def test_no_sentence_reads_two_ways(words):
    sentence = " ".join(words) + "."
    for forms in (FIRST, STEPS):
        assert sum(bool(f.pattern.fullmatch(sentence)) for f in forms) <= 1
