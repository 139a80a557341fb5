"""retail blueprints: a customer's request on any of their orders, and the gold plan for it.

The proposer picks a database variant beyond the hand-written tasks' (``FIRST_DB_SEED`` on, so
no held-out task shares a database with a synthesized one), a user, any one of their orders
whatever its status, a request (cancel, change the address, return an item, exchange it for
another variant, ask for the total) and writes the plan the hand-written tasks' plans follow:
authenticate, read the order, ask what is missing, confirm, write, report. A request the policy
or the data forbid (cancelling a delivered order, exchanging for a variant out of stock) gives
a plan whose write the env refuses: executing it is what finds that out.
"""

from __future__ import annotations

import random
from typing import Any

from trajforge.envs.builtin.retail_db import CANCEL_REASONS, CITIES, STREETS, build_db, money
from trajforge.envs.builtin.retail_tasks import (
    ANYTHING_ELSE,
    _call,
    _confirm,
    _describe,
    _identify,
    _instructions,
    _say,
)
from trajforge.envs.synthesizers.base import Action, Blueprint, content_id
from trajforge.schema import Task

ENV = "retail"
FIRST_DB_SEED = 100
DB_VARIANTS = 20
REQUESTS = ("cancel", "address", "return", "exchange", "info")


def propose(rng: random.Random) -> Blueprint:
    """One retail blueprint (see the module's docstring)."""
    db_seed = FIRST_DB_SEED + rng.randrange(DB_VARIANTS)
    db = build_db(db_seed)
    user_id = rng.choice(sorted(db["users"]))
    user = db["users"][user_id]
    order_id = rng.choice(user["orders"])
    order = db["orders"][order_id]
    kind = rng.choice(REQUESTS)
    by = rng.choice(("email", "name_zip"))
    steps = [*_identify(user, by), _call("get_order_details", order_id=order_id)]
    facts: dict[str, Any] = {"order_id": order_id}
    total, pm = sum(it["price"] for it in order["items"]), order["payment_method_id"]
    outputs: list[str] = []
    write: list[Any] | None = None
    if kind == "cancel":
        reason = rng.choice(CANCEL_REASONS)
        facts.update(reason=reason, goal=f"cancel order {order_id}")
        facts["opening"] = f"Hi, I want to cancel my order {order_id}."
        steps.append(_say(f"Order {order_id} has {len(order['items'])} item(s), total {money(total)}. What is the reason for cancelling: 'no longer needed' or 'ordered by mistake'?"))  # fmt: skip
        steps.append(_confirm(f"cancel order {order_id} ({reason}); {money(total)} will be refunded to {pm}."))  # fmt: skip
        write = _call("cancel_pending_order", order_id=order_id, reason=reason)
        done = f"Done: order {order_id} is cancelled and {money(total)} will be refunded to {pm}."
        outputs.append(money(total))
    elif kind == "address":
        city, zip_code = rng.choice(CITIES)
        street = f"{rng.randint(10, 999)} {rng.choice(STREETS)}"
        facts.update(new_address={"address1": street, "city": city, "zip": zip_code})
        facts["goal"] = f"change the shipping address of order {order_id}"
        facts["opening"] = f"Hello, I need to change the shipping address of my order {order_id}."
        steps.append(_say("What is the new address (street, city and zip code)?"))
        text = f"{street}, {city} {zip_code}"
        steps.append(_confirm(f"ship order {order_id} to {text}."))
        write = _call("modify_pending_order_address", order_id=order_id, address1=street, city=city, zip_code=zip_code)  # fmt: skip
        done = f"Done: order {order_id} will be shipped to {text}."
    elif kind in ("return", "exchange"):
        item = rng.choice(order["items"])
        label = _describe(db, item["item_id"], item["product_id"])
        if kind == "return":
            facts.update(goal=f"return the {label} of order {order_id}")
            facts["opening"] = f"Hi, I'd like to return the {label} from my order {order_id}."
            steps.append(_confirm(f"return the {label} ({item['item_id']}) of order {order_id}; {money(item['price'])} will be refunded to {pm}."))  # fmt: skip
            write = _call("return_delivered_order_items", order_id=order_id, item_ids=[item["item_id"]])  # fmt: skip
            done = f"Done: the return is requested and {money(item['price'])} will be refunded to {pm}."  # fmt: skip
            outputs.append(money(item["price"]))
        else:
            variants = db["products"][item["product_id"]]["variants"]
            new_id = rng.choice([v for v in sorted(variants) if v != item["item_id"]])
            new_label = _describe(db, new_id, item["product_id"])
            difference = variants[new_id]["price"] - item["price"]
            word = "to pay" if difference >= 0 else "to be refunded"
            facts.update(goal=f"exchange an item of order {order_id}")
            facts["opening"] = f"Hi, I want to exchange the {label} in my order {order_id} for a {new_label}."  # fmt: skip
            steps.append(_call("get_product_details", product_id=item["product_id"]))
            steps.append(_confirm(f"exchange {item['item_id']} for {new_id} ({new_label}) in order {order_id}; the price difference is {money(abs(difference))} {word}."))  # fmt: skip
            write = _call("exchange_delivered_order_items", order_id=order_id, item_ids=[item["item_id"]], new_item_ids=[new_id])  # fmt: skip
            done = f"Done: the exchange is requested; the price difference is {money(abs(difference))} {word}."  # fmt: skip
            outputs.append(money(abs(difference)))
    else:
        facts.update(goal=f"learn the total of order {order_id}")
        facts["opening"] = f"Hi, how much did I pay in total for my order {order_id}?"
        steps.append(_say(f"Order {order_id} is {order['status']}; its total is {money(total)}. {ANYTHING_ELSE}"))  # fmt: skip
        outputs.append(money(total))
    if write is not None:
        steps += [write, _say(f"{done} {ANYTHING_ELSE}")]
    name = user["name"]
    facts.update(identify_by=by, email=user["email"], first=name["first"], last=name["last"], zip=user["zip"])  # fmt: skip
    facts["instructions"] = _instructions(facts)
    data = {"user": facts, "plan": steps, "required_tools": [write[1]] if write else [],
            "outputs": outputs, "kind": kind, "db_seed": db_seed}  # fmt: skip
    draft = Task(id="draft", prompt=f"{facts['goal']} (user {facts['first']} {facts['last']})", env=ENV, data=data, split="train")  # fmt: skip
    task = draft.model_copy(update={"id": content_id(ENV, draft)})
    actions: tuple[Action, ...] = tuple((s[1], s[2]) for s in steps if s[0] == "call")
    return Blueprint(task, actions)
