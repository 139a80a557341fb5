"""An agent written with the plain openai SDK, as people already have them. Nothing in it knows
about trajforge: ``trajforge collect`` sets OPENAI_BASE_URL to a recording gateway session and
passes the task as JSON on stdin.

    trajforge collect --agent "python examples/gateway/calculator_agent.py" \
        --env calculator --count 8 --n 4 --store runs/agents.db
"""

import ast
import json
import operator
import os
import sys

from openai import OpenAI

OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
             ast.Div: operator.truediv, ast.USub: operator.neg}  # fmt: skip
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


def evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluate(node.operand))
    raise ValueError("not arithmetic")


def calculator(arguments: str) -> str:
    try:
        value = evaluate(ast.parse(json.loads(arguments)["expression"], mode="eval").body)
    except (ValueError, KeyError, SyntaxError, ZeroDivisionError, json.JSONDecodeError) as exc:
        return f"error: {exc}"
    return f"{value:g}"


def main() -> None:
    task = json.loads(sys.stdin.read())
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the environment
    messages = [{"role": "user", "content": task["prompt"]}]
    if task.get("system"):
        messages.insert(0, {"role": "system", "content": task["system"]})
    for _ in range(6):
        reply = client.chat.completions.create(
            model=os.environ.get("TRAJFORGE_MODEL", "embedded"),
            messages=messages,
            tools=[CALCULATOR],
            temperature=1.0,
            max_tokens=96,
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            result = calculator(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


if __name__ == "__main__":
    main()
