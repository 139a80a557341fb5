"""The Anthropic Messages API's request (``/v1/messages``): checked field by field and turned
into the gateway's chat call, so it is sampled, recorded and merged exactly like one.

The system prompt (a string or text blocks, also taken as ``system`` messages) is the first
message; a user message's ``tool_result`` blocks become tool messages answering the calls of
the assistant turn before it, its text and base64 images one user message after them; an
assistant message's ``tool_use`` blocks are its calls and its ``thinking`` its reasoning. Tool
use ids go out as ``toolu_<call id>`` and come back to the call id, so a conversation sent back
matches the recorded one. Fields that do not change what is sampled (``metadata``,
``cache_control``, ``thinking``, ``service_tier``) are accepted and ignored; what the gateway
cannot honour (a forced tool, a server tool, a URL image) is refused, named.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from trajforge.formats import message_to_openai
from trajforge.schema import (
    Content,
    FunctionSpec,
    ImagePart,
    Message,
    Role,
    TextPart,
    ToolCall,
    ToolSpec,
)
from trajforge.serve.wire import (
    BodyT,
    ChatRequest,
    Unsupported,
    WireError,
    WireModel,
    check_messages,
    check_supported,
    parse_body,
    wire_error_of,
)
from trajforge.serve.wire_content import content_of, image_from_base64, user_turn

TOOL_USE_PREFIX = "toolu_"

UNSUPPORTED: Unsupported = {
    "mcp_servers": (([],), "the gateway connects to no MCP servers"),
}


class TextBlock(WireModel):
    type: Literal["text"]
    text: str


class ImageSource(WireModel):
    type: str
    media_type: str | None = None
    data: str | None = None


class ImageBlock(WireModel):
    type: Literal["image"]
    source: ImageSource


class ToolUseBlock(WireModel):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(WireModel):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] = ""
    is_error: bool = False
    """Accepted: the result's own text says what went wrong, which is what the model reads."""


class ThinkingBlock(WireModel):
    type: Literal["thinking"]
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(WireModel):
    type: Literal["redacted_thinking"]
    data: str = ""


Block = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class MessageIn(WireModel):
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class ToolDef(WireModel):
    """A client tool (``type`` absent or ``custom``); ``cache_control`` and the like ignored."""

    type: str | None = None
    name: str = Field(min_length=1)
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ToolChoice(WireModel):
    """``disable_parallel_tool_use`` is ignored, as the chat route's ``parallel_tool_calls``."""

    type: Literal["auto", "any", "tool", "none"]


class OutputConfig(WireModel):
    """``effort`` is ignored (the model has no such setting); a ``format`` is refused."""

    format: dict[str, Any] | None = None


class MessagesRequest(WireModel):
    model: str
    messages: list[MessageIn] = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    system: str | list[TextBlock] | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    tools: list[ToolDef] | None = None
    tool_choice: ToolChoice | None = None
    output_config: OutputConfig | None = None
    stream: bool = False
    seed: int | None = None
    """The gateway's extension (as on its chat route): sampling repeats under one seed."""


class CountRequest(WireModel):
    """``/v1/messages/count_tokens``: the conversation and tools, nothing sampled."""

    model: str
    messages: list[MessageIn] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[ToolDef] | None = None
    tool_choice: ToolChoice | None = None


def _parse(body: Any, model: type[BodyT]) -> BodyT:
    """``body`` as ``model``; a 400 naming the deepest bad field otherwise: where content may
    be a string or blocks, the bad block, not the string it is not."""
    if not isinstance(body, dict):
        return parse_body(body, model)
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problem = max(exc.errors(), key=lambda e: len(e["loc"]))
        where = _field_path(problem["loc"])
        raise WireError(f"{where}: {problem['msg']}", param=where) from None


def _field_path(loc: tuple[int | str, ...]) -> str:
    """``messages[0].content[1].id`` of a location that also names the union branches it went
    through (``str``, ``list[...]``, and a block's ``type`` right after its index)."""
    where = ""
    for k, part in enumerate(loc):
        if isinstance(part, int):
            where += f"[{part}]"
            continue
        branch = part == "str" or "[" in part
        tag = k >= 2 and isinstance(loc[k - 1], int) and "tagged-union" in str(loc[k - 2])
        if not (branch or tag):
            where += f".{part}" if where else part
    return where


def parse_messages_request(body: Any) -> MessagesRequest:
    if isinstance(body, dict):
        check_supported(body, UNSUPPORTED)
    request = _parse(body, MessagesRequest)
    _check_tool_choice(request.tool_choice)
    if request.output_config is not None and request.output_config.format is not None:
        raise WireError(
            "output_config.format: not supported by this gateway (replies are not constrained "
            "to a format); leave it out",
            param="output_config.format",
        )
    return request


def parse_count_request(body: Any) -> CountRequest:
    request = _parse(body, CountRequest)
    _check_tool_choice(request.tool_choice)
    return request


def _check_tool_choice(choice: ToolChoice | None) -> None:
    if choice is not None and choice.type in ("any", "tool"):
        raise WireError(
            f"tool_choice.type: {choice.type!r} cannot be honoured (no constrained decoding); "
            "use 'auto' or 'none'",
            param="tool_choice",
        )


def tool_use_id(call_id: str) -> str:
    """A recorded call's id as a ``tool_use`` block's."""
    return TOOL_USE_PREFIX + call_id


def call_id_of(block_id: str) -> str:
    """The recorded call id a client's ``tool_use`` id stands for (``tool_use_id`` undone)."""
    return block_id.removeprefix(TOOL_USE_PREFIX)


def conversation_of(request: MessagesRequest | CountRequest) -> list[Message]:
    """The request's system prompt and messages as trajforge messages, checked as a
    conversation the model can answer."""
    out: list[Message] = []
    if request.system:
        out.append(Message(role=Role.SYSTEM, content=_system_text(request.system)))
    for i, message in enumerate(request.messages):
        where = f"messages[{i}]"
        if message.role == "system":
            out.append(Message(role=Role.SYSTEM, content=_system_text(message.content, where)))
        elif message.role == "assistant":
            out.append(_assistant(message.content, where))
        else:
            out.extend(_user(message.content, where))
    check_messages(out)
    return out


def _system_text(system: str | list[Any], where: str = "system") -> str:
    if isinstance(system, str):
        return system
    texts = []
    for k, block in enumerate(system):
        if not isinstance(block, TextBlock):
            raise WireError(
                f"{where}.content[{k}]: a system message holds text blocks only, not {block.type!r}",
                param=f"{where}.content[{k}]",
            )
        texts.append(block.text)
    return "\n\n".join(texts)


def _assistant(content: str | list[Block], where: str) -> Message:
    if isinstance(content, str):
        return Message(role=Role.ASSISTANT, content=content)
    texts, thoughts, calls = [], [], []
    for k, block in enumerate(content):
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ThinkingBlock):
            thoughts.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            calls.append(ToolCall(id=call_id_of(block.id), name=block.name, arguments=block.input))
        elif not isinstance(block, RedactedThinkingBlock):  # nothing readable to keep
            raise WireError(
                f"{where}.content[{k}]: an assistant message holds text, thinking and tool_use "
                f"blocks, not {block.type!r}",
                param=f"{where}.content[{k}]",
            )
    return Message(
        role=Role.ASSISTANT,
        content="".join(texts),
        reasoning="\n\n".join(thoughts) if thoughts else None,
        tool_calls=calls,
    )


def _user(content: str | list[Block], where: str) -> list[Message]:
    """A user message: its tool results first (tool messages must follow the calls they
    answer), then its text and images as one user message, if it has any."""
    if isinstance(content, str):
        return [Message(role=Role.USER, content=content)]
    results: list[Message] = []
    parts: list[TextPart | ImagePart] = []
    for k, block in enumerate(content):
        at = f"{where}.content[{k}]"
        if isinstance(block, ToolResultBlock):
            results.append(
                Message(
                    role=Role.TOOL,
                    content=_result_content(block, at),
                    tool_call_id=call_id_of(block.tool_use_id),
                )
            )
        elif isinstance(block, TextBlock):
            parts.append(TextPart(text=block.text))
        elif isinstance(block, ImageBlock):
            parts.append(image_part(block, at))
        else:
            raise WireError(
                f"{at}: a user message holds text, image and tool_result blocks, not "
                f"{block.type!r}",
                param=at,
            )
    return user_turn(results, parts)


def _result_content(block: ToolResultBlock, where: str) -> Content:
    if isinstance(block.content, str):
        return block.content
    parts: list[TextPart | ImagePart] = [
        TextPart(text=b.text)
        if isinstance(b, TextBlock)
        else image_part(b, f"{where}.content[{k}]")
        for k, b in enumerate(block.content)
    ]
    return content_of(parts)


def image_part(block: ImageBlock, where: str) -> ImagePart:
    """A base64 image block as the image part every route records (URLs are never fetched)."""
    source = block.source
    if source.type != "base64" or source.data is None:
        raise WireError(
            f"{where}.source: only base64 images are taken, not {source.type!r} sources",
            param=f"{where}.source",
        )
    return image_from_base64(source.data, source.media_type, f"{where}.source")


def tools_of(request: MessagesRequest | CountRequest) -> list[ToolSpec]:
    """The client tools offered (none where ``tool_choice`` is ``none``); a server tool the
    gateway cannot run is refused, named."""
    if request.tool_choice is not None and request.tool_choice.type == "none":
        return []
    out = []
    for k, tool in enumerate(request.tools or []):
        if tool.type not in (None, "custom"):
            raise WireError(
                f"tools[{k}].type: {tool.type!r} is a server tool this gateway cannot run; only "
                "client tools (with an input_schema) are supported",
                param=f"tools[{k}].type",
            )
        try:
            function = FunctionSpec(
                name=tool.name, description=tool.description, parameters=tool.input_schema
            )
        except ValidationError as exc:
            raise wire_error_of(exc, f"tools[{k}].") from None
        out.append(ToolSpec(function=function))
    return out


def chat_request_of(
    request: MessagesRequest, messages: list[Message], tools: list[ToolSpec]
) -> ChatRequest:
    """The chat call the gateway samples: ``messages`` and ``tools`` in OpenAI's shape too,
    as a gateway forwarding to another server sends them."""
    return ChatRequest.model_validate(
        {
            "model": request.model,
            "messages": [message_to_openai(m) for m in messages],
            "tools": [t.to_openai() for t in tools] or None,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "top_k": request.top_k,
            "max_tokens": request.max_tokens,
            "stop": request.stop_sequences,
            "seed": request.seed,
        }
    )
