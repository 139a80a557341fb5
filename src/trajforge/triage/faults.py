"""Faults to put into episodes on purpose: the replies of an agent that makes a known mistake.

Fault injection measures two things triage is for: whether the first-error step lands where
the mistake was made (``bench/triage.py``), and whether a model recovers from a mistake it did
not make (an eval stage's ``force``; ``examples/recovery``). Each reply is text in the tool-call
protocol the scripted experts speak, so a scripted teacher or ``ForcedTurns`` can give it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum

from trajforge.schema import ToolCall, ToolSpec

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


def call_text(call: ToolCall) -> str:
    """``call`` in the ``<tool_call>`` text protocol."""
    payload = json.dumps({"name": call.name, "arguments": call.arguments})
    return f"<tool_call>{payload}</tool_call>"


def tool_error_call(tools: Sequence[ToolSpec]) -> str:
    """A call to the first of ``tools`` with required parameters, each given a value of the
    wrong type (a nested list where a scalar is expected).

    Raises:
        ValueError: no tool has a required parameter to break.
    """
    for spec in tools:
        required = spec.function.parameters.get("required") or []
        if required:
            payload = {"name": spec.name, "arguments": {p: [[0]] for p in required}}
            return f"<tool_call>{json.dumps(payload)}</tool_call>"
    raise ValueError("no tool with a required parameter to break")


def malformed_call(tool: str) -> str:
    """A call to ``tool`` whose JSON breaks off."""
    return '<tool_call>{"name": "' + tool + '", "arguments": {</tool_call>'
