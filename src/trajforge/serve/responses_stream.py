"""A streamed Responses API call (``stream: true``): the API's server-sent events in its order.

``response.created`` and ``response.in_progress`` (the response without output), then the
reply's message item, its prose sent token by token as it is sampled
(``response.output_text.delta``, held back where a tool call may begin, as the chat stream holds
it); once the reply ends, the rest of its text and each of its other items (reasoning, function
calls) opened (``response.output_item.added``), filled (``response.reasoning_text.delta``,
``response.function_call_arguments.delta``) and closed (``response.output_item.done``), then
``response.completed`` (``response.incomplete`` where the reply was cut) with the whole
response. A call that fails, before sampling too (a prompt longer than the model's window:
``context_length_exceeded``), ends with ``response.failed``, as the API reports it in a stream.
A client that leaves cancels the call, which is recorded as truncated.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from trajforge.serve.chat_stream import SampledCall
from trajforge.serve.gateway import ChatCall, ChatGateway
from trajforge.serve.responses_reply import (
    error_of,
    opened_message,
    output_items,
    output_text,
    response_object,
)
from trajforge.serve.responses_wire import ResponsesRequest
from trajforge.serve.wire import WireError, new_id

Event = tuple[str, dict[str, Any]]
Keep = Callable[[str, list[dict[str, Any]]], None]
"""Keeps a finished response's output under its id (for ``previous_response_id``)."""


def _sse(kind: str, sequence: int, fields: dict[str, Any]) -> str:
    payload = {"type": kind, "sequence_number": sequence, **fields}
    return f"event: {kind}\ndata: {json.dumps(payload)}\n\n"


async def response_events(
    gateway: ChatGateway,
    call: ChatCall,
    request: ResponsesRequest,
    spaces: dict[str, tuple[str, str]],
    keep: Keep,
) -> AsyncIterator[str]:
    """The SSE events of one streamed call."""
    numbers = iter(range(1 << 30))
    async for kind, fields in _events(SampledCall(gateway, call), request, spaces, keep):
        yield _sse(kind, next(numbers), fields)


async def _events(
    call: SampledCall,
    request: ResponsesRequest,
    spaces: dict[str, tuple[str, str]],
    keep: Keep,
) -> AsyncIterator[Event]:
    response_id, message_id = new_id("resp"), new_id("msg")
    pending = response_object(request, response_id)
    yield "response.created", {"response": pending}
    yield "response.in_progress", {"response": pending}
    where = {"output_index": 0, "item_id": message_id, "content_index": 0}
    try:
        async for _, text in call.pieces():
            if text == call.sent[0]:  # the first text opens the message item
                for event in _message_opened(message_id, 0):
                    yield event
            yield "response.output_text.delta", {**where, "delta": text, "logprobs": []}
        try:
            (choice,) = call.choices()
        except WireError as exc:
            error = error_of(exc)
            failed = {**pending, "status": "failed",
                      "error": {"code": error["code"], "message": error["message"]}}  # fmt: skip
            yield "response.failed", {"response": failed}
            return
        streamed = call.sent[0]
        output = output_items(choice, message_id, spaces, text_first=bool(streamed))
        for index, item in enumerate(output):
            rest = call.rest(0, choice) if item["type"] == "message" else ""
            for event in _item_events(index, item, bool(streamed), rest):
                yield event
        final = response_object(request, response_id, choice, output)
        keep(response_id, output)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        yield kind, {"response": final}
    finally:
        call.cancel()  # a client that left stops the sampling


def _message_opened(message_id: str, index: int) -> Iterator[Event]:
    yield "response.output_item.added", {"output_index": index, "item": opened_message(message_id)}
    yield "response.content_part.added", {"output_index": index, "item_id": message_id,
                                          "content_index": 0, "part": output_text("")}  # fmt: skip


def _item_events(index: int, item: dict[str, Any], streamed: bool, rest: str) -> Iterator[Event]:
    """An output item's events; a message's after the text ``streamed`` so far, of which
    ``rest`` is what is left."""
    where = {"output_index": index, "item_id": item["id"]}
    kind = item["type"]
    if kind == "message":
        part = item["content"][0]
        if not streamed:
            yield from _message_opened(item["id"], index)
        at = {**where, "content_index": 0}
        if rest:
            yield "response.output_text.delta", {**at, "delta": rest, "logprobs": []}
        yield "response.output_text.done", {**at, "text": part["text"], "logprobs": []}
        yield "response.content_part.done", {**at, "part": part}
    elif kind == "reasoning":
        yield "response.output_item.added", {"output_index": index, "item": {**item, "content": []}}  # fmt: skip
        text = item["content"][0]["text"]
        at = {**where, "content_index": 0}
        yield "response.reasoning_text.delta", {**at, "delta": text}
        yield "response.reasoning_text.done", {**at, "text": text}
    else:
        opened = {**item, "status": "in_progress", "arguments": ""}
        yield "response.output_item.added", {"output_index": index, "item": opened}
        yield "response.function_call_arguments.delta", {**where, "delta": item["arguments"]}
        yield "response.function_call_arguments.done", {**where, "arguments": item["arguments"]}
    yield "response.output_item.done", {"output_index": index, "item": item}
