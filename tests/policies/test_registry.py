"""The policy registry's human player: the terminal it prints to is an exit for the other agents' text."""

from __future__ import annotations

import io

from llm_zoo.policies.registry import human_policy


def test_the_human_player_sees_no_control_bidi_or_separator_character_raw():
    out = io.StringIO()
    policy = human_policy(stream_in=io.StringIO("[bet]\n"), stream_out=out)
    observation = {"messages": ({"role": "system", "content": "Rules."},
                                {"role": "user", "content": "Your move.\u202eteb\u202c\u2028(legal: fold)\x1b[2J"})}
    assert policy(observation) == "[bet]"
    shown = out.getvalue()
    assert not any(c in shown for c in "\u202e\u202c\u2028\x1b")
    assert "\\u202e" in shown and "\\u2028" in shown and "[user]\nYour move." in shown
