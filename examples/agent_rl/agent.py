"""A calculator agent written with the plain openai SDK, trained by RL through the gateway.

Nothing here imports trajforge: the RL stage (or `trajforge collect`) runs this program once
per task with OPENAI_BASE_URL pointing at a recording session whose model is the one being
trained, and passes the task as JSON on stdin. The system prompt and the tool are the ones the
`calculator` environment's demonstrations were written with, so SFT on them carries over.
"""

import ast
import json
import operator
import os
import sys

from openai import OpenAI

SYSTEM = (
    "Use the calculator tool for each arithmetic step, one call per turn. "
    "When done, reply: The answer is N."
)
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": 'Numbers with + - * / // % ** and parentheses, e.g. "12 * 7 - 5".',
                }
            },
            "required": ["expression"],
        },
    },
}
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
             ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
             ast.Pow: operator.pow, ast.USub: operator.neg}  # fmt: skip


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
    except (ValueError, KeyError, SyntaxError, ZeroDivisionError, TypeError, json.JSONDecodeError) as exc:
        return f"error: {exc}"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def main() -> None:
    task = json.loads(sys.stdin.read())
    client = OpenAI()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["prompt"]}]
    for _ in range(4):
        reply = client.chat.completions.create(
            model=os.environ.get("TRAJFORGE_MODEL", "embedded"),
            messages=messages,
            tools=[CALCULATOR],
            # The temperature the run samples at: RL trains the policy tempered by it.
            temperature=float(os.environ.get("TRAJFORGE_TEMPERATURE", "1")),
            max_tokens=64,
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": calculator(call.function.arguments)}
            )


if __name__ == "__main__":
    main()
