"""calculator: chain random calculator calls, then ask for the number the chain reached.

The explorer starts from a number and applies two to four operations, each a ``calculator``
call on the previous result (whole numbers only: it divides by a divisor, subtracts no more
than it has). The relabelled task states the chain in words ("Start with 12. Multiply by 7,
then subtract 5. What number do you end with?"); its answer is the last result the tool gave,
which the env's verifier checks; its ``data["steps"]`` are the calls made, so the env's expert
solves it. The wrong answer is the same calls and that number plus one.
"""

from __future__ import annotations

import random
import re

from trajforge.envs.builtin.plan import accepted_results
from trajforge.envs.registry import get_env
from trajforge.envs.synthesizers.base import Candidate, Synthesizer, new_task, turn_rng
from trajforge.formats import format_tool_call
from trajforge.schema import ExpertFn, Message, Role, Task, Trajectory

ENV = "calculator"
VERBS = {"+": "add", "-": "subtract", "*": "multiply by", "/": "divide by"}
_STEP = re.compile(r"^(-?\d+) ([-+*/]) (\d+)$")
MIN_CHAIN, MAX_CHAIN = 2, 4


def _answer(value: int) -> str:
    return f"The answer is {value}."


def _next_step(rng: random.Random, value: int) -> str:
    """One whole-number operation on ``value``."""
    op, operand = rng.choice("+-*/"), rng.randint(2, 12)
    if op == "/":
        divisors = [d for d in range(2, 13) if value % d == 0]
        if not divisors:
            op = "*"
        else:
            operand = rng.choice(divisors)
    if op == "-" and operand > value:
        op = "+"
    return f"{value} {op} {operand}"


class CalculatorSynthesizer(Synthesizer):
    """Reverse task synthesis for the calculator env."""

    env = ENV

    def start_tasks(self, n: int, seed: int) -> list[Task]:
        return get_env(ENV).tasks(n, seed=seed, split="train")

    def explorer(self, seed: int) -> ExpertFn:
        def explore(task: Task, messages: list[Message]) -> str | None:
            results = accepted_results(messages)
            rng = turn_rng(seed, "explore", task, len(results))
            length = turn_rng(seed, "chain", task, 0).randint(MIN_CHAIN, MAX_CHAIN)
            value = int(float(results[-1].text)) if results else rng.randint(2, 60)
            if len(results) >= length:
                return _answer(value)
            return format_tool_call("calculator", {"expression": _next_step(rng, value)})

        return explore

    def relabel(self, source: Trajectory, min_steps: int) -> Candidate | str:
        results = {m.tool_call_id: m.text for m in accepted_results(source.messages)}
        steps: list[str] = []
        value: int | None = None
        for message in source.messages:
            if message.role is not Role.ASSISTANT:
                continue
            for call in message.tool_calls:
                if call.name != "calculator" or call.id not in results:
                    continue
                expression = str(call.arguments.get("expression", ""))
                match = _STEP.match(expression)
                if match is None or (value is not None and int(match.group(1)) != value):
                    return "the calls are not one chain of whole-number steps"
                result = float(results[call.id])
                if not result.is_integer():
                    return "a step left whole numbers"
                steps.append(expression)
                value = int(result)
        if value is None or len(steps) < min_steps:
            return f"too easy: fewer than {min_steps} steps"
        first = _STEP.match(steps[0])
        assert first is not None  # every step matched above
        words = [f"{VERBS[m.group(2)]} {m.group(3)}" for s in steps if (m := _STEP.match(s))]
        said = ", ".join(words[:-1]) + f", then {words[-1]}" if len(words) > 1 else words[0]
        prompt = (
            f"Start with {first.group(1)}. {said[0].upper()}{said[1:]}. What number do you end "
            "with? Use the calculator for each step."
        )
        task = new_task(ENV, source, prompt, answer=value, data={"steps": steps})
        calls = tuple(format_tool_call("calculator", {"expression": s}) for s in steps)
        return Candidate(task, (*calls, _answer(value)), (*calls, _answer(value + 1)))
