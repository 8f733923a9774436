"""The prompts of user_sim: what each side is told, and the user's brief read back from its prompt."""

from __future__ import annotations

import pytest

from llm_zoo import user_sim_v0
from llm_zoo.envs.user_sim import text, world


def test_assistant_prompt_holds_today_the_policies_and_no_customer():
    prompt = text.assistant_prompt()
    assert world.TODAY.isoformat() in prompt and world.SHOP_NAME in prompt
    assert all(policy in prompt for policy in world.POLICIES)
    assert "@" not in prompt and "#W" not in prompt and text.STOP not in prompt
    assert not text.is_user_prompt(prompt)


@pytest.mark.parametrize("name", ["return_other_card_then_gift_card", "modify_pending_out_of_stock_cancel",
                                  "default_address_and_pending_order", "return_known_by_item_name_zip"])
def test_user_prompt_round_trips_into_the_brief(name):
    env = user_sim_v0.env()
    env.reset(seed=2, options={"scenario": name})
    scenario = env.unwrapped.scenario
    prompt = env.observe("user")["messages"][0]["content"]
    assert text.is_user_prompt(prompt)
    assert scenario.persona["description"] in prompt and "Your goal, which the assistant cannot see" in prompt
    assert prompt.endswith(text.STOP)
    brief = text.parse_brief(prompt)
    assert dict(brief.identity) == dict(scenario.identity)
    assert list(brief.tasks) == list(scenario.tasks)
    assert brief.persona == scenario.persona


def test_goal_sentences_say_the_fallbacks():
    env = user_sim_v0.env()
    env.reset(seed=0, options={"scenario": "exchange_out_of_stock_then_gift_card"})
    (task,) = env.unwrapped.scenario.tasks
    assert ("If that is not available, return it instead, with the refund to your gift card." in text.goal_sentence(task))
    env.reset(seed=0, options={"scenario": "order_address_known_by_item"})
    (task,) = env.unwrapped.scenario.tasks
    assert "(you don't know its id)" in text.goal_sentence(task)


def test_parse_brief_refuses_other_prompts():
    with pytest.raises(ValueError, match="not a user_sim user's system prompt"):
        text.parse_brief(text.assistant_prompt())
    persona = next(iter(text.PERSONAS.values()))["description"]
    with pytest.raises(ValueError, match="lists no identity facts"):
        text.parse_brief(f"You are X. {persona}")
