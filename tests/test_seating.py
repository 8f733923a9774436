"""llm_zoo.seating: one seating type, read from each written form, refusing malformed ones by name."""

from __future__ import annotations

import pytest

from llm_zoo.seating import Seating, scripted_name

ROLES = {"debater_0": "debater", "debater_1": "debater", "judge": "judge"}


@pytest.mark.parametrize("written", [
    {"debater_1": "p1", "judge": "scripted:rule_judge"},
    "debater_1=p1,judge=scripted:rule_judge",
    ["debater_1=p1", " judge = scripted:rule_judge "],
])
def test_every_written_form_gives_the_same_seats(written):
    seating = Seating.parse(written)
    assert seating.assign(ROLES) == {"debater_0": "main", "debater_1": "p1", "judge": "scripted:rule_judge"}
    assert Seating.parse(seating) is seating and seating.to_dict() == {"debater_1": "p1", "judge": "scripted:rule_judge"}


def test_an_agent_wins_over_its_role_and_the_default_fills_the_rest():
    seating = Seating.parse({"debater": "d", "debater_0": "first"}, default="rest")
    assert seating.assign(ROLES) == {"debater_0": "first", "debater_1": "d", "judge": "rest"}
    assert Seating.parse(None).assign({"a": "a"}) == {"a": "main"}
    with pytest.raises(ValueError, match=r"seat 'judge' \(role 'judge'\) has no player"):
        Seating.parse({"debater": "d"}, default=None).assign(ROLES)


@pytest.mark.parametrize("written, message", [
    ("judge", r"--seat: expected SEAT=PLAYER \(e.g. judge=scripted:rule_judge\); got 'judge'"),
    (["judge="], "each seat and player must be a non-empty string"),
    ({"judge": 3}, "each seat and player must be a non-empty string; got 'judge': 3"),
    (["judge=a", "judge=b"], "seat 'judge' is given two players, 'a' and 'b'"),
    (7, "expected a mapping"),
])
def test_malformed_seatings_are_refused_naming_where_they_came_from(written, message):
    with pytest.raises(ValueError, match=message):
        Seating.parse(written, where="--seat")


def test_scripted_seats_name_the_envs_players_and_unknown_seats_are_found():
    assert scripted_name("scripted:nash") == "nash" and scripted_name("nash") is None
    seating = Seating.parse({"judge": "scripted:rule_judge", "jury": "x"})
    seating.check_scripted(ROLES, {"rule_judge"}, env="debate_v0")
    assert seating.unknown_seats(ROLES) == ["jury"]
    with pytest.raises(ValueError, match=r"config.policies names 'scripted:rule_judge', but debate_v0 has no such "
                                         r"scripted player; its players are \['strict'\]"):
        seating.check_scripted(ROLES, {"strict"}, env="debate_v0")
