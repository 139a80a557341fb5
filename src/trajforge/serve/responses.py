"""OpenAI's Responses API (``/v1/responses``) as agents use it (Codex CLI, the OpenAI Agents
SDK, opencode): text, images, function and namespaced tools, reasoning items passed back,
``previous_response_id``, with and without streaming (``responses_stream``).

A request is turned into the equivalent chat call, so it is recorded and merged exactly like
one: a session's calls grow one token-exact trajectory. The gateway keeps the responses it
gave (``KeptResponses``, unless a call asks ``store: false``), so a call may send only what is
new after ``previous_response_id``; a kept response continues only in its own session.
Errors are the API's ``{"error": {...}}`` body.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from fastapi.responses import StreamingResponse

from trajforge.serve.gateway import ChatCall, ChatGateway
from trajforge.serve.responses_reply import error_of, output_items, response_object
from trajforge.serve.responses_stream import response_events
from trajforge.serve.responses_wire import (
    ResponsesRequest,
    conversation_of,
    function_tools,
    input_items,
    parse_request,
)
from trajforge.serve.wire import WireError, chat_request, new_id, tools_of

KEPT_RESPONSES = 4096
"""How many responses a gateway keeps for ``previous_response_id`` (the oldest go first)."""


@dataclass
class KeptResponse:
    session_id: str
    items: list[dict[str, Any]]
    """The conversation's items up to and with the response's output (instructions aside:
    the API does not carry them over)."""


class KeptResponses:
    """The responses a gateway gave, by id, for calls that continue one."""

    def __init__(self, limit: int = KEPT_RESPONSES) -> None:
        self.limit = limit
        self._kept: OrderedDict[str, KeptResponse] = OrderedDict()

    def keep(self, response_id: str, session_id: str, items: list[dict[str, Any]]) -> None:
        self._kept[response_id] = KeptResponse(session_id, items)
        while len(self._kept) > self.limit:
            self._kept.popitem(last=False)

    def items_before(self, request: ResponsesRequest, session_id: str) -> list[dict[str, Any]]:
        """The items the call continues: none, or those of its ``previous_response_id``."""
        previous = request.previous_response_id
        if previous is None:
            return []
        kept = self._kept.get(previous)
        if kept is None or kept.session_id != session_id:
            raise WireError(
                f"previous_response_id: no response {previous!r} is kept in this session (a "
                "response made with store: false, or one this gateway forgot, is not)",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return kept.items


async def responses_route(
    gateway: ChatGateway, kept: KeptResponses, session_id: str, body: Any
) -> Any:
    """Answer a Responses API call (streaming or not) through ``gateway``."""
    request = parse_request(body)
    items = [*kept.items_before(request, session_id), *input_items(request)]
    messages = conversation_of(items, request.instructions)
    offered, spaces = function_tools(request)
    tools = tools_of(offered)
    gateway.check_model(request.model)
    chat = chat_request(request.model, messages, tools, temperature=request.temperature,
                        top_p=request.top_p, max_completion_tokens=request.max_output_tokens)  # fmt: skip
    call = ChatCall(session_id, chat, messages, tools)

    def keep(response_id: str, output: list[dict[str, Any]]) -> None:
        if request.kept:
            kept.keep(response_id, session_id, [*items, *output])

    if request.stream:
        events = response_events(gateway, call, request, spaces, keep)
        return StreamingResponse(events, media_type="text/event-stream")
    try:
        (choice,) = await gateway.chat(call)
    except WireError as exc:
        raise ResponsesError(exc) from None
    response_id = new_id("resp")
    output = output_items(choice, new_id("msg"), spaces)
    keep(response_id, output)
    return response_object(request, response_id, choice, output)


class ResponsesError(WireError):
    """A failed call as the Responses API words it (a full context is its
    ``context_length_exceeded``)."""

    def __init__(self, exc: WireError) -> None:
        error = error_of(exc)
        super().__init__(error["message"], param=error["param"], status=exc.status,
                         code=error["code"], kind=error["type"])  # fmt: skip
