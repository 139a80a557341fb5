"""The system-message text that describes tools to a model without native tool support.

The model is told the ``<tool_call>{json}</tool_call>`` text protocol, shown each tool's JSON
schema, and given one example call built from the first tool's schema. ``deploy_template``
writes the same text in Jinja from these constants, so a saved model's chat template and this
renderer cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from trajforge.formats import format_tool_call
from trajforge.schema import ToolSpec

EXAMPLE_VALUES: dict[str, Any] = {
    "string": "...",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "array": [],
    "object": {},
}
"""The placeholder an example call gives a required parameter, by its JSON-schema type."""

EXAMPLE_DEFAULT = "..."
"""The placeholder for a parameter of any other type."""

TOOL_PROMPT = (
    "You can call tools. To call one, write exactly:\n"
    '<tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call>\n'
    "For example:\n{example}\n"
    "Each result comes back in a tool message. Write several calls in one reply to run them "
    "in order. When you have the final answer, reply with it and no tool call.\n"
    "Available tools (JSON schemas):\n{schemas}"
)
"""The prompt, with ``{example}`` (one call) and ``{schemas}`` (one JSON line per tool) to fill
in."""


def tool_prompt_parts() -> tuple[str, str, str]:
    """``TOOL_PROMPT``'s text before ``{example}``, between it and ``{schemas}``, and after."""
    head, rest = TOOL_PROMPT.split("{example}")
    middle, tail = rest.split("{schemas}")
    return head, middle, tail


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
            example[name] = EXAMPLE_VALUES.get(str(kind), EXAMPLE_DEFAULT)
    return example


def tool_schema_line(tool: ToolSpec) -> str:
    """One tool's function schema as the prompt lists it: JSON, keys sorted."""
    return json.dumps(tool.function.model_dump(mode="json"), ensure_ascii=False, sort_keys=True)


def tools_system_prompt(tools: Sequence[ToolSpec]) -> str:
    """Instructions, schemas and one example call for the text tool-call protocol."""
    first = tools[0].function
    example = format_tool_call(first.name, example_arguments(first.parameters))
    schemas = "\n".join(tool_schema_line(t) for t in tools)
    head, middle, tail = tool_prompt_parts()
    return f"{head}{example}{middle}{schemas}{tail}"
