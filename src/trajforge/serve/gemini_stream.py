"""A streamed Gemini API call (``:streamGenerateContent?alt=sse``): ``GenerateContentResponse``
chunks as server-sent events, the reply's prose token by token as it is sampled (held back
where a tool call may begin, as the chat stream holds it), then one last chunk with the rest of
its prose, its ``functionCall`` parts, its ``finishReason`` and ``usageMetadata``.

The stream opens only once the model started to answer, so a call refused before it samples (a
prompt too long) is an HTTP error; a failure after that is an ``{"error": ...}`` chunk, which
the SDK raises. A client that leaves cancels the call, which is recorded as truncated.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from trajforge.serve.chat_stream import SampledCall, sse
from trajforge.serve.gemini_reply import error_body, generate_response, reply_parts, response_id
from trajforge.serve.wire import WireError


async def open_stream(call: SampledCall, model: str) -> AsyncIterator[str]:
    """The call's chunks, once the model has started to answer (its ``WireError`` raised here
    where it fails before)."""
    pieces, streaming_text = await call.started()
    return _chunks(call, pieces, streaming_text, model)


async def _chunks(
    call: SampledCall,
    pieces: AsyncIterator[tuple[int, str]],
    streaming_text: bool,
    model: str,
) -> AsyncIterator[str]:
    reply_id = response_id()
    try:
        if streaming_text:
            yield sse(generate_response(reply_id, model, [{"text": call.sent[0]}], None))
            async for _, text in pieces:
                yield sse(generate_response(reply_id, model, [{"text": text}], None))
        try:
            (choice,) = call.choices()
        except WireError as exc:
            yield sse(error_body(exc))
            return
        parts = reply_parts(choice)
        if streaming_text:
            rest = call.rest(0, choice)
            parts = [p for p in parts if "text" not in p or p.get("thought")]
            parts = ([{"text": rest}] if rest else []) + parts
        yield sse(generate_response(reply_id, model, parts, choice))
    finally:
        call.cancel()  # a client that left stops the sampling
