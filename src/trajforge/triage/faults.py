"""Faults to put into episodes on purpose: the replies of an agent that makes a known mistake.

Fault injection measures two things triage is for: whether the first-error step lands where
the mistake was made (``bench/triage.py``), and whether a model recovers from a mistake it did
not make (an eval stage's ``force``; ``examples/recovery``). Each reply is text in the tool-call
protocol the scripted experts speak, so a scripted teacher or ``ForcedTurns`` can give it; a
call made again is ``formats.tool_calls.format_tool_call`` of the earlier one.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from trajforge.formats import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, format_tool_call
from trajforge.schema import ToolSpec

WRONG_ANSWER = "The answer is 987654321."
"""A final answer no built-in task has."""


class Fault(StrEnum):
    TOOL_ERROR = "tool_error"
    """A call the tool refuses: every required argument of the wrong type."""
    MALFORMED = "malformed"
    """A call that does not parse."""
    LOOP = "loop"
    """The previous turn's calls, made again."""
    WRONG_ANSWER = "wrong_answer"
    """A final answer that is wrong."""


def tool_error_call(tools: Sequence[ToolSpec]) -> str:
    """A call to the first of ``tools`` with required parameters, each given a value of the
    wrong type (a nested list where a scalar is expected).

    Raises:
        ValueError: no tool has a required parameter to break.
    """
    for spec in tools:
        required = spec.function.parameters.get("required") or []
        if required:
            return format_tool_call(spec.name, {p: [[0]] for p in required})
    raise ValueError("no tool with a required parameter to break")


def malformed_call(tool: str) -> str:
    """A call to ``tool`` whose JSON breaks off."""
    return TOOL_CALL_OPEN + '{"name": "' + tool + '", "arguments": {' + TOOL_CALL_CLOSE
