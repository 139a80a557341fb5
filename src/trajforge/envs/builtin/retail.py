"""retail: serve a simulated customer of an online shop through tools, under a written policy.

The agent authenticates the user, reads orders and products, and makes writes (cancel, change
an address, return, exchange, transfer to a human) after the user's explicit confirmation.
Reward 1 when the final database equals the task's expected state (the seeded database after
the gold plan's writes) AND every required output (a refund amount, a total) appears in one of
the agent's messages; else 0. The scripted expert follows the task's gold plan; the scripted
user answers from the task's facts by keywords of the agent's last message.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from trajforge.envs.builtin.retail_db import TOOLS, build_db
from trajforge.envs.builtin.retail_tasks import all_tasks
from trajforge.envs.taskset import TEST, TRAIN, TaskSet
from trajforge.envs.tool import ToolContext
from trajforge.envs.user_sim import UserSignal, UserSimEnv, plan_reply
from trajforge.errors import ConfigError
from trajforge.schema import Evaluator, EvaluatorKind, Evidence, Message, Role, Score, Task

NAME = "retail"
DESCRIPTION = (
    "Serve a simulated shop customer under a policy: orders, returns, exchanges (tau-bench style)."
)
POLICY = """\
You are a customer-service agent of an online shop. Follow this policy.
- Authenticate the user first: find their user id by email, or by first name, last name and
  zip code. Do nothing else for a user you have not authenticated.
- Only pending orders can be cancelled (reason "no longer needed" or "ordered by mistake") or
  have their shipping address changed. Only delivered orders can have items returned or
  exchanged (for another available variant of the same product). Refunds go to the order's
  payment method.
- Before any write (cancel, address change, return, exchange), state exactly what you will do
  and the amount involved, and ask the user to confirm with yes. Act only after a yes.
- After a write, tell the user the result, with the amount refunded or to pay.
- Refuse what the policy forbids and say why. Transfer to a human agent only when the user asks
  for one. Make one tool call at a time; never invent information."""
MAX_TURNS = 16
MAX_USER_TURNS = 8


@cache
def _tasks() -> tuple[Task, ...]:
    return tuple(all_tasks())


def generate_tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
    """``n`` of the split's tasks (30 train, 10 test) in an order fixed by ``seed``."""
    if split not in (TRAIN, TEST):
        raise ConfigError(f"split: must be {TRAIN!r} or {TEST!r}, got {split!r}")
    pool = TaskSet([t for t in _tasks() if t.split == split], name=NAME)
    if n > len(pool):
        raise ConfigError(f"env retail has {len(pool)} {split} tasks; {n} were asked for")
    return list(pool.shuffled(seed).take(n))


def expert(task: Task, messages: list[Message]) -> str | None:
    """The task's gold plan, one step per turn."""
    return plan_reply(task.data["plan"], messages)


def mistaken_expert(task: Task, messages: list[Message]) -> str | None:
    """The gold plan with one wrong write (the verifier must give it 0)."""
    return plan_reply(task.data["mistake"], messages)


def scripted_user(task: Task, view: list[Message]) -> str | None:
    """The user's reply from the task's facts, by keywords of the agent's last message.

    A stop the env refused (the user spoke after saying ``###STOP###``) makes it give up."""
    facts = task.data["user"]
    said = [m.text for m in view if m.role is Role.ASSISTANT]
    if not said:
        return str(facts["opening"])
    if UserSignal.STOP.value in said[-1]:
        return UserSignal.OUT_OF_SCOPE.value
    text = view[-1].text.lower()
    name_zip = f"My name is {facts['first']} {facts['last']} and my zip code is {facts['zip']}."
    if "transferr" in text:
        return UserSignal.TRANSFER.value
    if "(yes/no)" in text:
        return "Yes, please proceed."
    if "anything else" in text or "?" not in text:
        return f"No, that's all. Thank you! {UserSignal.STOP.value}"
    if "email" in text:
        if facts["identify_by"] == "email":
            return f"My email is {facts['email']}."
        return f"I don't remember my email. {name_zip}"
    if "address" in text and "new_address" in facts:
        a = facts["new_address"]
        return f"The new address is {a['address1']}, {a['city']} {a['zip']}."
    if "zip" in text or "name" in text:
        return name_zip
    if "reason" in text and "reason" in facts:
        return f"It's {facts['reason']}."
    if "order" in text:
        return f"It's order {facts['order_id']}."
    if said.count(str(facts["opening"])) < 2:
        return str(facts["opening"])
    return UserSignal.OUT_OF_SCOPE.value


async def expected_db(task: Task) -> dict[str, Any]:
    """The database the task should end with: the seeded one after the plan's writes."""
    context = ToolContext(task=task, state={"db": build_db(int(task.data["db_seed"]))})
    tools = {t.name: t for t in TOOLS}
    for step in task.data["plan"]:
        if step[0] == "call":
            await tools[step[1]].invoke(step[2], context)
    return dict(context.state["db"])


async def verify(evidence: Evidence) -> Score:
    """1 when the final database is the expected one and every required output was said."""
    task = evidence.task
    db_ok = evidence.state.get("db") == await expected_db(task)
    said = " ".join(m.text for m in evidence.messages if m.role is Role.ASSISTANT).lower()
    missing = [o for o in task.data.get("outputs", []) if o.lower() not in said]
    value = float(db_ok and not missing)
    why = [] if db_ok else ["the final database differs from the expected one"]
    why += [f"never said {o!r}" for o in missing]
    return Score(
        name="retail",
        value=value,
        explanation="; ".join(why) or "database as expected and outputs communicated",
        evaluator=Evaluator(kind=EvaluatorKind.ENV, name="retail"),
        dimensions={"db": float(db_ok), "communicate": float(not missing)},
    )


def _setup(context: ToolContext) -> None:
    context.state["db"] = build_db(int(context.task.data["db_seed"]))


def make_env(**kwargs: Any) -> UserSimEnv:
    options: dict[str, Any] = {
        "max_turns": MAX_TURNS,
        "max_user_turns": MAX_USER_TURNS,
        "tool_timeout": 10.0,
        "system_prompt": POLICY,
    }
    options.update(kwargs)
    return UserSimEnv(
        TOOLS,
        verifier=verify,
        name=NAME,
        description=DESCRIPTION,
        expert=expert,
        setup=_setup,
        ending_tools=("transfer_to_human_agents",),
        user_script=scripted_user,
        **options,
    )
