"""The shop behind user_sim: a small customer-service world held in SQLite, and the tools that act on it.

A :class:`Shop` is one private in-memory SQLite database (customers, payment methods, products and
their variants, orders and their items) plus the session state of one support chat (which customer
has been identified). Nothing is shared between two shops: each opens its own ``":memory:"``
connection. :func:`generate` fills a shop from a ``random.Random``, so a seed fixes the world.

The tools are the shop's public methods named in :data:`TOOL_SPECS`, reached through one door,
:meth:`Shop.call`. Each takes JSON-typed arguments, enforces the shop's policies (:data:`POLICIES`)
and returns a JSON-serialisable dict, or raises :class:`~llm_zoo.envs.core.ToolError` with a
sentence that says what was wrong. Through :meth:`Shop.call` they never raise anything else for a
call the JSON schema admits: it refuses, before any tool runs, a string that is not Unicode text
(a lone surrogate, which JSON's ``\\udXXX`` escapes can carry and which SQLite cannot store), so
that no tool and no query ever sees one.

:meth:`Shop.dump` reads the whole world as plain data and :func:`diff` compares two dumps field by
field; the env's reward is read from that comparison. This module has no prompts and no env
machinery; it can be driven from a REPL::

    shop = generate(random.Random(0))
    shop.find_customer_by_email(email=...)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from llm_zoo.envs.core import ToolError

# ---------------------------------------------------------------------------------------------
# Static facts
# ---------------------------------------------------------------------------------------------

SHOP_NAME = "Brightcart"
TODAY = dt.date(2024, 6, 15)
"""The shop's calendar is frozen at this day, so that the return window is a fact of the seed."""
RETURN_WINDOW_DAYS = 30
CANCEL_REASONS = ("no longer needed", "ordered by mistake")
MAX_ADDRESS_CHARS = 200

# product id, name, price in cents, option dimensions (name, values); a value is unique within its product
CATALOG: tuple[tuple[str, str, int, tuple[tuple[str, tuple[str, ...]], ...]], ...] = (
    ("P01", "T-shirt", 2500, (("size", ("S", "M", "L", "XL")), ("color", ("black", "white", "blue")))),
    ("P02", "Hoodie", 5500, (("size", ("S", "M", "L", "XL")), ("color", ("grey", "navy")))),
    ("P03", "Running shoes", 8900, (("size", ("8", "9", "10", "11")), ("color", ("black", "red")))),
    ("P04", "Jeans", 6000, (("size", ("30", "32", "34", "36")), ("fit", ("slim", "regular")))),
    ("P05", "Water bottle", 1800, (("capacity", ("500ml", "750ml", "1l")), ("color", ("green", "steel")))),
    ("P06", "Backpack", 7200, (("capacity", ("20l", "30l")), ("color", ("black", "olive")))),
    ("P07", "Desk lamp", 4200, (("color", ("white", "black")), ("finish", ("matte", "glossy")))),
    ("P08", "Headphones", 12000, (("color", ("black", "silver")), ("connection", ("wired", "wireless")))),
    ("P09", "Yoga mat", 3500, (("thickness", ("4mm", "6mm")), ("color", ("purple", "teal")))),
    ("P10", "Coffee mug", 1400, (("size", ("small", "large")), ("color", ("white", "black")))),
    ("P11", "Phone case", 1500, (("model", ("A10", "A11", "A12")), ("color", ("clear", "black")))),
    ("P12", "Sunglasses", 8000, (("frame", ("black", "tortoise")), ("lens", ("polarized", "standard")))),
)
PRODUCT_NAMES = {pid: name for pid, name, _, _ in CATALOG}
OPTION_DIMS = {pid: dims for pid, _, _, dims in CATALOG}

FIRST_NAMES = ("Ada", "Bruno", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi",
               "Liam", "Mara", "Nils", "Olga", "Pedro", "Quinn", "Rosa", "Sami", "Tara", "Umar", "Vera",
               "Wes", "Yara", "Zoe")
LAST_NAMES = ("Abbott", "Bauer", "Castro", "Dunn", "Evans", "Fischer", "Garcia", "Hughes", "Ito", "Jensen",
              "Kowalski", "Lopez", "Moreau", "Novak", "Okafor", "Patel", "Quinlan", "Rossi", "Silva",
              "Tanaka", "Usman", "Varga", "Weber", "Young", "Zhang")
STREETS = ("Maple", "Oak", "Cedar", "Elm", "Willow", "Birch", "Lake", "Hill", "River", "Park", "Sunset", "Mill")
STREET_KINDS = ("Street", "Avenue", "Road", "Lane", "Drive")
CITIES = (("Springfield", "IL"), ("Riverton", "WY"), ("Fairview", "OR"), ("Greenville", "SC"),
          ("Madison", "WI"), ("Salem", "MA"), ("Franklin", "TN"), ("Clinton", "IA"))
CARD_BRANDS = ("Visa", "Mastercard", "Amex")

POLICIES = (
    "Identify the customer before anything else: by the email on their account, or by their full name and "
    "zip code. Only look up or change orders of the identified customer.",
    "Before any change, tell the customer exactly what you will do and get an explicit yes.",
    "Change only what the customer asked for.",
    "Pending orders (not shipped yet) can be cancelled, with the reason 'no longer needed' or 'ordered by "
    "mistake'; the full amount is refunded to the order's payment method and the items go back to stock.",
    "Pending orders can also have an item switched to another option of the same product (in stock, same "
    "price), their shipping address changed, or their payment method changed to another method of the "
    "customer (a gift card must hold at least the order total).",
    "Shipped orders cannot be changed or cancelled; they can be returned or exchanged once delivered.",
    f"Delivered orders can be returned or exchanged within {RETURN_WINDOW_DAYS} days of delivery, each item "
    "once. A return is refunded to the order's payment method or to a gift card of the customer, nothing "
    "else. An exchange is for another option of the same product, in stock, at no cost.",
    "The address on the customer's account can be updated at any time; it does not change existing orders.",
)

# The tools' declarations (OpenAI function format, minus the envelope): name, description, parameters.
_STR = {"type": "string", "maxLength": MAX_ADDRESS_CHARS}
_LINES = {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 99},
          "description": "item line numbers within the order, as get_order lists them"}
_VARIANTS = {"type": "array", "items": {"type": "string", "maxLength": 16},
             "description": "one new variant id per item line, in the same order"}


def _params(required: Sequence[str], **properties: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": dict(properties), "required": list(required),
            "additionalProperties": False}


TOOL_SPECS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("find_customer_by_email", "Identify the customer by the email on their account; returns the customer id.",
     _params(["email"], email=_STR)),
    ("find_customer_by_name_zip", "Identify the customer by full name and zip code; returns the customer id.",
     _params(["first_name", "last_name", "zip"], first_name=_STR, last_name=_STR, zip=_STR)),
    ("get_customer", "Get the identified customer's profile: name, email, address, payment methods, order ids.",
     _params(["customer_id"], customer_id=_STR)),
    ("get_order", "Get an order of the identified customer: status, dates, address, payment, items.",
     _params(["order_id"], order_id=_STR)),
    ("get_product", "Get a product's variants: options, price and stock.", _params(["product_id"], product_id=_STR)),
    ("search_products", "Find products whose name contains the query.", _params(["query"], query=_STR)),
    ("cancel_order", "Cancel a pending order and refund it to its payment method.",
     _params(["order_id", "reason"], order_id=_STR, reason={"type": "string", "enum": list(CANCEL_REASONS)})),
    ("modify_order_items", "Switch items of a pending order to other variants of the same products.",
     _params(["order_id", "item_lines", "new_variant_ids"], order_id=_STR, item_lines=_LINES,
             new_variant_ids=_VARIANTS)),
    ("modify_order_address", "Change the shipping address of a pending order.",
     _params(["order_id", "address"], order_id=_STR, address=_STR)),
    ("modify_order_payment", "Pay a pending order with another payment method of the customer.",
     _params(["order_id", "payment_id"], order_id=_STR, payment_id=_STR)),
    ("return_items", "Request the return of items of a delivered order and refund them.",
     _params(["order_id", "item_lines", "refund_payment_id"], order_id=_STR, item_lines=_LINES,
             refund_payment_id=_STR)),
    ("exchange_items", "Request the exchange of items of a delivered order for other variants of the same products.",
     _params(["order_id", "item_lines", "new_variant_ids"], order_id=_STR, item_lines=_LINES,
             new_variant_ids=_VARIANTS)),
    ("update_customer_address", "Update the address on the identified customer's account.",
     _params(["customer_id", "address"], customer_id=_STR, address=_STR)),
)
TOOL_NAMES = tuple(name for name, _, _ in TOOL_SPECS)
ACTION_TOOLS = ("cancel_order", "modify_order_items", "modify_order_address", "modify_order_payment",
                "return_items", "exchange_items", "update_customer_address")
"""The tools that change the world; the others only read it."""

SCHEMA = """
CREATE TABLE customers (customer_id TEXT PRIMARY KEY, first_name TEXT, last_name TEXT, email TEXT,
                        zip TEXT, address TEXT);
CREATE TABLE payment_methods (payment_id TEXT PRIMARY KEY, customer_id TEXT, kind TEXT, label TEXT,
                              balance_cents INTEGER);
CREATE TABLE products (product_id TEXT PRIMARY KEY, name TEXT, price_cents INTEGER);
CREATE TABLE variants (variant_id TEXT PRIMARY KEY, product_id TEXT, options TEXT, stock INTEGER);
CREATE TABLE orders (order_id TEXT PRIMARY KEY, customer_id TEXT, status TEXT, placed_on TEXT,
                     delivered_on TEXT, address TEXT, payment_id TEXT, cancel_reason TEXT);
CREATE TABLE order_items (order_id TEXT, line INTEGER, variant_id TEXT, price_cents INTEGER, status TEXT,
                          new_variant_id TEXT, refund_payment_id TEXT, PRIMARY KEY (order_id, line));
"""
KEYS = {"customers": ("customer_id",), "payment_methods": ("payment_id",), "products": ("product_id",),
        "variants": ("variant_id",), "orders": ("order_id",), "order_items": ("order_id", "line")}
"""Table -> primary key columns; :meth:`Shop.dump` keys rows by them."""


def money(cents: int) -> str:
    """Format cents as dollars, e.g. ``"$25.00"``."""
    return f"${cents / 100:.2f}"


def describe_options(options: Mapping[str, str]) -> str:
    """Describe a variant's options, e.g. ``"size M, color blue"``."""
    return ", ".join(f"{k} {v}" for k, v in options.items())


def normalize_address(address: str) -> str:
    """Collapse whitespace, so that an address compares as the customer wrote it."""
    return " ".join(address.split())


# ---------------------------------------------------------------------------------------------
# The shop
# ---------------------------------------------------------------------------------------------


class Shop:
    """One private world: an in-memory SQLite database and one chat session's identified customer."""

    def __init__(self, conn: sqlite3.Connection | None = None) -> None:
        if conn is None:
            conn = sqlite3.connect(":memory:", isolation_level=None)  # autocommit: a backup sees every write
            conn.executescript(SCHEMA)
            conn.executemany("INSERT INTO products VALUES (?, ?, ?)", [(p, n, c) for p, n, c, _ in CATALOG])
        conn.row_factory = sqlite3.Row
        self.conn = conn
        self.identified: str | None = None

    def copy(self) -> Shop:
        """Return an independent copy of the world (a new in-memory database), with no one identified."""
        conn = sqlite3.connect(":memory:", isolation_level=None)
        self.conn.backup(conn)
        return Shop(conn)

    def close(self) -> None:
        """Close the database."""
        self.conn.close()

    def call(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Run the tool ``name`` with JSON-typed ``arguments``; raise ``ToolError`` for a call it refuses.

        The arguments are checked first: every string in them, at any depth, must be encodable as
        UTF-8 (no lone surrogates). The JSON schema of :data:`TOOL_SPECS` is the caller's to check.
        """
        if name not in TOOL_NAMES:
            raise ToolError(f"unknown tool {name!r:.80}; the tools are {list(TOOL_NAMES)}")
        _check_text(arguments, "arguments")
        return getattr(self, name)(**arguments)

    # ---- reading ----------------------------------------------------------------------------

    def dump(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Return the world as plain data: table -> row key (``"a|b"``) -> column -> value."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for table, key in KEYS.items():
            rows = self.conn.execute(f"SELECT * FROM {table}").fetchall()  # table names are ours, not input
            out[table] = {"|".join(str(row[k]) for k in key): dict(row) for row in rows}
        return out

    def digest(self) -> str:
        """Return a hash of the whole world (equal worlds, equal digests)."""
        return hashlib.sha256(json.dumps(self.dump(), sort_keys=True).encode()).hexdigest()

    def _one(self, sql: str, *args: Any) -> sqlite3.Row | None:
        return self.conn.execute(sql, args).fetchone()

    def _variant(self, variant_id: str) -> dict[str, Any]:
        row = self._one("SELECT * FROM variants WHERE variant_id = ?", variant_id)
        if row is None:
            raise ToolError(f"no variant with id {variant_id!r}; get_product lists a product's variant ids")
        return {"variant_id": row["variant_id"], "product_id": row["product_id"],
                "options": json.loads(row["options"]), "stock": row["stock"]}

    def _customer_order(self, order_id: str) -> sqlite3.Row:
        if self.identified is None:
            raise ToolError("identify the customer first, with find_customer_by_email or find_customer_by_name_zip")
        order_id = order_id.strip()
        if order_id[:1] in "Ww":  # "W1234567" is read as "#W1234567"
            order_id = "#" + order_id.upper()
        order = self._one("SELECT * FROM orders WHERE order_id = ?", order_id)
        if order is None:
            raise ToolError(f"no order with id {order_id!r}; order ids look like '#W1234567'")
        if order["customer_id"] != self.identified:
            raise ToolError(f"order {order_id} does not belong to the identified customer")
        return order

    def _items(self, order_id: str) -> list[sqlite3.Row]:
        return self.conn.execute("SELECT * FROM order_items WHERE order_id = ? ORDER BY line", (order_id,)).fetchall()

    def _pick_items(self, order: sqlite3.Row, lines: Sequence[int]) -> list[sqlite3.Row]:
        if not lines:
            raise ToolError("item_lines is empty; name at least one item line")
        if len(set(lines)) != len(lines):
            raise ToolError(f"item_lines repeats a line: {list(lines)}")
        items = {row["line"]: row for row in self._items(order["order_id"])}
        missing = [line for line in lines if line not in items]
        if missing:
            raise ToolError(f"order {order['order_id']} has no item line {missing[0]}; its lines are {sorted(items)}")
        return [items[line] for line in lines]

    def _payment(self, payment_id: str) -> sqlite3.Row:
        row = self._one("SELECT * FROM payment_methods WHERE payment_id = ?", payment_id)
        if row is None or row["customer_id"] != self.identified:
            raise ToolError(f"the identified customer has no payment method {payment_id!r}; get_customer lists them")
        return row

    def _check_switch(self, items: Sequence[sqlite3.Row], new_variant_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Check that each item can switch to its new variant: same product, different, in stock."""
        if len(new_variant_ids) != len(items):
            raise ToolError(f"new_variant_ids has {len(new_variant_ids)} ids for {len(items)} item lines; "
                            "give one per line")
        new = []
        for item, variant_id in zip(items, new_variant_ids):
            old, target = self._variant(item["variant_id"]), self._variant(variant_id)
            if target["product_id"] != old["product_id"]:
                raise ToolError(f"variant {variant_id} is a different product; an item can only switch to "
                                f"another variant of {PRODUCT_NAMES[old['product_id']]} ({old['product_id']})")
            if target["variant_id"] == old["variant_id"]:
                raise ToolError(f"item line {item['line']} already is variant {variant_id}")
            if target["stock"] < new_variant_ids.count(variant_id):
                raise ToolError(f"variant {variant_id} ({describe_options(target['options'])}) is out of stock")
            new.append(target)
        return new

    # ---- tools: look-ups --------------------------------------------------------------------

    def find_customer_by_email(self, email: str) -> dict[str, Any]:
        row = self._one("SELECT * FROM customers WHERE lower(email) = ?", email.strip().lower())
        if row is None:
            raise ToolError(f"no customer with email {email!r}")
        self.identified = row["customer_id"]
        return {"customer_id": row["customer_id"], "name": f"{row['first_name']} {row['last_name']}"}

    def find_customer_by_name_zip(self, first_name: str, last_name: str, zip: str) -> dict[str, Any]:
        row = self._one("SELECT * FROM customers WHERE lower(first_name) = ? AND lower(last_name) = ? AND zip = ?",
                        first_name.strip().lower(), last_name.strip().lower(), zip.strip())
        if row is None:
            raise ToolError(f"no customer named {first_name} {last_name} with zip code {zip!r}")
        self.identified = row["customer_id"]
        return {"customer_id": row["customer_id"], "name": f"{row['first_name']} {row['last_name']}"}

    def get_customer(self, customer_id: str) -> dict[str, Any]:
        if self.identified is None:
            raise ToolError("identify the customer first, with find_customer_by_email or find_customer_by_name_zip")
        if customer_id != self.identified:
            raise ToolError(f"customer {customer_id!r} is not the identified customer ({self.identified})")
        row = self._one("SELECT * FROM customers WHERE customer_id = ?", customer_id)
        assert row is not None
        payments = self.conn.execute("SELECT * FROM payment_methods WHERE customer_id = ? ORDER BY payment_id",
                                     (customer_id,)).fetchall()
        orders = self.conn.execute("SELECT order_id FROM orders WHERE customer_id = ? ORDER BY placed_on, order_id",
                                   (customer_id,)).fetchall()
        return {
            "customer_id": customer_id, "name": f"{row['first_name']} {row['last_name']}", "email": row["email"],
            "zip": row["zip"], "address": row["address"],
            "payment_methods": [{"payment_id": p["payment_id"], "kind": p["kind"], "label": p["label"],
                                 **({"balance": money(p["balance_cents"])} if p["kind"] == "gift_card" else {})}
                                for p in payments],
            "orders": [o["order_id"] for o in orders],
        }

    def get_order(self, order_id: str) -> dict[str, Any]:
        order = self._customer_order(order_id)
        payment = self._one("SELECT label FROM payment_methods WHERE payment_id = ?", order["payment_id"])
        items = []
        for item in self._items(order["order_id"]):
            variant = self._variant(item["variant_id"])
            entry = {"line": item["line"], "product_id": variant["product_id"],
                     "product": PRODUCT_NAMES[variant["product_id"]], "variant_id": variant["variant_id"],
                     "options": variant["options"], "price": money(item["price_cents"]), "status": item["status"]}
            if item["new_variant_id"]:
                entry["exchange_for"] = item["new_variant_id"]
            if item["refund_payment_id"]:
                entry["refund_to"] = item["refund_payment_id"]
            items.append(entry)
        total = sum(i["price_cents"] for i in self._items(order["order_id"]))
        return {"order_id": order["order_id"], "status": order["status"], "placed_on": order["placed_on"],
                "delivered_on": order["delivered_on"], "address": order["address"],
                "payment_id": order["payment_id"], "payment": payment["label"] if payment else None,
                "total": money(total), "items": items,
                **({"cancel_reason": order["cancel_reason"]} if order["cancel_reason"] else {})}

    def get_product(self, product_id: str) -> dict[str, Any]:
        if product_id not in PRODUCT_NAMES:
            raise ToolError(f"no product with id {product_id!r}; search_products finds product ids")
        rows = self.conn.execute("SELECT * FROM variants WHERE product_id = ? ORDER BY variant_id",
                                 (product_id,)).fetchall()
        price = self._one("SELECT price_cents FROM products WHERE product_id = ?", product_id)
        assert price is not None
        return {"product_id": product_id, "name": PRODUCT_NAMES[product_id], "price": money(price["price_cents"]),
                "variants": [{"variant_id": r["variant_id"], "options": json.loads(r["options"]),
                              "in_stock": r["stock"]} for r in rows]}

    def search_products(self, query: str) -> dict[str, Any]:
        words = query.strip().lower()
        found = [{"product_id": pid, "name": name} for pid, name in PRODUCT_NAMES.items()
                 if words and (words in name.lower() or name.lower() in words)]
        return {"products": found}

    # ---- tools: actions ---------------------------------------------------------------------

    def cancel_order(self, order_id: str, reason: str) -> dict[str, Any]:
        order = self._customer_order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"order {order['order_id']} is {order['status']}; only pending orders can be cancelled")
        items = self._items(order["order_id"])
        for item in items:
            self.conn.execute("UPDATE variants SET stock = stock + 1 WHERE variant_id = ?", (item["variant_id"],))
        total = sum(i["price_cents"] for i in items)
        self._credit(order["payment_id"], total)
        self.conn.execute("UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE order_id = ?",
                          (reason, order["order_id"]))
        return {"order_id": order["order_id"], "status": "cancelled", "refunded": money(total),
                "refund_to": order["payment_id"]}

    def modify_order_items(self, order_id: str, item_lines: list[int], new_variant_ids: list[str]) -> dict[str, Any]:
        order = self._customer_order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"order {order['order_id']} is {order['status']}; only pending orders can be modified")
        items = self._pick_items(order, item_lines)
        for item, target in zip(items, self._check_switch(items, new_variant_ids)):
            self.conn.execute("UPDATE variants SET stock = stock + 1 WHERE variant_id = ?", (item["variant_id"],))
            self.conn.execute("UPDATE variants SET stock = stock - 1 WHERE variant_id = ?", (target["variant_id"],))
            self.conn.execute("UPDATE order_items SET variant_id = ? WHERE order_id = ? AND line = ?",
                              (target["variant_id"], order["order_id"], item["line"]))
        return self.get_order(order["order_id"])

    def modify_order_address(self, order_id: str, address: str) -> dict[str, Any]:
        order = self._customer_order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"order {order['order_id']} is {order['status']}; only pending orders can change address")
        address = _check_address(address)
        self.conn.execute("UPDATE orders SET address = ? WHERE order_id = ?", (address, order["order_id"]))
        return {"order_id": order["order_id"], "address": address}

    def modify_order_payment(self, order_id: str, payment_id: str) -> dict[str, Any]:
        order = self._customer_order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"order {order['order_id']} is {order['status']}; only pending orders can change payment")
        new = self._payment(payment_id)
        if new["payment_id"] == order["payment_id"]:
            raise ToolError(f"order {order['order_id']} is already paid with {payment_id}")
        total = sum(i["price_cents"] for i in self._items(order["order_id"]))
        if new["kind"] == "gift_card" and new["balance_cents"] < total:
            raise ToolError(f"gift card {payment_id} holds {money(new['balance_cents'])}, less than the order "
                            f"total of {money(total)}")
        self._credit(order["payment_id"], total)
        self._credit(new["payment_id"], -total)
        self.conn.execute("UPDATE orders SET payment_id = ? WHERE order_id = ?", (payment_id, order["order_id"]))
        return {"order_id": order["order_id"], "payment_id": payment_id, "payment": new["label"]}

    def return_items(self, order_id: str, item_lines: list[int], refund_payment_id: str) -> dict[str, Any]:
        order = self._delivered_in_window(order_id, "returned")
        items = self._pick_items(order, item_lines)
        self._check_unreturned(items)
        refund = self._payment(refund_payment_id)
        if refund["payment_id"] != order["payment_id"] and refund["kind"] != "gift_card":
            raise ToolError(f"refunds go to the order's payment method ({order['payment_id']}) or to a gift card; "
                            f"{refund_payment_id} is neither")
        amount = sum(i["price_cents"] for i in items)
        self._credit(refund["payment_id"], amount)
        for item in items:
            self.conn.execute("UPDATE order_items SET status = 'return_requested', refund_payment_id = ? "
                              "WHERE order_id = ? AND line = ?", (refund["payment_id"], order["order_id"], item["line"]))
        return {"order_id": order["order_id"], "returned_lines": list(item_lines), "refund": money(amount),
                "refund_to": refund["payment_id"]}

    def exchange_items(self, order_id: str, item_lines: list[int], new_variant_ids: list[str]) -> dict[str, Any]:
        order = self._delivered_in_window(order_id, "exchanged")
        items = self._pick_items(order, item_lines)
        self._check_unreturned(items)
        for item, target in zip(items, self._check_switch(items, new_variant_ids)):
            self.conn.execute("UPDATE variants SET stock = stock - 1 WHERE variant_id = ?", (target["variant_id"],))
            self.conn.execute("UPDATE order_items SET status = 'exchange_requested', new_variant_id = ? "
                              "WHERE order_id = ? AND line = ?", (target["variant_id"], order["order_id"], item["line"]))
        return {"order_id": order["order_id"], "exchanged_lines": list(item_lines),
                "new_variant_ids": list(new_variant_ids)}

    def update_customer_address(self, customer_id: str, address: str) -> dict[str, Any]:
        if self.identified is None or customer_id != self.identified:
            raise ToolError(f"customer {customer_id!r} is not the identified customer; identify the customer first")
        address = _check_address(address)
        self.conn.execute("UPDATE customers SET address = ? WHERE customer_id = ?", (address, customer_id))
        return {"customer_id": customer_id, "address": address}

    # ---- tool helpers -----------------------------------------------------------------------

    def _credit(self, payment_id: str, cents: int) -> None:
        """Move money to (or, negative, from) a gift card; cards and PayPal keep no balance here."""
        self.conn.execute("UPDATE payment_methods SET balance_cents = balance_cents + ? "
                          "WHERE payment_id = ? AND kind = 'gift_card'", (cents, payment_id))

    def _delivered_in_window(self, order_id: str, verb: str) -> sqlite3.Row:
        order = self._customer_order(order_id)
        if order["status"] != "delivered":
            raise ToolError(f"order {order['order_id']} is {order['status']}; only delivered orders can be {verb}")
        delivered = dt.date.fromisoformat(order["delivered_on"])
        if (TODAY - delivered).days > RETURN_WINDOW_DAYS:
            raise ToolError(f"order {order['order_id']} was delivered on {delivered}, more than "
                            f"{RETURN_WINDOW_DAYS} days before today ({TODAY}); it can no longer be {verb}")
        return order

    @staticmethod
    def _check_unreturned(items: Sequence[sqlite3.Row]) -> None:
        for item in items:
            if item["status"] != "ordered":
                raise ToolError(f"item line {item['line']} is already {item['status'].replace('_', ' ')}")


def _check_text(value: Any, path: str) -> None:
    """Raise ``ToolError`` if a string in ``value`` (a JSON value) holds a code point that is not text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ToolError(f"{path} holds {value[exc.start]!r} at position {exc.start}, a lone surrogate, which is "
                            "not text; send the characters themselves (valid UTF-8)") from None
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check_text(key, f"{path} (a key)")
            _check_text(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_text(item, f"{path}[{i}]")


def _check_address(address: str) -> str:
    address = normalize_address(address)
    if len(address) < 10 or not any(c.isdigit() for c in address):
        raise ToolError(f"{address!r} is not a full address; expected e.g. '12 Oak Street, Salem, MA 01970'")
    return address


# ---------------------------------------------------------------------------------------------
# Building a world from a seed
# ---------------------------------------------------------------------------------------------


def generate(rng: random.Random, customers: int = 8) -> Shop:
    """Build a shop from ``rng``: stock for every variant and ``customers`` customers with orders."""
    shop = Shop()
    rows = []
    for pid, _, _, dims in CATALOG:
        combos: list[dict[str, str]] = [{}]
        for dim, values in dims:
            combos = [{**c, dim: v} for c in combos for v in values]
        for i, options in enumerate(combos, 1):
            rows.append((f"V{pid[1:]}{i:02d}", pid, json.dumps(options), rng.choice((0, 1, 2, 3, 5, 8))))
    shop.conn.executemany("INSERT INTO variants VALUES (?, ?, ?, ?)", rows)
    for _ in range(customers):
        cid = add_customer(shop, rng, paypal=rng.random() < 0.4, gift_card=rng.random() < 0.3)
        products = rng.sample([p for p, *_ in CATALOG], 6)
        for _ in range(rng.randint(1, 3)):
            add_order(shop, rng, cid, rng.choice(("pending", "shipped", "delivered", "delivered", "cancelled")),
                      [products.pop() for _ in range(rng.randint(1, 2))])
    return shop


def random_address(rng: random.Random) -> str:
    """Draw a street address, e.g. ``"42 Maple Street, Salem, MA 01970"``."""
    city, state = rng.choice(CITIES)
    return f"{rng.randint(2, 998)} {rng.choice(STREETS)} {rng.choice(STREET_KINDS)}, {city}, {state} {rng.randint(10000, 99999)}"


def _new_id(shop: Shop, rng: random.Random, table: str, column: str, prefix: str, digits: int) -> str:
    while True:
        candidate = f"{prefix}{rng.randrange(10 ** (digits - 1), 10 ** digits)}"
        if shop._one(f"SELECT 1 FROM {table} WHERE {column} = ?", candidate) is None:
            return candidate


def add_customer(shop: Shop, rng: random.Random, *, paypal: bool = False, gift_card: bool | int = False,
                 extra_card: bool = False) -> str:
    """Add a customer with a credit card (and optionally PayPal, a gift card, a second card); return its id.

    ``gift_card`` may be a balance in cents; ``True`` draws one.
    """
    while True:
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        if shop._one("SELECT 1 FROM customers WHERE first_name = ? AND last_name = ?", first, last) is None:
            break
    cid = _new_id(shop, rng, "customers", "customer_id", "C", 4)
    email = f"{first}.{last}{rng.randint(10, 99)}@example.com".lower()
    address = random_address(rng)
    zip_code = address[-5:]
    shop.conn.execute("INSERT INTO customers VALUES (?, ?, ?, ?, ?, ?)", (cid, first, last, email, zip_code, address))
    brands = rng.sample(CARD_BRANDS, 2)
    methods = [("credit_card", f"{brands[0]} ending {rng.randint(1000, 9999)}", None)]
    if extra_card:
        methods.append(("credit_card", f"{brands[1]} ending {rng.randint(1000, 9999)}", None))
    if paypal:
        methods.append(("paypal", f"PayPal {email}", None))
    if gift_card is not False:
        balance = rng.randrange(500, 15000, 100) if gift_card is True else int(gift_card)
        methods.append(("gift_card", "gift card", balance))
    for kind, label, balance in methods:
        pid = _new_id(shop, rng, "payment_methods", "payment_id", "PM", 4)
        shop.conn.execute("INSERT INTO payment_methods VALUES (?, ?, ?, ?, ?)", (pid, cid, kind, label, balance))
    return cid


def payment_of(shop: Shop, customer_id: str, kind: str, index: int = 0) -> sqlite3.Row:
    """Return the customer's ``index``-th payment method of ``kind`` (``credit_card``, ``paypal``, ``gift_card``)."""
    rows = shop.conn.execute("SELECT * FROM payment_methods WHERE customer_id = ? AND kind = ? ORDER BY rowid",
                             (customer_id, kind)).fetchall()
    return rows[index]


def add_order(shop: Shop, rng: random.Random, customer_id: str, status: str, products: Sequence[str], *,
              delivered_days_ago: int | None = None, variants: Mapping[str, str] | None = None,
              payment_id: str | None = None) -> str:
    """Add an order of one item per product (a random variant unless ``variants`` names it); return its id."""
    oid = _new_id(shop, rng, "orders", "order_id", "#W", 7)
    delivered = None
    if status == "delivered":
        days = delivered_days_ago if delivered_days_ago is not None else rng.randint(1, 60)
        delivered = TODAY - dt.timedelta(days=days)
        placed = delivered - dt.timedelta(days=rng.randint(2, 6))
    else:
        placed = TODAY - dt.timedelta(days={"pending": rng.randint(0, 2), "shipped": rng.randint(2, 5),
                                            "cancelled": rng.randint(3, 40)}[status])
    customer = shop._one("SELECT address FROM customers WHERE customer_id = ?", customer_id)
    assert customer is not None
    payment = payment_id or payment_of(shop, customer_id, "credit_card")["payment_id"]
    shop.conn.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                      (oid, customer_id, status, placed.isoformat(), delivered.isoformat() if delivered else None,
                       customer["address"], payment, "no longer needed" if status == "cancelled" else None))
    for line, pid in enumerate(products, 1):
        variant_id = (variants or {}).get(pid) or rng.choice(
            [r["variant_id"] for r in shop.conn.execute("SELECT variant_id FROM variants WHERE product_id = ?", (pid,))])
        price = shop._one("SELECT price_cents FROM products WHERE product_id = ?", pid)
        assert price is not None
        shop.conn.execute("INSERT INTO order_items VALUES (?, ?, ?, ?, 'ordered', NULL, NULL)",
                          (oid, line, variant_id, price["price_cents"]))
    return oid


def variants_of(shop: Shop, product_id: str) -> list[dict[str, Any]]:
    """Return every variant of a product: id, options and stock."""
    return [shop._variant(r["variant_id"]) for r in
            shop.conn.execute("SELECT variant_id FROM variants WHERE product_id = ? ORDER BY variant_id", (product_id,))]


def set_stock(shop: Shop, variant_id: str, stock: int) -> None:
    """Set a variant's stock (scenarios plant what a goal needs)."""
    shop.conn.execute("UPDATE variants SET stock = ? WHERE variant_id = ?", (stock, variant_id))


def set_balance(shop: Shop, payment_id: str, cents: int) -> None:
    """Set a gift card's balance (scenarios plant what a goal needs)."""
    shop.conn.execute("UPDATE payment_methods SET balance_cents = ? WHERE payment_id = ?", (cents, payment_id))


def order_total(shop: Shop, order_id: str) -> int:
    """Return the sum of an order's item prices, in cents."""
    row = shop._one("SELECT sum(price_cents) AS total FROM order_items WHERE order_id = ?", order_id)
    return int(row["total"]) if row is not None and row["total"] is not None else 0


# ---------------------------------------------------------------------------------------------
# Comparing worlds
# ---------------------------------------------------------------------------------------------


def diff(goal: Mapping[str, Mapping[str, Mapping[str, Any]]], final: Mapping[str, Mapping[str, Mapping[str, Any]]],
         initial: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None) -> list[str]:
    """List every field where ``final`` differs from ``goal``, one sentence each; empty when they are equal.

    With ``initial``, each sentence also says what the field held at the start, which tells a
    missing change ("expected 'cancelled', got 'pending' (unchanged)") from an unwanted one.
    """
    out = []
    for table in sorted(set(goal) | set(final)):
        want, got = goal.get(table, {}), final.get(table, {})
        before = (initial or {}).get(table, {})
        for key in sorted(set(want) | set(got)):
            if key not in got:
                out.append(f"{table}[{key}] is missing")
                continue
            if key not in want:
                out.append(f"{table}[{key}] should not exist")
                continue
            for column in want[key]:
                expected, actual = want[key][column], got[key].get(column)
                if expected != actual:
                    note = ""
                    if initial is not None:
                        was = before.get(key, {}).get(column)
                        note = " (unchanged)" if was == actual else f" (was {was!r})"
                    out.append(f"{table}[{key}].{column}: expected {expected!r}, got {actual!r}{note}")
    return out


_ABSENT = object()
"""A row that one of the worlds does not hold (:func:`progress` compares it as one value)."""


def progress(goal: Mapping[str, Mapping[str, Mapping[str, Any]]], final: Mapping[str, Mapping[str, Mapping[str, Any]]],
             initial: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> tuple[int, int, int]:
    """Count how far ``final`` went from ``initial`` toward ``goal``: ``(right, wrong, required)``.

    The units are the fields of rows all three worlds hold, and whole rows where one of them lacks
    the row. ``required``: units where the goal differs from the initial world; ``right``: those
    of them that ``final`` holds as the goal does; ``wrong``: units ``final`` changed to anything
    but the goal's value (a required field set to another value, a field or row the goal leaves
    alone). ``right == required`` and ``wrong == 0`` exactly when :func:`diff` is empty.
    """
    right = wrong = required = 0
    for table in set(goal) | set(final) | set(initial):
        want, got, before = goal.get(table, {}), final.get(table, {}), initial.get(table, {})
        for key in set(want) | set(got) | set(before):
            if key in want and key in got and key in before:
                units = [(want[key].get(c, _ABSENT), got[key].get(c, _ABSENT), before[key].get(c, _ABSENT))
                         for c in set(want[key]) | set(got[key]) | set(before[key])]
            else:
                units = [(want.get(key, _ABSENT), got.get(key, _ABSENT), before.get(key, _ABSENT))]
            for g, f, i in units:
                if g != i:
                    required += 1
                    right += f == g
                    wrong += f != g and f != i
                else:
                    wrong += f != g
    return right, wrong, required
