"""A streamed Messages API call (``stream: true``): the API's server-sent events in its order.

``message_start`` (the empty message), ``ping``, then the reply's text block, its prose sent
token by token as it is sampled (``text_delta``, held back where a tool call may begin, as the
chat stream holds it); once the reply ends, the rest of its text, its thinking and its
``tool_use`` blocks (the input as one ``input_json_delta``), each opened and closed
(``content_block_start`` / ``content_block_stop``), then ``message_delta`` with the
``stop_reason`` and the usage, and ``message_stop``. The stream opens only once the model
started to answer, so a call refused before it samples (a prompt too long) is an HTTP error,
not an event; a failure after that is an ``error`` event. A client that leaves cancels the
call, which is recorded as truncated.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from trajforge.serve.anthropic_reply import (
    content_blocks,
    error_body,
    message_id,
    message_object,
    stop_of,
)
from trajforge.serve.chat_stream import SampledCall
from trajforge.serve.wire import WireError

_OPENED = {
    "text": lambda b: {"type": "text", "text": ""},
    "thinking": lambda b: {"type": "thinking", "thinking": "", "signature": ""},
    "tool_use": lambda b: {**b, "input": {}},
}
"""How each kind of block is announced by ``content_block_start``, before its deltas."""


def _event(kind: str, **fields: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n"


def _delta(index: int, block: dict[str, Any]) -> str:
    kind = block["type"]
    if kind == "text":
        delta = {"type": "text_delta", "text": block["text"]}
    elif kind == "thinking":
        delta = {"type": "thinking_delta", "thinking": block["thinking"]}
    else:
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    return _event("content_block_delta", index=index, delta=delta)


def _block(index: int, block: dict[str, Any]) -> Iterator[str]:
    yield _event("content_block_start", index=index, content_block=_OPENED[block["type"]](block))
    yield _delta(index, block)
    yield _event("content_block_stop", index=index)


async def open_stream(
    call: SampledCall, model: str, stops: list[str], prompt_tokens: int | None
) -> AsyncIterator[str]:
    """The call's events, once the model has started to answer (its ``WireError`` raised
    here where it fails before); ``prompt_tokens`` as ``message_start`` says them (``None``:
    not known before the reply, then 0 until ``message_delta``)."""
    pieces, streaming_text = await call.started()
    return _events(call, pieces, streaming_text, model, stops, prompt_tokens or 0)


async def _events(
    call: SampledCall,
    pieces: AsyncIterator[tuple[int, str]],
    streaming_text: bool,
    model: str,
    stops: list[str],
    prompt_tokens: int,
) -> AsyncIterator[str]:
    reply_id = message_id()
    started = message_object(reply_id, model, None, stops, prompt_tokens)
    try:
        yield _event("message_start", message=started)
        yield _event("ping")
        if streaming_text:
            yield _event("content_block_start", index=0, content_block=_OPENED["text"]({}))
            yield _delta(0, {"type": "text", "text": call.sent[0]})
            async for _, text in pieces:
                yield _delta(0, {"type": "text", "text": text})
        try:
            (choice,) = call.choices()
        except WireError as exc:
            yield _event("error", error=error_body(exc)["error"])
            return
        blocks = content_blocks(choice)
        if streaming_text:
            rest = call.rest(0, choice)
            if rest:
                yield _delta(0, {"type": "text", "text": rest})
            yield _event("content_block_stop", index=0)
            blocks = [b for b in blocks if b["type"] != "text"]
        for index, block in enumerate(blocks, start=int(streaming_text)):
            for event in _block(index, block):
                yield event
        reason, sequence = stop_of(choice, stops)
        usage = {"input_tokens": choice.prompt_tokens, "output_tokens": choice.completion_tokens}
        yield _event(
            "message_delta",
            delta={"stop_reason": reason, "stop_sequence": sequence},
            usage=usage,
        )
        yield _event("message_stop")
    finally:
        call.cancel()  # a client that left stops the sampling
