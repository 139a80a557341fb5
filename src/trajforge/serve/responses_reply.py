"""The Responses API's replies: the ``response`` object built from a sampled choice (its output
items: reasoning, message, function calls; its status and usage) and the API's error bodies.

A reply's ``output_text`` is its prose exactly as sampled, so input sent back matches the
recorded conversation; its reasoning is a ``reasoning`` item whose ``reasoning_text`` holds what
the model wrote (there is nothing to encrypt: ``encrypted_content`` stays empty), which a client
passes back as it is.
"""

from __future__ import annotations

import time
from typing import Any

from trajforge.policy import FinishReason
from trajforge.serve.gateway import Choice
from trajforge.serve.responses_wire import ResponsesRequest
from trajforge.serve.wire import ContextFull, WireError, call_arguments_text, new_id

CONTEXT_FULL = "Your input exceeds the context window of this model."


def error_of(exc: WireError) -> dict[str, Any]:
    """The API's ``error`` object; a prompt that leaves no room for a reply is its
    ``context_length_exceeded``, with the counts."""
    if isinstance(exc, ContextFull):
        text = (
            f"{CONTEXT_FULL} Please adjust your input and try again ({exc.prompt_tokens} input "
            f"tokens; the model takes at most {exc.max_context - 1})."
        )
        return {"message": text, "type": "invalid_request_error", "param": "input",
                "code": "context_length_exceeded"}  # fmt: skip
    return exc.body()["error"]


def output_items(
    choice: Choice, message_id: str, spaces: dict[str, tuple[str, str]], text_first: bool = False
) -> list[dict[str, Any]]:
    """The reply as output items: its reasoning, its text, its calls (``spaces``: the flat
    names of namespaced tools); the text first where it was streamed before the reply ended."""
    message = choice.message
    reasoning = [_reasoning_item(message.reasoning)] if message.reasoning else []
    text = [_message_item(message_id, choice.content, "completed")] if choice.content else []
    calls = [_call_item(call.id, call.name, call_arguments_text(call), spaces)
             for call in message.tool_calls if call.name]  # fmt: skip
    return [*text, *reasoning, *calls] if text_first else [*reasoning, *text, *calls]


def _reasoning_item(reasoning: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": new_id("rs"), "summary": [],
            "content": [{"type": "reasoning_text", "text": reasoning}],
            "encrypted_content": None}  # fmt: skip


def _message_item(message_id: str, text: str | None, status: str) -> dict[str, Any]:
    parts = [] if text is None else [output_text(text)]
    return {"type": "message", "id": message_id, "status": status, "role": "assistant",
            "content": parts}  # fmt: skip


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def opened_message(message_id: str) -> dict[str, Any]:
    """A message item as ``response.output_item.added`` announces it, before its text."""
    return _message_item(message_id, None, "in_progress")


def _call_item(
    call_id: str, name: str, arguments: str, spaces: dict[str, tuple[str, str]]
) -> dict[str, Any]:
    item = {"type": "function_call", "id": new_id("fc"), "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed"}  # fmt: skip
    if name in spaces:
        item["namespace"], item["name"] = spaces[name]
    return item


def response_object(
    request: ResponsesRequest,
    response_id: str,
    choice: Choice | None = None,
    output: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``response`` object: in progress before ``choice``, then its ``output`` and usage."""
    cut = choice is not None and choice.finish is FinishReason.LENGTH
    status = "in_progress" if choice is None else "incomplete" if cut else "completed"
    input_tokens = choice.prompt_tokens if choice else 0
    output_tokens = choice.completion_tokens if choice else 0
    return {
        "id": response_id,
        "object": "response",
        "created_at": time.time(),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": request.model,
        "output": output or [],
        "parallel_tool_calls": True,
        "previous_response_id": request.previous_response_id,
        "reasoning": {"effort": None, "summary": None},
        "store": request.kept,
        "temperature": request.temperature,
        "tool_choice": request.tool_choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in request.tools or []],
        "top_p": request.top_p,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "metadata": {},
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    }
