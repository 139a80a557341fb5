"""A user's env whose lookup server is down for half the tasks: the expert's episodes of those
are lost to the infrastructure (the tool raises ``InfraError``), the others succeed."""

from trajforge.envs import ToolEnv, tool
from trajforge.errors import InfraError
from trajforge.formats.tool_calls import format_tool_call
from trajforge.schema import Message, Task


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    if key == "down":
        raise InfraError("the lookup server is down")
    return "v"


TASKS = [
    Task(id=f"t{i}", prompt=f"Look up {'down' if i % 2 else 'up'}.", answer="v") for i in range(4)
]


def expert(task: Task, messages: list[Message]) -> str:
    if not any(m.role == "tool" for m in messages):
        return format_tool_call("lookup", {"key": task.prompt.split()[-1].rstrip(".")})
    return "The answer is v."


def make_env() -> ToolEnv:
    return ToolEnv([lookup], tasks=TASKS, name="flaky", expert=expert)
