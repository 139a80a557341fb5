"""The retail domain's 40 seeded tasks: a user's scenario and the expert's gold plan for each.

A task is one of seven kinds (cancel a pending order, change its address, return or exchange
items of a delivered order, ask for an order's total, ask for something the policy forbids,
ask for a human) over the database of variant ``data["db_seed"]``. Its data holds:

- ``user``: the simulated user's scenario (``instructions`` for a model, and the facts the
  scripted user answers from: identity, order, reason, new address, opening line);
- ``plan``: the gold conversation, a list of steps ``["say", text]`` or ``["call", tool, args]``;
  the expected final database is the seeded one after the plan's writes;
- ``mistake``: the same plan with one wrong write (what a verifier must score 0);
- ``required_tools``: the writes the user waits for before it may stop;
- ``outputs``: strings the agent must have said (a refund amount, a total).
"""

from __future__ import annotations

import random
from typing import Any

from trajforge.envs.builtin.retail_db import CANCEL_REASONS, CITIES, STREETS, build_db, money
from trajforge.envs.taskset import TEST, TRAIN
from trajforge.schema import Task

KINDS = ("cancel", "address", "return", "exchange", "info", "refuse", "transfer")
TASK_COUNT = 40
ANYTHING_ELSE = "Is there anything else I can help with?"

Step = list[Any]


def _say(text: str) -> Step:
    return ["say", text]


def _call(name: str, **arguments: Any) -> Step:
    return ["call", name, arguments]


def _identify(user: dict[str, Any], by: str) -> list[Step]:
    if by == "email":
        ask = _say(
            "I can help with that. First, could you tell me the email address on your account?"
        )
        return [ask, _call("find_user_id_by_email", email=user["email"])]
    ask = _say(
        "I can help with that. First, could you tell me your first name, last name and zip code?"
    )
    name = user["name"]
    found = _call(
        "find_user_id_by_name_zip",
        first_name=name["first"],
        last_name=name["last"],
        zip_code=user["zip"],
    )
    return [ask, found]


def _confirm(action: str) -> Step:
    return _say(f"To confirm: {action} Shall I proceed (yes/no)?")


def _pick(rng: random.Random, db: dict[str, Any], kind: str) -> tuple[str, str]:
    """A (user id, order id) fit for ``kind``."""
    want = "pending" if kind in ("cancel", "address", "info") else "delivered"
    orders = sorted(db["orders"].items())
    if kind == "exchange":
        orders = [(o, d) for o, d in orders if _exchange_target(db, d) is not None]
    fit = [(d["user_id"], o) for o, d in orders if d["status"] == want]
    return rng.choice(fit)


def _exchange_target(db: dict[str, Any], order: dict[str, Any]) -> tuple[str, str] | None:
    """The first (item id, new item id) of ``order`` with another available variant."""
    for item in order["items"]:
        variants = db["products"][item["product_id"]]["variants"]
        for new_id, variant in sorted(variants.items()):
            if new_id != item["item_id"] and variant["available"]:
                return item["item_id"], new_id
    return None


def _describe(db: dict[str, Any], item_id: str, product_id: str) -> str:
    product = db["products"][product_id]
    options = product["variants"][item_id]["options"]
    return f"{options['color']} {options['size']} {product['name']}"


def _scenario(kind: str, rng: random.Random, db: dict[str, Any]) -> dict[str, Any]:
    user_id, order_id = _pick(rng, db, kind)
    user, order = db["users"][user_id], db["orders"][order_id]
    total = sum(it["price"] for it in order["items"])
    pm = order["payment_method_id"]
    by = rng.choice(("email", "name_zip"))
    steps = _identify(user, by)
    steps.append(_call("get_order_details", order_id=order_id))
    facts: dict[str, Any] = {"order_id": order_id}
    outputs: list[str] = []
    other_pending = next(o for o in user["orders"] if db["orders"][o]["status"] == "pending")
    wrong_write = _call(
        "modify_pending_order_address",
        order_id=other_pending,
        address1="1 Wrong Way",
        city="Nowhere",
        zip_code="00000",
    )
    if kind == "cancel":
        reason = rng.choice(CANCEL_REASONS)
        facts.update(
            reason=reason,
            goal=f"cancel order {order_id}",
            opening=f"Hi, I want to cancel my order {order_id}.",
        )
        steps.append(
            _say(
                f"Order {order_id} is pending with {len(order['items'])} item(s), total "
                f"{money(total)}. What is the reason for cancelling: 'no longer needed' or "
                "'ordered by mistake'?"
            )
        )
        write = _call("cancel_pending_order", order_id=order_id, reason=reason)
        other_reason = next(r for r in CANCEL_REASONS if r != reason)
        wrong_write = _call("cancel_pending_order", order_id=order_id, reason=other_reason)
        steps.append(
            _confirm(
                f"cancel order {order_id} ({reason}); {money(total)} will be refunded to {pm}."
            )
        )
        done = f"Done: order {order_id} is cancelled and {money(total)} will be refunded to {pm}."
        outputs.append(money(total))
    elif kind == "address":
        city, zip_code = rng.choice(CITIES)
        address = {
            "address1": f"{rng.randint(10, 999)} {rng.choice(STREETS)}",
            "city": city,
            "zip": zip_code,
        }
        facts.update(new_address=address, goal=f"change the shipping address of order {order_id}")
        facts["opening"] = f"Hello, I need to change the shipping address of my order {order_id}."
        steps.append(_say("What is the new address (street, city and zip code)?"))
        text = f"{address['address1']}, {address['city']} {address['zip']}"
        args = {
            "order_id": order_id,
            "address1": address["address1"],
            "city": city,
            "zip_code": zip_code,
        }
        write = _call("modify_pending_order_address", **args)
        wrong_write = _call("modify_pending_order_address", **{**args, "zip_code": "99999"})
        steps.append(_confirm(f"ship order {order_id} to {text}."))
        done = f"Done: order {order_id} will be shipped to {text}."
    elif kind == "return":
        item = rng.choice(order["items"])
        label = _describe(db, item["item_id"], item["product_id"])
        facts.update(
            goal=f"return the {label} of order {order_id}",
            opening=f"Hi, I'd like to return the {label} from my order {order_id}.",
        )
        write = _call("return_delivered_order_items", order_id=order_id, item_ids=[item["item_id"]])
        others = [it["item_id"] for it in order["items"] if it["item_id"] != item["item_id"]]
        wrong_items = others[:1] or [item["item_id"], item["item_id"]]
        wrong_write = _call("return_delivered_order_items", order_id=order_id, item_ids=wrong_items)
        if len(wrong_items) == 2:  # a one-item order: the wrong write returns it and an extra
            wrong_write = _call(
                "cancel_pending_order", order_id=other_pending, reason=CANCEL_REASONS[0]
            )
        steps.append(
            _confirm(
                f"return the {label} ({item['item_id']}) of order {order_id}; {money(item['price'])} will be refunded to {pm}."
            )
        )
        done = f"Done: the return is requested and {money(item['price'])} will be refunded to {pm}."
        outputs.append(money(item["price"]))
    elif kind == "exchange":
        target = _exchange_target(db, order)
        assert target is not None  # _pick chose an order that has one
        old_id, new_id = target
        old = next(it for it in order["items"] if it["item_id"] == old_id)
        variants = db["products"][old["product_id"]]["variants"]
        new_label = _describe(db, new_id, old["product_id"])
        facts.update(
            goal=f"exchange an item of order {order_id}",
            opening=f"Hi, I want to exchange the {_describe(db, old_id, old['product_id'])} in my order {order_id} for a {new_label}.",
        )
        steps.append(_call("get_product_details", product_id=old["product_id"]))
        difference = variants[new_id]["price"] - old["price"]
        word = "to pay" if difference >= 0 else "to be refunded"
        write = _call(
            "exchange_delivered_order_items",
            order_id=order_id,
            item_ids=[old_id],
            new_item_ids=[new_id],
        )
        alternatives = [
            v for v, d in sorted(variants.items()) if d["available"] and v not in (old_id, new_id)
        ]
        wrong_write = _call(
            "exchange_delivered_order_items",
            order_id=order_id,
            item_ids=[old_id],
            new_item_ids=alternatives[:1] or [old_id],
        )
        steps.append(
            _confirm(
                f"exchange {old_id} for {new_id} ({new_label}) in order {order_id}; the price difference is {money(abs(difference))} {word}."
            )
        )
        done = f"Done: the exchange is requested; the price difference is {money(abs(difference))} {word}."
        outputs.append(money(abs(difference)))
    elif kind == "info":
        facts.update(
            goal=f"learn the total of order {order_id}",
            opening=f"Hi, how much did I pay in total for my order {order_id}?",
        )
        steps.append(
            _say(
                f"Order {order_id} is {order['status']}; its total is {money(total)}. {ANYTHING_ELSE}"
            )
        )
        outputs.append(money(total))
        write = None
    elif kind == "refuse":
        facts.update(
            goal=f"cancel order {order_id} (it was delivered: the policy forbids it)",
            opening=f"Hi, please cancel my order {order_id}.",
        )
        steps.append(
            _say(
                f"I'm sorry, order {order_id} has already been delivered, so it cannot be "
                f"cancelled; delivered orders can only be returned or exchanged. {ANYTHING_ELSE}"
            )
        )
        outputs.append("delivered")
        write = None
    else:  # transfer
        facts.update(
            goal="talk to a human agent about a damaged package",
            opening=f"Hi, a package from order {order_id} arrived damaged. I want to talk to a human agent.",
        )
        write = _call(
            "transfer_to_human_agents",
            summary=f"Order {order_id} arrived damaged; the user asks for a human agent.",
        )
    if write is not None:
        steps.append(write)
    if kind not in ("info", "refuse", "transfer"):
        steps.append(_say(f"{done} {ANYTHING_ELSE}"))
    mistake = [wrong_write if s == write else s for s in steps]
    if write is None or write == wrong_write or kind == "transfer":
        mistake = [*steps[:-1], wrong_write, steps[-1]]
    name = user["name"]
    facts.update(
        identify_by=by, email=user["email"], first=name["first"], last=name["last"], zip=user["zip"]
    )
    required = [write[1]] if write is not None and kind != "transfer" else []
    return {
        "user": facts,
        "plan": steps,
        "mistake": mistake,
        "required_tools": required,
        "outputs": outputs,
    }


def _instructions(facts: dict[str, Any]) -> str:
    identity = (
        f"your email is {facts['email']}"
        if facts["identify_by"] == "email"
        else f"you do not remember your email; your name is {facts['first']} {facts['last']} "
        f"and your zip code is {facts['zip']}"
    )
    known = [
        f"You are {facts['first']} {facts['last']}. Your goal: {facts['goal']}.",
        f"If asked, {identity}.",
    ]
    if "reason" in facts:
        known.append(f"The reason is: {facts['reason']}.")
    if "new_address" in facts:
        a = facts["new_address"]
        known.append(f"The new address is {a['address1']}, {a['city']} {a['zip']}.")
    known.append(f"Start with: {facts['opening']}")
    return " ".join(known)


def all_tasks() -> list[Task]:
    """The 40 tasks in a fixed order; every fourth is a test task (10 test, 30 train)."""
    tasks = []
    for i in range(TASK_COUNT):
        kind, db_seed = KINDS[i % len(KINDS)], i // 4
        rng = random.Random(f"retail-task:{i}")
        data = _scenario(kind, rng, build_db(db_seed))
        data["user"]["instructions"] = _instructions(data["user"])
        data.update(kind=kind, db_seed=db_seed)
        split = TEST if i % 4 == 3 else TRAIN
        prompt = f"{data['user']['goal']} (user {data['user']['first']} {data['user']['last']})"
        tasks.append(
            Task(id=f"retail-{i:02d}-{kind}", prompt=prompt, env="retail", data=data, split=split)
        )
    return tasks
