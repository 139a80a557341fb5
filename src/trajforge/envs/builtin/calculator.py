"""calculator: multi-step arithmetic word problems solved with a safe ``calculator`` tool.

The expert makes exactly one calculator call per step, then answers ``The answer is N.``
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

from trajforge.envs.builtin.arith import format_number, safe_eval
from trajforge.envs.builtin.plan import PlannedCall, follow_plan
from trajforge.envs.taskset import TRAIN, generate_unique
from trajforge.envs.tool import tool
from trajforge.envs.tool_env import ToolEnv
from trajforge.schema import Evidence, Message, Task

NAME = "calculator"
DESCRIPTION = "Multi-step arithmetic word problems; one safe calculator tool."
SYSTEM_PROMPT = (
    "Use the calculator tool for each arithmetic step, one call per turn. "
    "When done, reply: The answer is N."
)
NAMES = ("Ann", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Ivy", "Jon", "Kim", "Leo", "Mia")


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, e.g. "12 * 7 - 5".
    """
    return format_number(safe_eval(expression))


def _steps(*exprs: str) -> list[str]:
    """Substitute each earlier result for ``{r0}``, ``{r1}``... to get concrete expressions."""
    results: list[str] = []
    concrete: list[str] = []
    for expr in exprs:
        step = expr.format(*results)
        concrete.append(step)
        results.append(format_number(safe_eval(step)))
    return concrete


def _apples(rng: random.Random) -> tuple[str, list[str]]:
    name, a, b = rng.choice(NAMES), rng.randint(3, 19), rng.randint(3, 12)
    c = rng.randint(1, a * b - 1)
    prompt = f"{name} buys {a} bags with {b} apples each and gives away {c} apples. How many apples are left?"
    return prompt, _steps(f"{a} * {b}", f"{{0}} - {c}")


def _train(rng: random.Random) -> tuple[str, list[str]]:
    a, b, c = rng.randint(40, 120), rng.randint(2, 9), rng.randint(5, 99)
    prompt = f"A train goes {a} km per hour for {b} hours, then {c} km more. How many km does it go in total?"
    return prompt, _steps(f"{a} * {b}", f"{{0}} + {c}")


def _share(rng: random.Random) -> tuple[str, list[str]]:
    name, c, q, b = rng.choice(NAMES), rng.randint(2, 9), rng.randint(3, 40), rng.randint(1, 60)
    a = b + c * q
    prompt = (
        f"{name} has {a} dollars, spends {b}, and splits the rest equally among {c} friends. "
        "How many dollars does each friend get?"
    )
    return prompt, _steps(f"{a} - {b}", f"{{0}} / {c}")


def _orchard(rng: random.Random) -> tuple[str, list[str]]:
    a, b = rng.randint(3, 15), rng.randint(4, 20)
    c, d = rng.randint(1, a * b // 2), rng.randint(1, 50)
    prompt = (
        f"An orchard has {a} rows of {b} trees. {c} trees are cut down and {d} are planted. "
        "How many trees are there now?"
    )
    return prompt, _steps(f"{a} * {b}", f"{{0}} - {c}", f"{{1}} + {d}")


def _shop(rng: random.Random) -> tuple[str, list[str]]:
    a, b, c, d = rng.randint(2, 30), rng.randint(3, 25), rng.randint(2, 30), rng.randint(3, 25)
    prompt = f"A shop sells {a} shirts at {b} dollars and {c} hats at {d} dollars. What is the total in dollars?"
    return prompt, _steps(f"{a} * {b}", f"{c} * {d}", "{0} + {1}")


def _pages(rng: random.Random) -> tuple[str, list[str]]:
    name, a, b, c = rng.choice(NAMES), rng.randint(5, 60), rng.randint(2, 14), rng.randint(100, 999)
    prompt = (
        f"A book has {c + a * b} pages. {name} reads {a} pages a day for {b} days. "
        "How many pages are left?"
    )
    return prompt, _steps(f"{a} * {b}", f"{c + a * b} - {{0}}")


TEMPLATES: tuple[Callable[[random.Random], tuple[str, list[str]]], ...] = (
    _apples,
    _train,
    _share,
    _orchard,
    _shop,
    _pages,
)


def _make_one(rng: random.Random) -> Task:
    prompt, steps = rng.choice(TEMPLATES)(rng)
    value = safe_eval(steps[-1])
    answer = int(value) if isinstance(value, float) and value.is_integer() else value
    return Task(id="draft", prompt=prompt, answer=answer, data={"steps": steps})


def generate_tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
    """``n`` distinct word problems; train and test never share one."""
    return generate_unique(NAME, _make_one, n, seed, split)


_ANSWER = re.compile(r"answer is\s*:?\s*\$?\s*(-?[\d,]*\.?\d+)", re.I)
_NUMBER = re.compile(r"-?\d[\d,]*\.?\d*|-?\.\d+")


def parse_final_number(text: str) -> float | None:
    """The number after "answer is", else the last number in ``text``; None if there is none."""
    match = _ANSWER.search(text)
    found = match.group(1) if match else (_NUMBER.findall(text) or [None])[-1]
    if found is None:
        return None
    try:
        return float(found.replace(",", "").rstrip("."))
    except ValueError:
        return None


def verify(evidence: Evidence) -> float:
    """1.0 when the final reply's number equals the gold answer (relative tolerance 1e-6)."""
    value = parse_final_number(evidence.answer or "")
    if value is None or evidence.task.answer is None:
        return 0.0
    gold = float(evidence.task.answer)
    return 1.0 if abs(value - gold) <= 1e-6 * max(1.0, abs(gold)) else 0.0


def expert(task: Task, messages: list[Message]) -> str | None:
    """One calculator call per step (counting successful results so far), then the answer."""
    plan: list[PlannedCall] = [("calculator", {"expression": s}) for s in task.data["steps"]]
    return follow_plan(plan, messages, f"The answer is {format_number(task.answer)}.")


def make_env(**kwargs: Any) -> ToolEnv:
    options: dict[str, Any] = {"max_turns": 8, "tool_timeout": 5.0, "system_prompt": SYSTEM_PROMPT}
    options.update(kwargs)
    return ToolEnv(
        [calculator],
        verifier=verify,
        name=NAME,
        description=DESCRIPTION,
        expert=expert,
        **options,
    )
