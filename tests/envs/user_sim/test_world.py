"""The shop's world: generation from a seed, private databases, each tool's policy checks, dumps and diffs."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_zoo.envs.core import ToolError
from llm_zoo.envs.user_sim import world


@pytest.fixture
def shop():
    """A world with one planted customer: a pending, a shipped, a fresh and an old delivered order."""
    rng = random.Random(5)
    shop = world.generate(rng, customers=3)
    cid = world.add_customer(shop, rng, paypal=True, gift_card=1000, extra_card=True)
    shop.orders = {  # test-only attribute: status -> order id
        "pending": world.add_order(shop, rng, cid, "pending", ["P01", "P10"]),
        "shipped": world.add_order(shop, rng, cid, "shipped", ["P02"]),
        "delivered": world.add_order(shop, rng, cid, "delivered", ["P03", "P04"], delivered_days_ago=10),
        "old": world.add_order(shop, rng, cid, "delivered", ["P05"], delivered_days_ago=45),
    }
    shop.cid = cid
    shop.email = shop._one("SELECT email FROM customers WHERE customer_id = ?", cid)["email"]
    yield shop
    shop.close()


def payment(shop, kind, index=0):
    return world.payment_of(shop, shop.cid, kind, index)["payment_id"]


def other_variant(shop, order_id, line=1, in_stock=True):
    item = shop.get_order(order_id)["items"][line - 1]
    for v in world.variants_of(shop, item["product_id"]):
        if v["variant_id"] != item["variant_id"]:
            world.set_stock(shop, v["variant_id"], 3 if in_stock else 0)
            return v["variant_id"]
    raise AssertionError("no other variant")


def test_seed_fixes_the_world_and_each_shop_is_private():
    a, b, c = (world.generate(random.Random(s)) for s in (1, 1, 2))
    assert a.digest() == b.digest() != c.digest()
    assert a.conn is not b.conn
    copy = a.copy()
    copy.conn.execute("UPDATE variants SET stock = 99")
    assert a.digest() == b.digest() != copy.digest()
    assert len(a.dump()["customers"]) == 8 and len(a.dump()["products"]) == len(world.CATALOG)


def test_identification_comes_first(shop):
    order_id = shop.orders["pending"]
    for name, args in [("get_order", {"order_id": order_id}), ("get_customer", {"customer_id": shop.cid}),
                       ("cancel_order", {"order_id": order_id, "reason": "no longer needed"})]:
        with pytest.raises(ToolError, match="identify the customer first"):
            getattr(shop, name)(**args)
    with pytest.raises(ToolError, match="no customer with email"):
        shop.find_customer_by_email(email="nobody@example.com")
    assert shop.find_customer_by_email(email=f"  {shop.email.upper()} ")["customer_id"] == shop.cid
    row = shop._one("SELECT * FROM customers WHERE customer_id = ?", shop.cid)
    assert shop.find_customer_by_name_zip(first_name=row["first_name"].lower(), last_name=row["last_name"],
                                          zip=row["zip"])["customer_id"] == shop.cid
    profile = shop.get_customer(customer_id=shop.cid)
    assert set(shop.orders.values()) <= set(profile["orders"])
    assert {p["kind"] for p in profile["payment_methods"]} == {"credit_card", "paypal", "gift_card"}
    assert shop.get_order(order_id=order_id[1:].lower())["order_id"] == order_id  # "w1234567" reads as "#W1234567"


def test_orders_of_other_customers_are_out_of_reach(shop):
    shop.find_customer_by_email(email=shop.email)
    stranger = next(o for o, row in shop.dump()["orders"].items() if row["customer_id"] != shop.cid)
    with pytest.raises(ToolError, match="does not belong"):
        shop.get_order(order_id=stranger)
    with pytest.raises(ToolError, match="not the identified customer"):
        shop.update_customer_address(customer_id="C0000", address="1 Oak Street, Salem, MA 01970")


# (tool, order, extra arguments, error) -- each a call the policies refuse, leaving the world unchanged
REFUSED = [
    ("cancel_order", "shipped", {"reason": "no longer needed"}, "only pending orders can be cancelled"),
    ("modify_order_address", "delivered", {"address": "1 Oak Street, Salem, MA 01970"}, "only pending orders"),
    ("modify_order_address", "pending", {"address": "nowhere"}, "not a full address"),
    ("modify_order_payment", "shipped", {"payment_id": "@paypal"}, "only pending orders"),
    ("modify_order_payment", "pending", {"payment_id": "@card"}, "already paid with"),
    ("modify_order_payment", "pending", {"payment_id": "@gift"}, "less than the order total"),
    ("modify_order_payment", "pending", {"payment_id": "PM0000"}, "has no payment method"),
    ("modify_order_items", "pending", {"item_lines": [1], "new_variant_ids": ["V0201"]}, "different product"),
    ("modify_order_items", "pending", {"item_lines": [1, 2], "new_variant_ids": ["V0101"]}, "one per line"),
    ("modify_order_items", "pending", {"item_lines": [], "new_variant_ids": []}, "item_lines is empty"),
    ("modify_order_items", "pending", {"item_lines": [1, 1], "new_variant_ids": ["V0101", "V0101"]}, "repeats"),
    ("modify_order_items", "pending", {"item_lines": [9], "new_variant_ids": ["V0101"]}, "no item line 9"),
    ("modify_order_items", "pending", {"item_lines": [1], "new_variant_ids": ["@out"]}, "out of stock"),
    ("modify_order_items", "pending", {"item_lines": [1], "new_variant_ids": ["V9999"]}, "no variant"),
    ("return_items", "shipped", {"item_lines": [1], "refund_payment_id": "@card"}, "only delivered orders"),
    ("return_items", "old", {"item_lines": [1], "refund_payment_id": "@card"}, "more than 30 days"),
    ("return_items", "delivered", {"item_lines": [1], "refund_payment_id": "@paypal"}, "is neither"),
    ("return_items", "delivered", {"item_lines": [1], "refund_payment_id": "@card2"}, "is neither"),
    ("exchange_items", "old", {"item_lines": [1], "new_variant_ids": ["V0501"]}, "more than 30 days"),
    ("exchange_items", "pending", {"item_lines": [1], "new_variant_ids": ["V0101"]}, "only delivered orders"),
]


@pytest.mark.parametrize(("tool", "which", "extra", "error"), REFUSED)
def test_policy_violations_raise_tool_errors_and_change_nothing(shop, tool, which, extra, error):
    shop.find_customer_by_email(email=shop.email)
    order_id = shop.orders[which]
    values = {"@paypal": payment(shop, "paypal"), "@gift": payment(shop, "gift_card"), "@card2": payment(shop, "credit_card", 1),
              "@card": shop.get_order(order_id=order_id)["payment_id"]}
    args = {k: values.get(v, v) if isinstance(v, str) else v for k, v in extra.items()}
    if args.get("new_variant_ids") == ["@out"]:
        args["new_variant_ids"] = [other_variant(shop, order_id, in_stock=False)]
    before = shop.dump()
    with pytest.raises(ToolError, match=error):
        getattr(shop, tool)(order_id=order_id, **args)
    assert shop.dump() == before


def test_each_action_changes_exactly_its_fields(shop):
    shop.find_customer_by_email(email=shop.email)
    initial = shop.dump()
    pending, delivered = shop.orders["pending"], shop.orders["delivered"]
    new_variant = other_variant(shop, pending, 2)
    exchange_variant = other_variant(shop, delivered, 2)
    stocked = shop.dump()
    shop.modify_order_items(order_id=pending, item_lines=[2], new_variant_ids=[new_variant])
    shop.modify_order_address(order_id=pending, address="  7  Oak Street,  Salem, MA 01970 ")
    shop.return_items(order_id=delivered, item_lines=[1], refund_payment_id=payment(shop, "gift_card"))
    shop.exchange_items(order_id=delivered, item_lines=[2], new_variant_ids=[exchange_variant])
    changes = world.diff(shop.dump(), stocked)
    old_variant = initial["order_items"][f"{pending}|2"]["variant_id"]
    price = initial["order_items"][f"{delivered}|1"]["price_cents"]
    gift = payment(shop, "gift_card")
    assert sorted(changes) == sorted([
        f"order_items[{pending}|2].variant_id: expected {new_variant!r}, got {old_variant!r}",
        f"variants[{new_variant}].stock: expected 2, got 3",
        f"variants[{old_variant}].stock: expected {stocked['variants'][old_variant]['stock'] + 1}, "
        f"got {stocked['variants'][old_variant]['stock']}",
        f"orders[{pending}].address: expected '7 Oak Street, Salem, MA 01970', got {initial['orders'][pending]['address']!r}",
        f"order_items[{delivered}|1].status: expected 'return_requested', got 'ordered'",
        f"order_items[{delivered}|1].refund_payment_id: expected {gift!r}, got None",
        f"payment_methods[{gift}].balance_cents: expected {1000 + price}, got 1000",
        f"order_items[{delivered}|2].status: expected 'exchange_requested', got 'ordered'",
        f"order_items[{delivered}|2].new_variant_id: expected {exchange_variant!r}, got None",
        f"variants[{exchange_variant}].stock: expected 2, got 3",
    ])
    with pytest.raises(ToolError, match="already return requested"):
        shop.return_items(order_id=delivered, item_lines=[1], refund_payment_id=payment(shop, "gift_card"))


def test_cancel_refunds_and_restocks_and_payment_moves_gift_card_money(shop):
    shop.find_customer_by_email(email=shop.email)
    pending = shop.orders["pending"]
    total = world.order_total(shop, pending)
    gift = payment(shop, "gift_card")
    world.set_balance(shop, gift, total + 500)
    before = shop.dump()
    shop.modify_order_payment(order_id=pending, payment_id=gift)
    assert shop.dump()["payment_methods"][gift]["balance_cents"] == 500
    result = shop.cancel_order(order_id=pending, reason="ordered by mistake")
    assert result["refund_to"] == gift and result["refunded"] == world.money(total)
    after = shop.dump()
    assert after["payment_methods"][gift]["balance_cents"] == total + 500
    assert after["orders"][pending]["status"] == "cancelled" and after["orders"][pending]["cancel_reason"] == "ordered by mistake"
    for line in (1, 2):
        variant = before["order_items"][f"{pending}|{line}"]["variant_id"]
        assert after["variants"][variant]["stock"] == before["variants"][variant]["stock"] + 1


def test_look_ups_do_not_change_the_world(shop):
    before = shop.digest()
    shop.find_customer_by_email(email=shop.email)
    shop.get_customer(customer_id=shop.cid)
    for order_id in shop.orders.values():
        shop.get_order(order_id=order_id)
    assert shop.get_product(product_id="P01")["name"] == "T-shirt"
    assert [p["name"] for p in shop.search_products(query="mug")["products"]] == ["Coffee mug"]
    assert shop.search_products(query="")["products"] == []
    with pytest.raises(ToolError, match="no product"):
        shop.get_product(product_id="P99")
    assert shop.digest() == before


def test_diff_names_missing_unwanted_and_changed_rows():
    goal = {"orders": {"#W1": {"status": "cancelled"}, "#W2": {"status": "pending"}}}
    final = {"orders": {"#W1": {"status": "pending"}, "#W3": {"status": "pending"}}}
    initial = {"orders": {"#W1": {"status": "pending"}}}
    assert world.diff(goal, final, initial) == [
        "orders[#W1].status: expected 'cancelled', got 'pending' (unchanged)",
        "orders[#W2] is missing",
        "orders[#W3] should not exist",
    ]
    assert world.diff(goal, goal) == []


# ---- odd strings: only ToolError, whatever the schema admits ----------------------------------

_ODD = st.one_of(st.text(st.characters(exclude_categories=()), max_size=12),  # surrogates, NUL, controls
                 st.sampled_from(["\udc80", "a\ud800b", "\ud83d\ude00", "\x00", "' OR 1=1 --", "%", "_", "W", "",
                                  "#W" + "9" * 7, " ", "\u202e#W1"]))


def _value(schema, real):
    """A strategy for values the JSON schema ``schema`` admits, mixing in the world's real ids."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if schema["type"] == "string":
        return st.one_of(_ODD, st.sampled_from(real)).filter(lambda s: len(s) <= schema.get("maxLength", 10**9))
    if schema["type"] == "integer":
        return st.integers(schema.get("minimum", -(2**70)), schema.get("maximum", 2**70))
    assert schema["type"] == "array", schema
    return st.lists(_value(schema["items"], real), max_size=3)


def _calls(real):
    return st.one_of(*[st.tuples(st.just(name), st.fixed_dictionaries({k: _value(v, real) for k, v in
                                                                        spec["properties"].items()}))
                       for name, _, spec in world.TOOL_SPECS])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_call_the_schema_admits_returns_a_dict_or_raises_tool_error_only(shop, data):
    dump = shop.dump()
    real = [*shop.orders.values(), shop.cid, shop.email, *dump["variants"], *dump["payment_methods"],
            *dump["products"], "no longer needed", "12 Oak Street, Salem, MA 01970"]
    shop.identified = data.draw(st.sampled_from([None, shop.cid]))
    for name, arguments in data.draw(st.lists(_calls(real), min_size=1, max_size=4)):
        try:
            result = shop.call(name, arguments)
        except ToolError as exc:
            str(exc).encode("utf-8")  # the message is text too
        else:
            json.dumps(result).encode("utf-8")
    json.dumps(shop.dump()).encode("utf-8")  # nothing that is not text got into the world


def test_a_lone_surrogate_in_any_string_argument_is_a_tool_error_before_the_tool_runs(shop):
    shop.identified = shop.cid
    before = shop.digest()
    for name, _, spec in world.TOOL_SPECS:
        for field, schema in spec["properties"].items():
            if schema.get("type") not in ("string", "array") or "enum" in schema:
                continue
            arguments = {k: (["\udc80"] if v.get("type") == "array" and k == field else
                             [1] if v.get("type") == "array" else
                             v["enum"][0] if "enum" in v else "x\udc80" if k == field else shop.orders["pending"])
                         for k, v in spec["properties"].items()}
            if spec["properties"][field].get("items", {}).get("type") == "integer":
                continue
            with pytest.raises(ToolError, match=r"lone surrogate"):
                shop.call(name, arguments)
    assert shop.digest() == before
    with pytest.raises(ToolError, match="unknown tool"):
        shop.call("conn", {})  # only the declared tools: not the shop's other attributes
