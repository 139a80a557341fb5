"""A custom environment in a few lines: temperature conversion with one tool."""

from trajforge.envs import ToolEnv, tool
from trajforge.formats.tool_calls import format_tool_call
from trajforge.schema import Message, Task


@tool
def to_fahrenheit(celsius: float) -> str:
    """Convert a temperature from Celsius to Fahrenheit.

    Args:
        celsius: Degrees Celsius.
    """
    return f"{celsius * 9 / 5 + 32:g}"


TASKS = [
    Task(id=f"temp{c}", prompt=f"What is {c} C in F?", answer=f"{c * 9 / 5 + 32:g}", data={"c": c})
    for c in range(-40, 101, 5)
]


def expert(task: Task, messages: list[Message]) -> str:
    if not any(m.role == "tool" and not m.content.startswith("Error:") for m in messages):
        return format_tool_call("to_fahrenheit", {"celsius": task.data["c"]})
    return f"The answer is {task.answer}."


def make_env() -> ToolEnv:
    return ToolEnv([to_fahrenheit], tasks=TASKS, name="temperature", expert=expert)
