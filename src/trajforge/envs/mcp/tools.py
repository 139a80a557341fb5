"""MCP tools as trajforge ``Tool`` objects, and MCP results as the text a tool message holds.

An ``MCPTool`` carries the server's JSON schema as its ``ToolSpec`` and validates arguments
against it before anything is sent, so ``ToolEnv`` treats it like any ``@tool``: the same
``Error: invalid arguments ...`` messages, timeouts and result-length cut. A result with
``is_error`` becomes an ``Error:`` message with the server's text; images, audio and resources
become one short line each saying what they are (the model reads text only).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from typing import Any

import jsonschema
import mcp.types as mcp_types
from mcp import MCPError

from trajforge.envs.mcp.spec import TOOL_NAME, MCPServerSpec
from trajforge.envs.tool import Tool, ToolArgumentError, ToolContext, ToolError
from trajforge.envs.tool_env import ERROR_PREFIX
from trajforge.errors import ConfigError
from trajforge.schema import FunctionSpec, ToolSpec

CallFn = Callable[[str, dict[str, Any]], Awaitable[mcp_types.CallToolResult]]
StartFn = Callable[[], Awaitable[None]]


def schema_without_titles(schema: Any, *, in_properties: bool = False) -> Any:
    """``schema`` less its ``title`` keywords (generated noise in a prompt); a property that is
    itself named ``title`` is kept."""
    if isinstance(schema, list):
        return [schema_without_titles(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        k: schema_without_titles(v, in_properties=k == "properties" and not in_properties)
        for k, v in schema.items()
        if in_properties or k != "title"
    }


class MCPTool(Tool):
    """A tool of an MCP server, offered under ``name`` (the server calls it ``server_name``).

    Args:
        listed: The tool as the server lists it.
        name: The name the model sees.
        call: ``call(server_name, arguments)``: sends the call to the server.
        start: Starts the server unless it runs (bounded by its start-up timeout, not by
            ``timeout``: restarting a crashed server is not the call's time).
        timeout: Seconds a call may take (``None``: the environment's ``tool_timeout``).
    """

    def __init__(
        self,
        listed: mcp_types.Tool,
        *,
        name: str,
        call: CallFn,
        start: StartFn,
        timeout: float | None = None,
    ) -> None:
        # Tool.__init__ derives a spec from a Python signature; an MCP tool brings its own.
        self.fn = call
        self._start = start
        self.name = name
        self.server_name = listed.name
        self.timeout = timeout
        self.is_async = True
        self.context_param = None
        self.description = listed.description or ""
        parameters = schema_without_titles(dict(listed.input_schema))
        parameters.setdefault("type", "object")
        parameters.setdefault("properties", {})
        self._validator = jsonschema.Draft202012Validator(parameters)
        self.spec = ToolSpec(
            function=FunctionSpec(name=name, description=self.description, parameters=parameters)
        )

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check ``arguments`` against the server's input schema.

        Raises:
            ToolArgumentError: naming each argument that is missing or does not fit.
        """
        if not isinstance(arguments, dict):
            kind = type(arguments).__name__
            raise ToolArgumentError(f"arguments must be a JSON object, got {kind}")
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
        problems = dict.fromkeys(p for e in errors for p in _describe_problem(e))
        if problems:
            raise ToolArgumentError("; ".join(problems))
        return arguments

    async def prepare(self) -> None:
        """Start the server unless it runs.

        Raises:
            ToolError: it did not start within its start-up timeout.
        """
        await self._start()

    async def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> str:
        """Validate, call the server, and return its result as text.

        Raises:
            ToolError: the server answered ``is_error`` or a protocol error, or is unreachable.
        """
        self.validate(arguments)
        try:
            result = await self.fn(self.server_name, arguments)
        except MCPError as exc:
            raise ToolError(f"tool {self.name!r}: {exc.error.message}") from None
        text = result_text(result)
        if result.is_error:
            # A server that speaks trajforge's convention (``trajforge mcp serve``) says
            # "Error:" itself; the env adds it.
            text = text.removeprefix(ERROR_PREFIX).strip()
            raise ToolError(text or f"tool {self.name!r} failed and said nothing")
        return text

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r})"


def _describe_problem(error: jsonschema.ValidationError) -> list[str]:
    where = ".".join(str(p) for p in error.path)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [r for r in error.validator_value if r not in error.instance]
        return [
            f"missing required argument '{'.'.join(filter(None, [where, m]))}'" for m in missing
        ]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        return [f"unexpected argument '{'.'.join(filter(None, [where, k]))}'" for k in extra]
    return [f"argument '{where}': {error.message}" if where else error.message]


def _size(data: str) -> str:
    try:
        n = len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        n = len(data)
    return f"{n} bytes"


def content_text(block: mcp_types.ContentBlock) -> str:
    """One content block as text: text as is, anything else as a short description."""
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent):
        return f"[image: {block.mime_type}, {_size(block.data)}]"
    if isinstance(block, mcp_types.AudioContent):
        return f"[audio: {block.mime_type}, {_size(block.data)}]"
    if isinstance(block, mcp_types.ResourceLink):
        about = f": {block.description}" if block.description else ""
        kind = f", {block.mime_type}" if block.mime_type else ""
        return f"[resource link {block.name} <{block.uri}>{kind}{about}]"
    resource = block.resource
    if isinstance(resource, mcp_types.TextResourceContents):
        return f"[resource <{resource.uri}>]\n{resource.text}"
    kind = resource.mime_type or "binary"
    return f"[resource <{resource.uri}>: {kind}, {_size(resource.blob)}]"


def result_text(result: mcp_types.CallToolResult) -> str:
    """A tool result as the text of a tool message (structured content when there is no other)."""
    if not result.content and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(content_text(block) for block in result.content)


def select_tools(
    spec: MCPServerSpec, listed: list[mcp_types.Tool], call: CallFn, start: StartFn
) -> list[MCPTool]:
    """The server's tools that ``spec.tools`` chooses, under the names it gives them.

    Raises:
        ConfigError: a selected or renamed tool does not exist, or a name is not a valid
            tool name (letters, digits, ``_`` and ``-``, not starting with a digit).
    """
    selection = spec.tools
    known = {t.name for t in listed}
    asked = set(selection.include or []) | set(selection.rename)
    missing = sorted(asked - known)
    if missing:
        raise ConfigError(
            f"{spec.describe()} has no tool {missing[0]!r}; it has {', '.join(sorted(known))}"
        )
    tools: list[MCPTool] = []
    for listed_tool in listed:
        if not selection.chosen(listed_tool.name):
            continue
        name = selection.exposed_name(listed_tool.name)
        if not TOOL_NAME.match(name):
            raise ConfigError(
                f"{spec.describe()}: tool name {name!r} is not valid here (letters, digits, _ "
                "and -); rename it with tools.rename"
            )
        tools.append(
            MCPTool(listed_tool, name=name, call=call, start=start, timeout=spec.call_timeout_s)
        )
    return tools
