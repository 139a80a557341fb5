"""The Anthropic Messages API's replies: the ``message`` object built from a sampled choice
(its blocks, ``stop_reason``, ``usage``) and the API's own error body.

A reply's text block is its prose exactly as sampled (as the chat route sends it, a stop
sequence included), so a conversation sent back matches the recorded one; its calls are
``tool_use`` blocks parsed by the same machinery as every route's.
"""

from __future__ import annotations

import uuid
from typing import Any

from trajforge.policy import FinishReason
from trajforge.schema import Message, ToolCall
from trajforge.serve.anthropic_wire import tool_use_id
from trajforge.serve.gateway import Choice
from trajforge.serve.wire import ContextFull, WireError

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
"""The API's error ``type`` by HTTP status (any other is an ``api_error``)."""


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def error_body(exc: WireError) -> dict[str, Any]:
    """``{"type": "error", "error": {...}}``; a prompt that leaves no room for a reply is
    ``prompt is too long``, with the largest prompt the model takes."""
    text = exc.message
    if isinstance(exc, ContextFull):
        text = f"prompt is too long: {exc.prompt_tokens} tokens > {exc.max_context - 1} maximum"
    kind = ERROR_TYPES.get(
        exc.status, "api_error" if exc.status >= 500 else "invalid_request_error"
    )
    return {"type": "error", "error": {"type": kind, "message": text}}


def called(message: Message) -> list[ToolCall]:
    """The calls a client can run: named ones (a nameless call cannot be answered; the
    trajectory keeps it)."""
    return [call for call in message.tool_calls if call.name]


def tool_use_block(call: ToolCall) -> dict[str, Any]:
    """A call as a ``tool_use`` block; arguments the parser could not read are sent as ``{}``
    (the API's input is always an object), so the client's tool reports the call as bad."""
    arguments = call.arguments if call.parse_error is None else {}
    return {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": arguments}


def thinking_block(reasoning: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": reasoning, "signature": ""}


def content_blocks(choice: Choice) -> list[dict[str, Any]]:
    message = choice.message
    blocks = [thinking_block(message.reasoning)] if message.reasoning else []
    if choice.content:
        blocks.append({"type": "text", "text": choice.content})
    return blocks + [tool_use_block(call) for call in called(message)]


def stop_of(choice: Choice, stops: list[str]) -> tuple[str, str | None]:
    """``stop_reason`` and ``stop_sequence``: cut at ``max_tokens``, ended on calls, on the
    first stop sequence sampled (a server that strips it ends the turn), else the turn."""
    if choice.finish is FinishReason.LENGTH:
        return "max_tokens", None
    if called(choice.message):
        return "tool_use", None
    ends = {s: choice.content.find(s) + len(s) for s in stops if s and s in choice.content}
    if ends:
        return "stop_sequence", min(ends, key=lambda s: ends[s])
    return "end_turn", None


def usage_of(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def message_object(
    reply_id: str, model: str, choice: Choice | None, stops: list[str], prompt_tokens: int = 0
) -> dict[str, Any]:
    """The reply ``message``; without a choice, the empty one a stream starts with, of a
    prompt of ``prompt_tokens``."""
    reason, sequence = stop_of(choice, stops) if choice else (None, None)
    return {
        "id": reply_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(choice) if choice else [],
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_of(
            choice.prompt_tokens if choice else prompt_tokens,
            choice.completion_tokens if choice else 0,
        ),
    }
