"""calculator: the expert solves 100 seeded tasks, an empty policy scores 0, the evaluator is safe."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from episodes import rewards
from trajforge.envs.builtin import calculator
from trajforge.envs.builtin.arith import safe_eval
from trajforge.envs.tool import ToolError
from trajforge.formats.tool_calls import TOOL_CALL_OPEN
from trajforge.schema import ExpertFn, Message, Role, Task
from trajforge.schema.evidence import Evidence

pytestmark = pytest.mark.timeout(120)


def run_all(tasks: list[Task], reply: ExpertFn) -> list[float]:
    return rewards(calculator.make_env, tasks, reply)


def test_expert_solves_100_seeded_tasks_with_one_call_per_turn() -> None:
    tasks = calculator.generate_tasks(100, seed=0)
    assert len({t.id for t in tasks}) == 100
    assert run_all(tasks, calculator.expert) == [1.0] * 100
    for task in tasks[:10]:
        for k, step in enumerate(task.data["steps"]):
            reply = calculator.expert(task, [])
            assert reply is not None and reply.count(TOOL_CALL_OPEN) == 1
            assert k > 0 or step in reply


def test_empty_policy_scores_zero() -> None:
    tasks = calculator.generate_tasks(100, seed=1)
    assert sum(run_all(tasks, lambda t, m: "I don't know.")) == 0.0


def test_tasks_are_deterministic_and_splits_disjoint() -> None:
    assert calculator.generate_tasks(20, seed=5) == calculator.generate_tasks(20, seed=5)
    train = {t.id for t in calculator.generate_tasks(300, seed=0)}
    test = {t.id for t in calculator.generate_tasks(50, seed=0, split="test")}
    assert train.isdisjoint(test)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("The answer is 42.", 42.0),
        ("the answer is: 1,234", 1234.0),
        ("So 3 apples, then 7 left", 7.0),
        ("The answer is -2.5", -2.5),
        ("I don't know.", None),
    ],
)
def test_parse_final_number(text: str, value: float | None) -> None:
    assert calculator.parse_final_number(text) == value


def test_verifier_uses_the_last_assistant_message_with_tolerance() -> None:
    task = Task(id="t", prompt="p", answer=21)

    def say(text: str) -> list[Message]:
        return [Message(role=Role.USER, content="q"), Message(role=Role.ASSISTANT, content=text)]

    assert calculator.verify(Evidence(task, say("The answer is 21."))) == 1.0
    assert calculator.verify(Evidence(task, say("The answer is 21.0000000001"))) == 1.0
    assert calculator.verify(Evidence(task, say("The answer is 22."))) == 0.0


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("9**9**9", "too large"),
        ("2**100000", "too large"),
        ("factorial(100000)", "too large"),
        ("(10**1000)*(10**1000)*(10**1000)*(10**1000)*(10**1000)", "more than"),
        ("__import__('os').system('true')", "unsupported syntax: Call"),
        ("__import__('os')", "unknown function '__import__'"),
        ("().__class__", "unsupported syntax"),
        ("x + 1", "unknown name"),
        ("1/0", "division by zero"),
        ("2^3", "write ** for powers"),
        ("1e308 * 10", "not a finite number"),
        ("'a' * 10", "only numbers"),
        ("1 +", "invalid expression"),
        ("1+" * 400 + "1", "longer than"),
        ("round(10**1000, -10**9)", "ndigits must be a whole number"),
        ("sqrt(10**1000)", "sqrt(): int too large to convert to float"),
        ("max()", "max(): max expected at least 1 argument"),
    ],
)
def test_evaluator_refuses_unsafe_or_huge_work_quickly(expression: str, error: str) -> None:
    started = time.perf_counter()
    with pytest.raises(ToolError, match=re.escape(error)):
        safe_eval(expression)
    assert time.perf_counter() - started < 0.5


def test_evaluator_computes_ordinary_arithmetic() -> None:
    assert safe_eval("12 * 7 - 5") == 79
    assert safe_eval("(84 - 4) / 4") == 20.0
    assert (
        safe_eval("2 ** 10 + sqrt(16) + factorial(5) + abs(-3) + 7 // 2 + 7 % 4")
        == 1024 + 4 + 120 + 3 + 3 + 3
    )


def test_calculator_tool_error_reaches_the_model_as_a_tool_message() -> None:
    env = calculator.make_env()

    async def go() -> str:
        await env.reset(calculator.generate_tasks(1)[0])
        return await env.call_tool("calculator", {"expression": "9**9**9"})

    assert asyncio.run(go()) == "Error: refused: 9**387420489 is too large to compute"
