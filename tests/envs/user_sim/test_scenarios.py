"""Scenario templates: the shipped data, its checks, and planting each template into a world."""

from __future__ import annotations

import json
import random

import pytest

from llm_zoo.envs.user_sim import scenarios, world


def test_at_least_thirty_templates_covering_every_kind_and_persona():
    templates = scenarios.TEMPLATES.values()
    assert len(scenarios.TEMPLATES) >= 30
    assert {t["kind"] for tpl in templates for t in tpl.tasks} == set(scenarios.KINDS)
    assert {tpl.persona for tpl in templates} == set(scenarios.PERSONAS)
    assert {tpl.identify for tpl in templates} == set(scenarios.IDENTIFY)
    assert any(len(tpl.tasks) > 1 for tpl in templates)


@pytest.mark.parametrize("name", sorted(scenarios.TEMPLATES))
def test_every_template_plants_a_reachable_goal(name):
    template = scenarios.TEMPLATES[name]
    for seed in range(3):
        rng = random.Random(seed)
        shop = world.generate(rng)
        scenario = scenarios.instantiate(template, shop, rng)
        initial = shop.dump()
        goal = scenarios.goal_state(shop, scenario)  # raises if a goal call is refused
        assert shop.dump() == initial  # the goal is computed on a copy
        assert len(scenario.tasks) == len(template.tasks)
        changed = world.diff(goal, initial)
        assert bool(changed) == bool(scenario.actions)
        for task in scenario.tasks:
            order_id = task.fact("order id")
            if order_id and order_id.startswith("#"):
                assert initial["orders"][order_id]["customer_id"] == scenario.customer_id
        shop.close()


def test_policy_forbidden_goals_leave_the_world_unchanged():
    forbidden = {"cancel_shipped_refused", "return_window_expired", "exchange_out_of_stock_keep",
                 "modify_shipped_refused", "payment_gift_card_short"}
    for name in forbidden:
        rng = random.Random(0)
        scenario = scenarios.instantiate(scenarios.TEMPLATES[name], world.generate(rng), rng)
        assert scenario.actions == ()


def test_by_item_references_name_a_product_in_exactly_one_order():
    rng = random.Random(1)
    shop = world.generate(rng)
    scenario = scenarios.instantiate(scenarios.TEMPLATES["return_known_by_item_name_zip"], shop, rng)
    fact = scenario.tasks[0].fact("order id")
    assert fact.startswith("unknown: it is the order with the ")
    product = fact.rpartition("the ")[2]
    dump = shop.dump()
    orders = {row["order_id"] for row in dump["order_items"].values()
              if dump["orders"][row["order_id"]]["customer_id"] == scenario.customer_id
              and world.PRODUCT_NAMES[dump["variants"][row["variant_id"]]["product_id"]] == product}
    assert len(orders) == 1


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d["templates"].append(dict(d["templates"][0])), "appears twice"),
        (lambda d: d["templates"][0].update(persona="grumpy"), "persona 'grumpy'"),
        (lambda d: d["templates"][0].update(identify="phone"), "identify 'phone'"),
        (lambda d: d["templates"][0].update(tasks=[]), "has no tasks"),
        (lambda d: d["templates"][0].update(tasks=[{"kind": "refund"}]), "kind 'refund'"),
        (lambda d: d["templates"][0].update(tasks=[{"kind": "cancel", "status": "lost"}]), "cancel.status"),
        (lambda d: d["templates"][0].update(tasks=[{"kind": "cancel", "colour": "red"}]), "unknown parameters"),
        (lambda d: d["templates"][0].update(tasks=[{"kind": "return", "items": 1, "count": 2}]), "exceeds"),
        (lambda d: d["templates"][0].update(tasks=[{"kind": "exchange", "if_unavailable": "cancel"}]), "pending order"),
        (lambda d: d["templates"][0].update(distractors=["lost"]), "distractors"),
    ],
)
def test_bad_template_data_is_refused(tmp_path, edit, match):
    data = json.loads(scenarios.DATA_FILE.read_text())
    edit(data)
    path = tmp_path / "scenarios.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match):
        scenarios.load(path)
