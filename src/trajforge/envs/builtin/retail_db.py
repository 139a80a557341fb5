"""The retail domain's database and tools: users, orders and products, seeded per episode.

A database is plain JSON-ready data (``build_db(seed)``), rebuilt for every episode by the env's
setup and kept in the episode's ``ToolContext.state["db"]``; the verifier compares it with the
task's expected state. Prices are integer cents; the tools print them as ``$12.34``.
"""

from __future__ import annotations

import json
import random
from typing import Any

from trajforge.envs.tool import ToolContext, ToolError, tool
from trajforge.envs.user_sim import db_of

FIRST_NAMES = ("Ava", "Noah", "Mia", "Liam", "Zoe", "Omar", "Yara", "Ivan", "Lena", "Raj", "Sofia")
LAST_NAMES = ("Lopez", "Kim", "Novak", "Ito", "Haddad", "Silva", "Moreau", "Okafor", "Berg")
CITIES = (("Austin", "78701"), ("Denver", "80202"), ("Boston", "02108"), ("Seattle", "98101"))
STREETS = ("Oak St", "Pine Ave", "Maple Rd", "Cedar Ln", "Elm Ct", "Birch Way")
PRODUCTS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], int]] = {
    # product id: (name, colors, sizes, base price in cents)
    "p1": ("T-Shirt", ("red", "blue", "black"), ("S", "M", "L"), 1999),
    "p2": ("Running Shoes", ("white", "black"), ("9", "10", "11"), 8950),
    "p3": ("Backpack", ("green", "grey"), ("20L", "30L"), 5400),
    "p4": ("Water Bottle", ("steel", "blue"), ("500ml", "1L"), 1575),
    "p5": ("Desk Lamp", ("white", "black"), ("small", "large"), 3299),
}
CANCEL_REASONS = ("no longer needed", "ordered by mistake")
STATUSES = ("pending", "delivered")


def money(cents: int) -> str:
    """``$12.34``."""
    return f"${cents // 100}.{cents % 100:02d}"


def _products(rng: random.Random) -> dict[str, Any]:
    products: dict[str, Any] = {}
    for pid, (name, colors, sizes, base) in PRODUCTS.items():
        variants: dict[str, Any] = {}
        for ci, color in enumerate(colors):
            for si, size in enumerate(sizes):
                item_id = f"{pid}-{ci}{si}"
                variants[item_id] = {
                    "options": {"color": color, "size": size},
                    "price": base + 100 * si + rng.randint(0, 3) * 25,
                    "available": rng.random() > 0.2,
                }
        products[pid] = {"name": name, "variants": variants}
    return products


def build_db(seed: int) -> dict[str, Any]:
    """The database of variant ``seed``: 5 products, 6 users, 2-3 orders each."""
    rng = random.Random(f"retail-db:{seed}")
    products = _products(rng)
    users: dict[str, Any] = {}
    orders: dict[str, Any] = {}
    firsts = rng.sample(FIRST_NAMES, 6)
    for u, first in enumerate(firsts):
        last = rng.choice(LAST_NAMES)
        city, zip_code = rng.choice(CITIES)
        user_id = f"{first.lower()}_{last.lower()}_{seed}{u}"
        address = {"address1": f"{rng.randint(10, 999)} {rng.choice(STREETS)}", "city": city}
        address["zip"] = zip_code
        payment = {"kind": rng.choice(("credit_card", "paypal")), "id": f"pm_{u}{seed}"}
        order_ids: list[str] = []
        users[user_id] = {
            "name": {"first": first, "last": last},
            "email": f"{first.lower()}.{last.lower()}{seed}{u}@example.com",
            "zip": zip_code,
            "address": address,
            "payment_methods": {payment["id"]: payment["kind"]},
            "orders": order_ids,
        }
        for k in range(rng.randint(2, 3)):
            order_id = f"#W{seed}{u}{k}{rng.randint(100, 999)}"
            items = []
            for pid in rng.sample(sorted(products), rng.randint(1, 3)):
                item_id = rng.choice(sorted(products[pid]["variants"]))
                price = products[pid]["variants"][item_id]["price"]
                items.append({"item_id": item_id, "product_id": pid, "price": price})
            status = STATUSES[(u + k) % 2]
            orders[order_id] = {"user_id": user_id, "status": status, "items": items}
            orders[order_id].update(address=dict(address), payment_method_id=payment["id"])
            order_ids.append(order_id)
    return {"products": products, "users": users, "orders": orders, "transfers": 0}


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _order(context: ToolContext, order_id: str) -> dict[str, Any]:
    order: dict[str, Any] | None = db_of(context)["orders"].get(order_id)
    if order is None:
        raise ToolError(f"order {order_id!r} not found (order ids look like #W1234567)")
    return order


def _items(order: dict[str, Any], item_ids: list[str]) -> list[dict[str, Any]]:
    if not item_ids:
        raise ToolError("item_ids: name at least one item of the order")
    pool = list(order["items"])
    chosen = []
    for item_id in item_ids:
        match = next((it for it in pool if it["item_id"] == item_id), None)
        if match is None:
            raise ToolError(f"item {item_id!r} is not in the order (or is named twice)")
        pool.remove(match)
        chosen.append(match)
    return chosen


@tool
def find_user_id_by_email(email: str, context: ToolContext) -> str:
    """Find a user's id by their email address.

    Args:
        email: The email address on the account.
    """
    for user_id, user in db_of(context)["users"].items():
        if user["email"] == email.strip().lower():
            return user_id
    raise ToolError(f"no user with email {email!r}")


@tool
def find_user_id_by_name_zip(
    first_name: str, last_name: str, zip_code: str, context: ToolContext
) -> str:
    """Find a user's id by their first name, last name and zip code.

    Args:
        first_name: The user's first name.
        last_name: The user's last name.
        zip_code: The zip code of the user's address.
    """
    for user_id, user in db_of(context)["users"].items():
        name = user["name"]
        if (name["first"].lower(), name["last"].lower(), user["zip"]) == (
            first_name.strip().lower(),
            last_name.strip().lower(),
            zip_code.strip(),
        ):
            return user_id
    raise ToolError("no user matches that name and zip code")


@tool
def get_user_details(user_id: str, context: ToolContext) -> str:
    """Get a user's name, address, payment methods and order ids.

    Args:
        user_id: The user's id, e.g. ava_kim_01.
    """
    user = db_of(context)["users"].get(user_id)
    if user is None:
        raise ToolError(f"user {user_id!r} not found")
    return _dump(user)


@tool
def get_order_details(order_id: str, context: ToolContext) -> str:
    """Get an order's status, items (with prices), address and payment method.

    Args:
        order_id: The order id, e.g. #W0123456.
    """
    order = _order(context, order_id)
    return _dump({**order, "total": money(sum(it["price"] for it in order["items"]))})


@tool
def get_product_details(product_id: str, context: ToolContext) -> str:
    """Get a product's variants: each item id with its options, price and availability.

    Args:
        product_id: The product id, e.g. p1.
    """
    product = db_of(context)["products"].get(product_id)
    if product is None:
        raise ToolError(f"product {product_id!r} not found")
    return _dump(product)


@tool
def cancel_pending_order(order_id: str, reason: str, context: ToolContext) -> str:
    """Cancel a pending order; the total is refunded to its payment method.

    Args:
        order_id: The order id.
        reason: "no longer needed" or "ordered by mistake".
    """
    order = _order(context, order_id)
    if order["status"] != "pending":
        raise ToolError(
            f"order {order_id} is {order['status']}; only pending orders can be cancelled"
        )
    if reason not in CANCEL_REASONS:
        raise ToolError(f"reason must be one of {', '.join(repr(r) for r in CANCEL_REASONS)}")
    refund = sum(it["price"] for it in order["items"])
    order.update(status="cancelled", cancel_reason=reason, refund=refund)
    return f"Order {order_id} cancelled; {money(refund)} refunded to {order['payment_method_id']}."


@tool
def modify_pending_order_address(
    order_id: str, address1: str, city: str, zip_code: str, context: ToolContext
) -> str:
    """Change the shipping address of a pending order.

    Args:
        order_id: The order id.
        address1: Street and number, e.g. 12 Oak St.
        city: The city.
        zip_code: The zip code.
    """
    order = _order(context, order_id)
    if order["status"] != "pending":
        raise ToolError(
            f"order {order_id} is {order['status']}; only pending orders can be modified"
        )
    order["address"] = {"address1": address1.strip(), "city": city.strip(), "zip": zip_code.strip()}
    return f"The shipping address of order {order_id} is now {_dump(order['address'])}."


@tool
def return_delivered_order_items(order_id: str, item_ids: list[str], context: ToolContext) -> str:
    """Return items of a delivered order; their price is refunded to the order's payment method.

    Args:
        order_id: The order id.
        item_ids: The item ids to return.
    """
    order = _order(context, order_id)
    if order["status"] != "delivered":
        raise ToolError(
            f"order {order_id} is {order['status']}; only delivered orders take returns"
        )
    items = _items(order, item_ids)
    refund = sum(it["price"] for it in items)
    order.update(status="return requested", returned=sorted(item_ids), refund=refund)
    return f"Return of {len(items)} item(s) requested; {money(refund)} will be refunded."


@tool
def exchange_delivered_order_items(
    order_id: str, item_ids: list[str], new_item_ids: list[str], context: ToolContext
) -> str:
    """Exchange items of a delivered order for other variants of the same products.

    Args:
        order_id: The order id.
        item_ids: The item ids to exchange.
        new_item_ids: The new item ids, one per exchanged item, in the same order.
    """
    order = _order(context, order_id)
    if order["status"] != "delivered":
        raise ToolError(
            f"order {order_id} is {order['status']}; only delivered orders take exchanges"
        )
    items = _items(order, item_ids)
    if len(new_item_ids) != len(items):
        raise ToolError("new_item_ids: give one new item per exchanged item")
    products = db_of(context)["products"]
    difference = 0
    for old, new_id in zip(items, new_item_ids, strict=True):
        variant = products[old["product_id"]]["variants"].get(new_id)
        if variant is None:
            raise ToolError(f"{new_id!r} is not a variant of product {old['product_id']}")
        if not variant["available"]:
            raise ToolError(f"item {new_id!r} is not available")
        difference += variant["price"] - old["price"]
    order.update(
        status="exchange requested", exchanged=dict(zip(item_ids, new_item_ids, strict=True))
    )
    order["price_difference"] = difference
    sign = "to pay" if difference >= 0 else "to be refunded"
    return f"Exchange requested; price difference {money(abs(difference))} {sign}."


@tool
def transfer_to_human_agents(summary: str, context: ToolContext) -> str:
    """Transfer the user to a human agent; only when the user asks for one or the request is
    outside the policy.

    Args:
        summary: The user's issue in one or two sentences.
    """
    db_of(context)["transfers"] += 1
    return "Transfer successful."


TOOLS = [
    find_user_id_by_email,
    find_user_id_by_name_zip,
    get_user_details,
    get_order_details,
    get_product_details,
    cancel_pending_order,
    modify_pending_order_address,
    return_delivered_order_items,
    exchange_delivered_order_items,
    transfer_to_human_agents,
]
WRITE_TOOLS = frozenset(
    {
        "cancel_pending_order",
        "modify_pending_order_address",
        "return_delivered_order_items",
        "exchange_delivered_order_items",
    }
)
