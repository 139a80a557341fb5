"""calculator: explore with random calculator calls, then tell the calls as a word problem.

The explorer keeps a running whole number and makes two to four ``calculator`` calls: it starts
from a number or from a product ("5 boxes of 12"), then adds, subtracts, multiplies, adds or
takes away a fresh product (two calls: ``a * b``, then the running number and that result),
and may end by dividing by a divisor. The labelling rule tells the moves as a story about one
person's things, names, nouns and wording drawn per task from short lists (a labelling
policy's job in OS-Genesis; the embedded model is too small to write them). Its names and
nouns are none of the env's; some of its phrases are the env's too ("gives away", "equally
among 3 friends", "are left"), as they are common English for the operation. A first version
stated the chain itself ("Start with 12. Multiply by 7..."): trained on those, the model used
the tool but could not map a story's words to operations (docs/benchmarks.md, Task
synthesis). The answer is the last result the tool gave, which the
env's verifier checks; ``data["steps"]`` are the calls made, so the env's expert solves it. The
wrong answer is the same calls and that number plus one.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from trajforge.envs.builtin.plan import accepted_results
from trajforge.envs.registry import get_env
from trajforge.envs.synthesizers.base import (
    STOP_REPLY,
    Candidate,
    Synthesizer,
    new_task,
    turn_rng,
)
from trajforge.formats import format_tool_call
from trajforge.schema import ExpertFn, Message, Role, Task, Trajectory

ENV = "calculator"
_STEP = re.compile(r"^(-?\d+) ([-+*/]) (\d+)$")
MIN_CHAIN, MAX_CHAIN = 2, 4
NAMES = ("Noor", "Omar", "Pia", "Quinn", "Rosa", "Sam", "Tess", "Uma", "Vic", "Wes", "Yara", "Zed")
THINGS = (
    ("marbles", "jar", "jars"),
    ("stickers", "sheet", "sheets"),
    ("cookies", "tray", "trays"),
    ("stamps", "album", "albums"),
    ("beads", "string", "strings"),
    ("tickets", "book", "books"),
    ("eggs", "carton", "cartons"),
    ("pencils", "box", "boxes"),
    ("cards", "pack", "packs"),
    ("coins", "stack", "stacks"),
)
"""Each kind of thing: its plural, and the container it comes in (singular, plural)."""


@dataclass(frozen=True)
class Step:
    """One call the explorer made: ``left op right`` and the whole number the tool returned."""

    left: int
    op: str
    right: int
    result: int

    @property
    def expression(self) -> str:
        return f"{self.left} {self.op} {self.right}"


def _steps(messages: list[Message]) -> list[Step] | str:
    """The accepted calls in order, or why they are not whole-number steps."""
    results = {m.tool_call_id: m.text for m in accepted_results(messages)}
    steps: list[Step] = []
    for message in messages:
        if message.role is not Role.ASSISTANT:
            continue
        for call in message.tool_calls:
            if call.name != "calculator" or call.id not in results:
                continue
            match = _STEP.match(str(call.arguments.get("expression", "")))
            result = float(results[call.id])
            if match is None or not result.is_integer():
                return "a step left whole numbers"
            left, op, right = match.groups()
            steps.append(Step(int(left), op, int(right), int(result)))
    return steps


def _awaits_join(steps: list[Step]) -> bool:
    """Whether the last call was a fresh product, whose second half (the running number and
    it, added or taken away) must come next."""
    return len(steps) >= 2 and steps[-1].op == "*" and steps[-1].left != steps[-2].result


def _answer(value: int) -> str:
    return f"The answer is {value}."


def _call(left: int, op: str, right: int) -> str:
    return format_tool_call("calculator", {"expression": f"{left} {op} {right}"})


def _next_call(rng: random.Random, steps: list[Step], calls_left: int) -> str:
    """The explorer's next call: a start, a move on the running number, or a fresh product's
    second half (the running number and the product, added or taken away)."""
    if not steps:
        if rng.random() < 0.5:
            return _call(rng.randint(2, 15), "*", rng.randint(2, 20))
        start, op = rng.randint(20, 200), rng.choice("+-")
        return _call(start, op, rng.randint(1, start - 1) if op == "-" else rng.randint(1, 60))
    if _awaits_join(steps):
        value, product = steps[-2].result, steps[-1].result
        op = "-" if product <= value and rng.random() < 0.5 else "+"
        return _call(value, op, product)
    value = steps[-1].result
    moves = ["+", "-", "*"] + (["product"] if calls_left >= 2 else [])
    divisors = [d for d in range(2, 10) if value % d == 0]
    if calls_left == 1 and divisors:
        moves.append("/")
    move = rng.choice(moves)
    if move == "product":
        groups = rng.randint(2, 12)
        each = rng.randint(2, 15)
        return _call(groups if groups != value else groups + 1, "*", each)
    if move == "/":
        return _call(value, "/", rng.choice(divisors))
    if move == "*":
        return _call(value, "*", rng.randint(2, 5))
    if move == "-" and value > 1:
        return _call(value, "-", rng.randint(1, value - 1))
    return _call(value, "+", rng.randint(1, 60))


def _story(steps: list[Step], rng: random.Random) -> str | None:
    """The steps told as a word problem, or None when they are not moves the story can tell
    (each call on the running number, or a fresh product then the number and it)."""
    name = rng.choice(NAMES)
    things, box, boxes = rng.choice(THINGS)
    first = steps[0]
    if first.op == "*":
        lines = [f"{name} has {first.left} {boxes} with {first.right} {things} in each."]
        rest, value = steps[1:], first.result
    else:
        lines = [f"{name} has {first.left} {things}."]
        rest, value = steps, first.left
    i = 0
    while i < len(rest):
        step = rest[i]
        if step.left == value:
            if step.op == "/":
                if i != len(rest) - 1:
                    return None
                return " ".join([*lines, *_shares(step.right, name, things, box, boxes, rng)])
            lines.append(_move(step, name, things, rng))
        elif step.op == "*" and i + 1 < len(rest):
            joined = rest[i + 1]
            if (joined.left, joined.right) != (value, step.result) or joined.op not in "+-":
                return None
            lines.append(_product(step, joined.op, name, things, boxes, rng))
            i += 1
        else:
            return None
        value = rest[i].result
        i += 1
    if steps[-1].op == "-" and rng.random() < 0.5:
        lines.append(f"How many {things} are left?")
    else:
        lines.append(
            rng.choice(
                (
                    f"How many {things} does {name} have now?",
                    f"How many {things} are there in the end?",
                )
            )
        )
    return " ".join(lines)


def _move(step: Step, name: str, things: str, rng: random.Random) -> str:
    """One sentence for a call on the running number."""
    n = step.right
    said = {
        "+": (f"{name} gets {n} more {things}.", f"Then {n} more {things} are added."),
        "-": (f"{name} gives away {n} {things}.", f"Then {n} of the {things} are lost."),
        "*": (
            f"Then {name} ends up with {n} times as many {things}.",
            f"The number of {things} becomes {n} times as large.",
        ),
    }[step.op]
    return rng.choice(said)


def _shares(n: int, name: str, things: str, box: str, boxes: str, rng: random.Random) -> list[str]:
    """The closing division: the sentence and its question."""
    return rng.choice(
        (
            [
                f"{name} shares the {things} equally among {n} friends.",
                f"How many {things} does each friend get?",
            ],
            [
                f"{name} puts the {things} equally into {n} {boxes}.",
                f"How many {things} are in each {box}?",
            ],
        )
    )


def _product(step: Step, op: str, name: str, things: str, boxes: str, rng: random.Random) -> str:
    """One sentence for a fresh product added to or taken from the running number."""
    a, b = step.left, step.right
    if op == "+":
        return rng.choice(
            (
                f"{name} buys {a} {boxes} with {b} {things} in each.",
                f"Then {a} more {boxes} of {b} {things} arrive.",
            )
        )
    return rng.choice(
        (
            f"{name} uses {a} {things} a day for {b} days.",
            f"{name} gives {a} friends {b} {things} each.",
        )
    )


class CalculatorSynthesizer(Synthesizer):
    """Reverse task synthesis for the calculator env."""

    env = ENV

    def start_tasks(self, n: int, seed: int) -> list[Task]:
        return get_env(ENV).tasks(n, seed=seed, split="train")

    def explorer(self, seed: int) -> ExpertFn:
        def explore(task: Task, messages: list[Message]) -> str | None:
            steps = _steps(messages)
            if isinstance(steps, str):
                return STOP_REPLY
            length = turn_rng(seed, "chain", task, 0).randint(MIN_CHAIN, MAX_CHAIN)
            if len(steps) >= length and not _awaits_join(steps):
                return _answer(steps[-1].result)
            rng = turn_rng(seed, "explore", task, len(steps))
            return _next_call(rng, steps, length - len(steps))

        return explore

    def relabel(self, source: Trajectory, min_steps: int) -> Candidate | str:
        steps = _steps(source.messages)
        if isinstance(steps, str):
            return steps
        if len(steps) < min_steps:
            return f"too easy: fewer than {min_steps} steps"
        # Seeded by what was explored, not the episode id, so a re-run writes the same tasks.
        prompt = _story(steps, random.Random(f"story:{source.task.id}:{steps}"))
        if prompt is None:
            return "the calls are not moves a story can tell"
        value = steps[-1].result
        expressions = [s.expression for s in steps]
        task = new_task(ENV, source, prompt, answer=value, data={"steps": expressions})
        calls = tuple(format_tool_call("calculator", {"expression": e}) for e in expressions)
        return Candidate(task, (*calls, _answer(value)), (*calls, _answer(value + 1)))
