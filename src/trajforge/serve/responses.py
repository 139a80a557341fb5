"""OpenAI's Responses API (``/v1/responses``), the subset agents use: text, images and function
tools, with and without streaming (what the OpenAI Agents SDK sends by default). A request is
turned into the equivalent chat call, so it is recorded and merged exactly like one."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi.responses import StreamingResponse
from pydantic import Field

from trajforge.errors import DataError
from trajforge.formats import message_to_openai, messages_from_responses
from trajforge.policy import FinishReason
from trajforge.schema import Message
from trajforge.serve.chat_stream import SampledCall
from trajforge.serve.gateway import ChatGateway, Choice
from trajforge.serve.wire import (
    ChatRequest,
    FunctionIn,
    ToolIn,
    WireError,
    WireModel,
    check_messages,
    check_tool_choice,
    new_id,
    parse_body,
    tools_of,
    wire_calls,
    wire_error_of_data,
)


class ResponseTool(WireModel):
    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None


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
    stream: bool = False


def _parse(body: Any) -> ResponsesRequest:
    request = parse_body(body, ResponsesRequest)
    check_tool_choice(request.tool_choice)
    if request.previous_response_id is not None:
        raise WireError(
            "previous_response_id: the gateway keeps no server-side state; send the whole input",
            param="previous_response_id",
        )
    return request


def messages_of(request: ResponsesRequest) -> list[Message]:
    """The input items as a chat conversation (``messages_from_responses``), checked as one."""
    try:
        messages = messages_from_responses(request.input, request.instructions)
    except DataError as exc:
        raise wire_error_of_data(exc) from None
    check_messages(messages)
    return messages


def _tools(request: ResponsesRequest) -> list[ToolIn]:
    tools = []
    for k, tool in enumerate(request.tools or []):
        if tool.type != "function" or not tool.name:
            raise WireError(
                f"tools[{k}].type: only function tools are supported, got {tool.type!r}",
                param=f"tools[{k}].type",
            )
        function = FunctionIn(
            name=tool.name,
            description=tool.description or "",
            parameters=tool.parameters or {"type": "object"},
        )
        tools.append(ToolIn(function=function))
    return tools


def _output(choice: Choice, message_id: str) -> list[dict[str, Any]]:
    message = choice.message
    items: list[dict[str, Any]] = []
    text = choice.content
    if text:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        items.append(
            {
                "type": "message",
                "id": message_id,
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for call in wire_calls(message):
        items.append(
            {
                "type": "function_call",
                "id": new_id("fc"),
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
        )
    return items


def _response(
    request: ResponsesRequest, choice: Choice | None, response_id: str, message_id: str = ""
) -> dict[str, Any]:
    done = choice is not None
    cut = choice is not None and choice.finish is FinishReason.LENGTH
    output_tokens = choice.completion_tokens if choice else 0
    input_tokens = choice.prompt_tokens if choice else 0
    return {
        "id": response_id,
        "object": "response",
        "created_at": time.time(),
        "status": ("incomplete" if cut else "completed") if done else "in_progress",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": request.model,
        "output": _output(choice, message_id or new_id("msg")) if choice else [],
        "parallel_tool_calls": True,
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


async def responses_route(gateway: ChatGateway, session_id: str, body: Any) -> Any:
    """Answer a Responses API call (streaming or not) through ``gateway``."""
    request = _parse(body)
    messages = messages_of(request)
    tools = [] if request.tool_choice == "none" else tools_of(_tools(request))
    gateway.check_model(request.model)
    # The chat call an upstream server is sent: the same conversation and tools.
    chat = ChatRequest.model_validate(
        {
            "model": request.model,
            "messages": [message_to_openai(m) for m in messages],
            "tools": [t.to_openai() for t in tools] or None,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_completion_tokens": request.max_output_tokens,
        }
    )
    if request.stream:
        events = _stream(gateway, session_id, request, chat, messages, tools)
        return StreamingResponse(events, media_type="text/event-stream")
    (choice,) = await gateway.chat(session_id, chat, messages, tools)
    return _response(request, choice, new_id("resp"))


def _event(kind: str, sequence: int, **fields: Any) -> str:
    payload = {"type": kind, "sequence_number": sequence, **fields}
    return f"event: {kind}\ndata: {json.dumps(payload)}\n\n"


async def _stream(
    gateway: ChatGateway,
    session_id: str,
    request: ResponsesRequest,
    chat: ChatRequest,
    messages: list[Message],
    tools: list[Any],
) -> AsyncIterator[str]:
    response_id, message_id = new_id("resp"), new_id("msg")
    sequence = iter(range(1 << 30))
    pending = _response(request, None, response_id)
    yield _event("response.created", next(sequence), response=pending)
    yield _event("response.in_progress", next(sequence), response=pending)
    call = SampledCall(gateway, session_id, chat, messages, tools)
    where = {"output_index": 0, "item_id": message_id, "content_index": 0}
    try:
        async for _, text in call.pieces():
            if text == call.sent[0]:  # the first text opens the message item
                for kind, fields in _message_opened(message_id):
                    yield _event(kind, next(sequence), **fields)
            yield _event("response.output_text.delta", next(sequence), **where, delta=text, logprobs=[])  # fmt: skip
        try:
            (choice,) = call.choices()
        except WireError as exc:
            failed = {**pending, "status": "failed", "error": exc.body()["error"]}
            yield _event("response.failed", next(sequence), response=failed)
            return
        final = _response(request, choice, response_id, message_id)
        for index, item in enumerate(final["output"]):
            events = _item_events(index, item, call.sent[0], call.rest(0, choice))
            for kind, fields in events:
                yield _event(kind, next(sequence), **fields)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        yield _event(kind, next(sequence), response=final)
    finally:
        call.cancel()  # a client that left stops the sampling


def _message_opened(message_id: str) -> Iterator[tuple[str, dict[str, Any]]]:
    item = {"type": "message", "id": message_id, "status": "in_progress", "role": "assistant",
            "content": []}  # fmt: skip
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    yield "response.output_item.added", {"output_index": 0, "item": item}
    yield "response.content_part.added", {"output_index": 0, "item_id": message_id, "content_index": 0, "part": part}  # fmt: skip


def _item_events(
    index: int, item: dict[str, Any], sent: str, rest: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    """An output item's events after the text streamed so far (``sent``) and what is left of
    it (``rest``)."""
    where = {"output_index": index, "item_id": item["id"]}
    if item["type"] == "message":
        part = item["content"][0]
        if not sent:
            yield from _message_opened(item["id"])
        if rest:
            yield "response.output_text.delta", {**where, "content_index": 0, "delta": rest, "logprobs": []}  # fmt: skip
        yield "response.output_text.done", {**where, "content_index": 0, "text": part["text"], "logprobs": []}  # fmt: skip
        yield "response.content_part.done", {**where, "content_index": 0, "part": part}
    else:
        yield "response.output_item.added", {"output_index": index, "item": {**item, "status": "in_progress", "arguments": ""}}  # fmt: skip
        yield "response.function_call_arguments.delta", {**where, "delta": item["arguments"]}
        yield "response.function_call_arguments.done", {**where, "arguments": item["arguments"]}
    yield "response.output_item.done", {"output_index": index, "item": item}
