"""The system-message text that describes tools to a model without native tool support.

The model is told the ``<tool_call>{json}</tool_call>`` text protocol, shown each tool's JSON
schema, and given one example call built from the first tool's schema.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from trajforge.formats.tool_calls import format_tool_call
from trajforge.schema import ToolSpec

_EXAMPLE_VALUES: dict[str, Any] = {
    "string": "...",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "array": [],
    "object": {},
}


def example_arguments(parameters: dict[str, Any]) -> dict[str, Any]:
    """Placeholder arguments for the required parameters of a JSON schema (all if none are
    marked required), one value of the declared type each."""
    properties = parameters.get("properties") or {}
    if not isinstance(properties, dict):
        return {}
    required = parameters.get("required") or list(properties)
    example: dict[str, Any] = {}
    for name in required:
        prop = properties.get(name)
        kind = prop.get("type", "string") if isinstance(prop, dict) else "string"
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "string")
        if isinstance(prop, dict) and prop.get("enum"):
            example[name] = prop["enum"][0]
        else:
            example[name] = _EXAMPLE_VALUES.get(str(kind), "...")
    return example


def tools_system_prompt(tools: Sequence[ToolSpec]) -> str:
    """Instructions, schemas and one example call for the text tool-call protocol."""
    first = tools[0].function
    example = format_tool_call(first.name, example_arguments(first.parameters))
    schemas = "\n".join(
        json.dumps(t.function.model_dump(mode="json"), ensure_ascii=False, sort_keys=True)
        for t in tools
    )
    return (
        "You can call tools. To call one, write exactly:\n"
        '<tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call>\n'
        f"For example:\n{example}\n"
        "Each result comes back in a tool message. Write several calls in one reply to run them "
        "in order. When you have the final answer, reply with it and no tool call.\n"
        f"Available tools (JSON schemas):\n{schemas}"
    )
