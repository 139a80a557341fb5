"""A streamed chat completion (``stream=True``): OpenAI's chunks, sent as the reply is sampled.

Each choice's prose goes out token by token while the model samples it, except what may still
turn out to be part of a tool call (``reply_text``); once the reply ends, the rest of its prose,
its tool calls and its finish reason follow, then the usage when asked, then ``[DONE]``. A
client that leaves cancels the call, which is recorded as truncated.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from trajforge.serve.gateway import ChatCall, ChatGateway, Choice
from trajforge.serve.wire import (
    WireError,
    chunk,
    finish_reason_of,
    new_id,
    token_logprobs,
    usage,
    wire_calls,
)


def sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n"


def choices_usage(choices: list[Choice]) -> dict[str, int]:
    return usage(choices[0].prompt_tokens, sum(c.completion_tokens for c in choices))


class SampledCall:
    """A gateway call whose choices' prose comes out as it is sampled: iterate ``pieces``,
    then read ``choices``; ``cancel`` stops a call whose client left (recorded truncated)."""

    def __init__(self, gateway: ChatGateway, call: ChatCall) -> None:
        self._pieces: asyncio.Queue[tuple[int, str] | None] = asyncio.Queue()
        self._call = asyncio.ensure_future(gateway.chat(call, on_text=self._text))
        self._call.add_done_callback(lambda _: self._pieces.put_nowait(None))
        self.sent = [""] * call.request.n
        """Each choice's prose sent so far."""

    def _text(self, index: int, text: str) -> None:
        self._pieces.put_nowait((index, text))

    async def pieces(self) -> AsyncIterator[tuple[int, str]]:
        """``(choice index, prose)`` as it settles, until the call ends."""
        while (piece := await self._pieces.get()) is not None:
            self.sent[piece[0]] += piece[1]
            yield piece

    async def started(self) -> tuple[AsyncIterator[tuple[int, str]], bool]:
        """``pieces`` once the model has started to answer, and whether prose came (already
        in ``sent``); the call's ``WireError`` is raised here where it failed before (a prompt
        too long), so a stream can still answer it with an HTTP error."""
        pieces = self.pieces()
        try:
            first = await anext(pieces, None)
            if first is None:
                self.choices()
        except BaseException:
            self.cancel()
            raise
        return pieces, first is not None

    def choices(self) -> list[Choice]:
        """The call's choices once ``pieces`` ended (its ``WireError`` if it failed)."""
        return self._call.result()

    def rest(self, index: int, choice: Choice) -> str:
        """The prose of ``choice`` not sent yet (what was held back to its end)."""
        sent = self.sent[index]
        return choice.content[len(sent) :] if choice.content.startswith(sent) else ""

    def cancel(self) -> None:
        self._call.cancel()  # a no-op once the call is done


async def chat_stream(gateway: ChatGateway, chat: ChatCall) -> AsyncIterator[str]:
    """The SSE events of one streamed chat call (see the module's docstring)."""
    reply_id = new_id("chatcmpl")
    body = chat.request

    def event(index: int, delta: dict[str, Any]) -> str:
        frame = {"index": index, "delta": delta, "finish_reason": None}
        return sse(chunk(reply_id, body.model, [frame]))

    call = SampledCall(gateway, chat)
    try:
        for k in range(body.n):
            yield event(k, {"role": "assistant", "content": ""})
        async for k, text in call.pieces():
            yield event(k, {"content": text})
        try:
            choices = call.choices()
        except WireError as exc:
            yield sse(exc.body())
            return
        for k, choice in enumerate(choices):
            rest = call.rest(k, choice)
            if rest:
                yield event(k, {"content": rest})
            for j, tool_call in enumerate(wire_calls(choice.message)):
                yield event(k, {"tool_calls": [{"index": j, **tool_call}]})
            last: dict[str, Any] = {
                "index": k,
                "delta": {},
                "finish_reason": finish_reason_of(choice.message, choice.finish),
            }
            if body.logprobs:
                last["logprobs"] = token_logprobs(choice.token_texts, choice.message.logprobs)
            yield sse(chunk(reply_id, body.model, [last]))
        if body.stream_options is not None and body.stream_options.include_usage:
            yield sse(chunk(reply_id, body.model, [], choices_usage(choices)))
        yield sse("[DONE]")
    finally:
        call.cancel()  # a client that left stops the sampling
