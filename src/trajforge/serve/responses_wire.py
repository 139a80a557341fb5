"""The Responses API's requests (``/v1/responses``): the body checked field by field, its tools
as the model is offered them, and its input items as the conversation the model answers.

Function tools are offered as they are; the function tools of a ``namespace`` tool (Codex CLI's
sub-agent tools) under the flat name ``{namespace}__{name}``, their calls returned with the
``namespace`` again. Tools that run on OpenAI's side (``web_search``, ``file_search``,
``code_interpreter``, ...) and free-form ``custom`` tools cannot be served by a local model:
they are left out of what the model is offered, as a model that never chooses them would, so a
harness that always sends them (Codex's ``web_search``) still runs; a tool of an unknown kind
is refused by name. Fields that do not change what is sampled (``store``'s retention,
``include``, ``reasoning``, ``prompt_cache_key``, ``client_metadata``) are accepted.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trajforge.errors import DataError
from trajforge.formats import messages_from_responses, namespaced
from trajforge.schema import Message
from trajforge.serve.wire import (
    FunctionIn,
    ToolIn,
    WireError,
    WireModel,
    check_messages,
    check_tool_choice,
    parse_body,
    wire_error_of_data,
)

LEFT_OUT = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "computer_use_preview",
        "computer_use",
        "image_generation",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "tool_search",
        "custom",
    }
)
"""Tool kinds a local model cannot serve: hosted on OpenAI's side, or free-form input."""


class ResponseTool(WireModel):
    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    """A ``namespace`` tool's function tools."""


class TextFormat(WireModel):
    type: str = "text"


class TextOptions(WireModel):
    format: TextFormat | None = None


class ResponsesRequest(WireModel):
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[ResponseTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_output_tokens: int | None = Field(default=None, ge=1)
    previous_response_id: str | None = None
    store: bool | None = None
    """``False``: the response is not kept, so no later call can continue it."""
    include: list[str] | None = None
    text: TextOptions | None = None
    stream: bool = False

    @property
    def kept(self) -> bool:
        return self.store is not False


def parse_request(body: Any) -> ResponsesRequest:
    """A ``/v1/responses`` body; a 400 naming the first field that is wrong or that the
    gateway cannot honour."""
    request = parse_body(body, ResponsesRequest)
    check_tool_choice(request.tool_choice)
    form = request.text.format if request.text else None
    if form is not None and form.type != "text":
        raise WireError(
            f"text.format: not supported by this gateway (replies are not constrained to a "
            f"format, asked {form.type!r}); leave it out",
            param="text.format",
            code="unsupported_parameter",
        )
    return request


def function_tools(request: ResponsesRequest) -> tuple[list[ToolIn], dict[str, tuple[str, str]]]:
    """The tools the model is offered (see the module's docstring), and each flat name of a
    namespaced one with its ``(namespace, name)``."""
    if request.tool_choice == "none":
        return [], {}
    tools: list[ToolIn] = []
    spaces: dict[str, tuple[str, str]] = {}
    for k, tool in enumerate(request.tools or []):
        where = f"tools[{k}]"
        if tool.type == "function":
            tools.append(_function(tool.model_dump(), where))
        elif tool.type == "namespace":
            if not tool.name:
                raise WireError(f"{where}.name: a namespace needs a name", param=f"{where}.name")
            for j, inner in enumerate(tool.tools or []):
                function = _function(inner, f"{where}.tools[{j}]")
                flat = namespaced(tool.name, function.function.name)
                spaces[flat] = (tool.name, function.function.name)
                function.function.name = flat
                tools.append(function)
        elif tool.type not in LEFT_OUT:
            raise WireError(
                f"{where}.type: unknown tool type {tool.type!r} (function and namespace tools "
                "are offered to the model; hosted and custom tools are left out)",
                param=f"{where}.type",
            )
    return tools, spaces


def _function(tool: dict[str, Any], where: str) -> ToolIn:
    if tool.get("type", "function") != "function" or not tool.get("name"):
        raise WireError(
            f"{where}: a function tool needs type 'function' and a name", param=f"{where}.name"
        )
    function = FunctionIn(
        name=str(tool["name"]),
        description=str(tool.get("description") or ""),
        parameters=tool.get("parameters") or {"type": "object"},
    )
    return ToolIn(function=function)


def input_items(request: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's input as a list of items (a string is one user message)."""
    raw = request.input
    return [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else raw


def conversation_of(items: list[dict[str, Any]], instructions: str | None) -> list[Message]:
    """The input items as a chat conversation (``messages_from_responses``), checked as one."""
    try:
        messages = messages_from_responses(items, instructions)
    except DataError as exc:
        raise wire_error_of_data(exc) from None
    check_messages(messages)
    return messages
