"""The mistakes of the recovery experiment: a first calculator call that fails.

Each task gets one of two faults, by a stable coin on its id: a call the tool refuses (the
expression as a nested list) or a call that does not parse. ``first_call_fault`` forces it on
the model in an eval stage (``force:``); ``failing_teacher`` makes it and then guesses, as a
model that does not notice its mistake would, which gives the failed episodes that
``trajforge curate repair`` turns into recoveries.
"""

from __future__ import annotations

import hashlib

from trajforge.envs.builtin.arith import format_number
from trajforge.envs.registry import get_env
from trajforge.schema import Message, Role, Task
from trajforge.triage.faults import malformed_call, tool_error_call

TOOLS = get_env("calculator").tool_specs()


def _fault(task: Task) -> str:
    coin = hashlib.sha256(f"fault:{task.id}".encode()).digest()[0]
    return tool_error_call(TOOLS) if coin % 2 else malformed_call(TOOLS[0].name)


def first_call_fault(task: Task, messages: list[Message]) -> str | None:
    """The failing call at the first turn; the model answers every later turn."""
    if any(m.role is Role.ASSISTANT for m in messages):
        return None
    return _fault(task)


def failing_teacher(task: Task, messages: list[Message]) -> str | None:
    """The failing first call, then a wrong answer."""
    if not any(m.role is Role.ASSISTANT for m in messages):
        return _fault(task)
    return f"The answer is {format_number(task.answer + 1)}."
