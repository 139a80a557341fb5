"""What the scripted experts of the built-in tool envs share: reading how far they have got.

An expert is a pure function of the task and the conversation, so it finds its place again on
every turn from the tool results the environment accepted (an error result means the call
must be made again).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trajforge.envs.tool_env import ERROR_PREFIX
from trajforge.formats import format_tool_call
from trajforge.schema import Message, Role

PlannedCall = tuple[str, dict[str, Any]]
"""A tool's name and its arguments."""


def accepted_results(messages: Sequence[Message]) -> list[Message]:
    """The tool results in ``messages`` that are not an error, oldest first."""
    return [m for m in messages if m.role is Role.TOOL and not m.text.startswith(ERROR_PREFIX)]


def follow_plan(plan: Sequence[PlannedCall], messages: Sequence[Message], answer: str) -> str:
    """The next call of ``plan`` (one per accepted result so far), then ``answer``."""
    done = len(accepted_results(messages))
    if done < len(plan):
        name, arguments = plan[done]
        return format_tool_call(name, arguments)
    return answer
