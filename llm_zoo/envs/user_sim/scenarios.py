"""Scenario templates (shipped as data in ``scenarios.json``) and their instantiation in a world.

A template names a persona, how the customer identifies (``email``, or ``name_zip`` for one who
forgot the email) and one or more tasks. The template's persona decides how the customer takes a
refusal (an ``insistent`` one pushes back once); the persona the customer speaks with (greeting,
style, the words of its yes) is drawn from the seed, so that the customer's first message does not
tell which template, and so which goal, the episode holds. A task is a kind plus parameters:

==================  =========================================================================================
kind                parameters (first value is the default)
==================  =========================================================================================
``cancel``          status pending|shipped|delivered, reason, items 1-3, ref id|item
``return``          status delivered|shipped, window in|out, items, count (items returned), refund
                    original|gift_card|other_card, refund_fallback original|gift_card, ref
``exchange``        status delivered|pending|shipped (pending: switch the item before shipping), window,
                    items, dim size|color, stock in|out, if_unavailable keep|return_original|return_gift_card|
                    cancel, ref
``order_address``   status pending|shipped, items, ref
``default_address`` (none)
``payment``         method gift_card|paypal, balance enough|short, items, ref
==================  =========================================================================================

``ref: item`` means the customer does not know the order id and names the order by an item in it.
:func:`instantiate` plants a fresh customer with the orders the tasks need into a generated world,
and returns a :class:`Scenario`: what the user knows (per task, an ordered list of facts) and the
action calls that carry the goal out. The goal *state* is the world after those calls; a task whose
policy forbids it (a shipped order to cancel, an expired return window, an item out of stock with
"keep" as the fallback) has no calls, so its goal is the world unchanged.

Fact keys, the vocabulary shared with ``text.py`` (which writes them into the user's prompt) and
``scripted.py`` (whose user reads them back): ``order id``, ``order contents``, ``order state``,
``paid with``, ``items``, ``wanted``, ``reason``, ``refund to``, ``if refund refused``,
``if unavailable``, ``new address``, ``pay with``, ``if refused``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_zoo.envs.core import ToolError
from llm_zoo.envs.user_sim import world
from llm_zoo.envs.user_sim.world import Shop

DATA_FILE = Path(__file__).with_name("scenarios.json")
IDENTIFY = ("email", "name_zip")
ORDER_STATES = {"pending": "placed on {placed}, not shipped yet", "shipped": "shipped, on its way",
                "delivered": "delivered on {delivered}", "cancelled": "cancelled"}
FALLBACKS = ("keep", "return_original", "return_gift_card", "cancel")
_REF = ("id", "item")
_ITEMS = (1, 2, 3)
KINDS: dict[str, dict[str, tuple[Any, ...]]] = {
    "cancel": {"status": ("pending", "shipped", "delivered"), "reason": world.CANCEL_REASONS, "items": _ITEMS,
               "ref": _REF},
    "return": {"status": ("delivered", "shipped"), "window": ("in", "out"), "items": _ITEMS, "count": _ITEMS,
               "refund": ("original", "gift_card", "other_card"), "refund_fallback": ("original", "gift_card"),
               "ref": _REF},
    "exchange": {"status": ("delivered", "pending", "shipped"), "window": ("in", "out"), "items": _ITEMS,
                 "dim": ("size", "color"), "stock": ("in", "out"), "if_unavailable": FALLBACKS, "ref": _REF},
    "order_address": {"status": ("pending", "shipped"), "items": _ITEMS, "ref": _REF},
    "default_address": {},
    "payment": {"method": ("gift_card", "paypal"), "balance": ("enough", "short"), "items": _ITEMS, "ref": _REF},
}
"""Kind -> parameter -> allowed values; the first is the default."""


@dataclass(frozen=True)
class Template:
    """One scenario template, as read from the data file."""

    id: str
    persona: str
    identify: str
    tasks: tuple[Mapping[str, Any], ...]
    distractors: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Task:
    """One request of the user: its kind and what the user knows about it, in prompt order."""

    kind: str
    facts: tuple[tuple[str, str], ...]

    def fact(self, key: str, default: str | None = None) -> str | None:
        """Return the fact named ``key``, or ``default``."""
        return dict(self.facts).get(key, default)


@dataclass(frozen=True)
class Scenario:
    """A template planted in a world: who the user is, what they want, and the calls that do it."""

    template: str
    persona: Mapping[str, str]
    customer_id: str
    identity: tuple[tuple[str, str], ...]
    tasks: tuple[Task, ...]
    actions: tuple[tuple[str, dict[str, Any]], ...] = field(default=())


def load(path: Path = DATA_FILE) -> tuple[dict[str, dict[str, str]], dict[str, Template]]:
    """Read and check the data file; return (persona name -> persona, template id -> template)."""
    data = json.loads(path.read_text())
    personas = data["personas"]
    templates: dict[str, Template] = {}
    for raw in data["templates"]:
        where = f"{path.name}: template {raw.get('id')!r}"
        if raw.get("id") in templates:
            raise ValueError(f"{where} appears twice; template ids must be unique")
        if raw.get("persona") not in personas:
            raise ValueError(f"{where} has persona {raw.get('persona')!r}; expected one of {sorted(personas)}")
        if raw.get("identify") not in IDENTIFY:
            raise ValueError(f"{where} has identify {raw.get('identify')!r}; expected one of {IDENTIFY}")
        tasks = tuple(_check_task(where, t) for t in raw.get("tasks", ()))
        if not tasks:
            raise ValueError(f"{where} has no tasks")
        distractors = raw.get("distractors")
        if distractors is not None and not set(distractors) <= set(ORDER_STATES):
            raise ValueError(f"{where} has distractors {distractors!r}; expected statuses of {sorted(ORDER_STATES)}")
        templates[raw["id"]] = Template(raw["id"], raw["persona"], raw["identify"], tasks,
                                        None if distractors is None else tuple(distractors))
    return personas, templates


def _check_task(where: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{where} has a task of kind {kind!r}; expected one of {sorted(KINDS)}")
    task = {"kind": kind}
    for name, allowed in KINDS[kind].items():
        value = raw.get(name, allowed[0])
        if value not in allowed:
            raise ValueError(f"{where}: {kind}.{name} must be one of {list(allowed)}; got {value!r}")
        task[name] = value
    unknown = set(raw) - set(KINDS[kind]) - {"kind"}
    if unknown:
        raise ValueError(f"{where}: {kind} has unknown parameters {sorted(unknown)}; expected {sorted(KINDS[kind])}")
    if kind == "return" and task["count"] > task["items"]:
        raise ValueError(f"{where}: return.count ({task['count']}) exceeds return.items ({task['items']})")
    fallback = task.get("if_unavailable")
    if fallback in ("return_original", "return_gift_card") and task["status"] != "delivered":
        raise ValueError(f"{where}: if_unavailable {fallback!r} needs a delivered order")
    if fallback == "cancel" and task["status"] != "pending":
        raise ValueError(f"{where}: if_unavailable 'cancel' needs a pending order")
    return task


PERSONAS, TEMPLATES = load()


# ---------------------------------------------------------------------------------------------
# Instantiation
# ---------------------------------------------------------------------------------------------


@dataclass
class _Plant:
    """What the planters share while one template is instantiated."""

    shop: Shop
    rng: random.Random
    customer_id: str
    unused: list[str]  # product ids not yet in any of the customer's orders
    new_address: str
    refused: str

    def payment(self, kind: str, index: int = 0) -> str:
        return world.payment_of(self.shop, self.customer_id, kind, index)["payment_id"]

    def order(self, status: str, items: int, *, window: str = "in", dim: str | None = None) -> tuple[str, int]:
        """Add an order of ``items`` unused products; with ``dim``, one of them has that option. Return
        (order id, line of the product with ``dim`` or 1)."""
        products = []
        if dim is not None:
            with_dim = [p for p in self.unused if any(d == dim for d, _ in world.OPTION_DIMS[p])]
            products.append(self.rng.choice(with_dim))
            self.unused.remove(products[0])
        while len(products) < items:
            products.append(self.unused.pop())
        target = products[0]
        self.rng.shuffle(products)
        days = self.rng.randint(2, 25) if window == "in" else self.rng.randint(35, 70)
        oid = world.add_order(self.shop, self.rng, self.customer_id, status, products,
                              delivered_days_ago=days if status == "delivered" else None)
        return oid, products.index(target) + 1

    def order_facts(self, oid: str, ref: str, ref_line: int = 1) -> list[tuple[str, str]]:
        order = self.shop._one("SELECT * FROM orders WHERE order_id = ?", oid)
        assert order is not None
        items = [self.item(oid, line) for line in range(1, len(self.shop._items(oid)) + 1)]
        state = ORDER_STATES[order["status"]].format(placed=order["placed_on"], delivered=order["delivered_on"])
        paid = self.shop._one("SELECT label FROM payment_methods WHERE payment_id = ?", order["payment_id"])
        assert paid is not None
        ref_product = world.PRODUCT_NAMES[self.variant(oid, ref_line)["product_id"]]
        order_id = oid if ref == "id" else f"unknown: it is the order with the {ref_product}"
        return [("order id", order_id), ("order contents", "; ".join(items)), ("order state", state),
                ("paid with", paid["label"])]

    def variant(self, oid: str, line: int) -> dict[str, Any]:
        row = self.shop._one("SELECT variant_id FROM order_items WHERE order_id = ? AND line = ?", oid, line)
        assert row is not None
        return self.shop._variant(row["variant_id"])

    def item(self, oid: str, line: int) -> str:
        variant = self.variant(oid, line)
        return f"{world.PRODUCT_NAMES[variant['product_id']]} ({world.describe_options(variant['options'])})"


Planted = tuple[Task, list[tuple[str, dict[str, Any]]]]


def _cancel(p: _Plant, spec: Mapping[str, Any]) -> Planted:
    oid, _ = p.order(spec["status"], spec["items"])
    facts = p.order_facts(oid, spec["ref"]) + [("reason", spec["reason"]), ("if refused", p.refused)]
    calls = [("cancel_order", {"order_id": oid, "reason": spec["reason"]})] if spec["status"] == "pending" else []
    return Task("cancel", tuple(facts)), calls


def _return(p: _Plant, spec: Mapping[str, Any]) -> Planted:
    oid, _ = p.order(spec["status"], spec["items"], window=spec["window"])
    lines = sorted(p.rng.sample(range(1, spec["items"] + 1), spec["count"]))
    order_payment = p.shop._one("SELECT payment_id FROM orders WHERE order_id = ?", oid)["payment_id"]
    targets = {"original": ("original payment method", order_payment), "gift_card": ("gift card", None)}
    wanted = spec["refund_fallback"] if spec["refund"] == "other_card" else spec["refund"]
    text, refund_id = targets[wanted]
    refund_id = refund_id or p.payment("gift_card")
    facts = p.order_facts(oid, spec["ref"], lines[0]) + [("items", "; ".join(p.item(oid, line) for line in lines))]
    if spec["refund"] == "other_card":
        other = world.payment_of(p.shop, p.customer_id, "credit_card", 1)["label"]
        facts += [("refund to", other), ("if refund refused", text)]
    else:
        facts += [("refund to", text)]
    facts += [("if refused", p.refused)]
    eligible = spec["status"] == "delivered" and spec["window"] == "in"
    calls = [("return_items", {"order_id": oid, "item_lines": lines, "refund_payment_id": refund_id})] if eligible else []
    return Task("return", tuple(facts)), calls


def _exchange(p: _Plant, spec: Mapping[str, Any]) -> Planted:
    status, dim = spec["status"], spec["dim"]
    oid, line = p.order(status, spec["items"], window=spec["window"], dim=dim)
    current = p.variant(oid, line)
    values = dict(world.OPTION_DIMS[current["product_id"]])[dim]
    value = p.rng.choice([v for v in values if v != current["options"][dim]])
    options = {**current["options"], dim: value}
    target = next(v for v in world.variants_of(p.shop, current["product_id"]) if v["options"] == options)
    world.set_stock(p.shop, target["variant_id"], p.rng.randint(1, 5) if spec["stock"] == "in" else 0)
    fallback = spec["if_unavailable"]
    facts = p.order_facts(oid, spec["ref"], line) + [
        ("items", p.item(oid, line)), ("wanted", f"{dim} {value}"), ("if unavailable", fallback),
        ("if refused", p.refused)]
    eligible = status == "pending" or (status == "delivered" and spec["window"] == "in")
    calls: list[tuple[str, dict[str, Any]]] = []
    if eligible and spec["stock"] == "in":
        tool = "modify_order_items" if status == "pending" else "exchange_items"
        calls = [(tool, {"order_id": oid, "item_lines": [line], "new_variant_ids": [target["variant_id"]]})]
    elif eligible and fallback.startswith("return"):
        order_payment = p.shop._one("SELECT payment_id FROM orders WHERE order_id = ?", oid)["payment_id"]
        refund_id = order_payment if fallback == "return_original" else p.payment("gift_card")
        calls = [("return_items", {"order_id": oid, "item_lines": [line], "refund_payment_id": refund_id})]
    elif eligible and fallback == "cancel":
        calls = [("cancel_order", {"order_id": oid, "reason": "no longer needed"})]
    return Task("exchange", tuple(facts)), calls


def _order_address(p: _Plant, spec: Mapping[str, Any]) -> Planted:
    oid, _ = p.order(spec["status"], spec["items"])
    facts = p.order_facts(oid, spec["ref"]) + [("new address", p.new_address), ("if refused", p.refused)]
    calls = [("modify_order_address", {"order_id": oid, "address": p.new_address})] if spec["status"] == "pending" else []
    return Task("order_address", tuple(facts)), calls


def _default_address(p: _Plant, spec: Mapping[str, Any]) -> Planted:
    calls = [("update_customer_address", {"customer_id": p.customer_id, "address": p.new_address})]
    return Task("default_address", (("new address", p.new_address),)), calls


def _payment(p: _Plant, spec: Mapping[str, Any]) -> Planted:
    oid, _ = p.order("pending", spec["items"])
    payment_id = p.payment(spec["method"])
    ok = True
    if spec["method"] == "gift_card":
        total = world.order_total(p.shop, oid)
        ok = spec["balance"] == "enough"
        balance = total + p.rng.randrange(0, 5000, 100) if ok else p.rng.randrange(0, total, 100)
        world.set_balance(p.shop, payment_id, balance)
    facts = p.order_facts(oid, spec["ref"]) + [
        ("pay with", "gift card" if spec["method"] == "gift_card" else "PayPal"), ("if refused", p.refused)]
    calls = [("modify_order_payment", {"order_id": oid, "payment_id": payment_id})] if ok else []
    return Task("payment", tuple(facts)), calls


PLANTERS = {"cancel": _cancel, "return": _return, "exchange": _exchange, "order_address": _order_address,
            "default_address": _default_address, "payment": _payment}


def _needs(template: Template) -> dict[str, bool]:
    """Which payment methods the template's tasks need the customer to hold."""
    gift = paypal = extra = False
    for t in template.tasks:
        gift |= "gift_card" in (t.get("refund"), t.get("refund_fallback"), t.get("method")) or \
            t.get("if_unavailable") == "return_gift_card"
        paypal |= t.get("method") == "paypal"
        extra |= t.get("refund") == "other_card"
    return {"gift_card": gift, "paypal": paypal, "extra_card": extra}


def instantiate(template: Template, shop: Shop, rng: random.Random) -> Scenario:
    """Plant ``template`` into ``shop`` (a new customer and their orders) and return the scenario."""
    needs = _needs(template)
    customer_id = world.add_customer(
        shop, rng, paypal=needs["paypal"] or rng.random() < 0.3,
        gift_card=needs["gift_card"] or rng.random() < 0.3, extra_card=needs["extra_card"])
    unused = [pid for pid, *_ in world.CATALOG]
    rng.shuffle(unused)
    refused = "insist once, then accept" if template.persona == "insistent" else "accept"
    plant = _Plant(shop, rng, customer_id, unused, world.random_address(rng), refused)
    tasks, actions = [], []
    for spec in template.tasks:
        task, calls = PLANTERS[spec["kind"]](plant, spec)
        tasks.append(task)
        actions += calls
    distractors = template.distractors
    if distractors is None:
        distractors = tuple(rng.choice(("shipped", "delivered", "cancelled")) for _ in range(rng.randint(0, 2)))
    for status in distractors:
        world.add_order(shop, rng, customer_id, status, [unused.pop() for _ in range(rng.randint(1, 2))])
    row = shop._one("SELECT * FROM customers WHERE customer_id = ?", customer_id)
    assert row is not None
    email = row["email"] if template.identify == "email" else "you don't remember it"
    identity = (("name", f"{row['first_name']} {row['last_name']}"), ("email", email), ("zip", row["zip"]))
    # The customer's voice is drawn from the seed, last (so the world is the same draw as before), not
    # taken from the template: a template's persona would tell the assistant the goal before it looks
    # (every "impatient" customer who wants a cancellation had a shipped order). The template's persona
    # keeps deciding the behaviour (pushing back once when refused), which shows only after a refusal.
    voice = rng.choice(sorted(PERSONAS))
    return Scenario(template.id, PERSONAS[voice], customer_id, identity, tuple(tasks), tuple(actions))


def goal_state(shop: Shop, scenario: Scenario) -> dict[str, dict[str, dict[str, Any]]]:
    """Return the world the scenario asks for: ``shop`` after the scenario's action calls, on a copy."""
    goal = shop.copy()
    try:
        goal.identified = scenario.customer_id
        for name, args in scenario.actions:
            try:
                getattr(goal, name)(**args)
            except ToolError as exc:  # a template planted a world its own goal cannot reach
                raise AssertionError(f"scenario {scenario.template}: the goal call {name}({args}) fails: {exc}") from exc
        return goal.dump()
    finally:
        goal.close()
