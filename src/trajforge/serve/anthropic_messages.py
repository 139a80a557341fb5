"""The Anthropic Messages API on the gateway: ``POST /v1/messages`` (streamed or not) and
``POST /v1/messages/count_tokens``, on ``/v1`` and per session (``/sessions/{id}/v1``).

A call is the equivalent chat call (``anthropic_wire``), so a client's Messages calls in a
session grow one token-exact trajectory through the one recorder, as chat calls do, with the
client's name and version (``client_info``). Errors are the API's own body with its HTTP
status. Keys are not checked, as on the OpenAI routes: ``x-api-key`` or ``Authorization:
Bearer`` may hold anything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from trajforge.serve.anthropic_reply import error_body, message_id, message_object
from trajforge.serve.anthropic_stream import open_stream
from trajforge.serve.anthropic_wire import (
    chat_request_of,
    conversation_of,
    parse_count_request,
    parse_messages_request,
    tools_of,
)
from trajforge.serve.chat_stream import SampledCall
from trajforge.serve.client_info import note_client
from trajforge.serve.gateway import ChatCall, ChatGateway, counted_prompt
from trajforge.serve.wire import WireError

JsonBody = Callable[[Request], Awaitable[Any]]


async def messages_call(
    gateway: ChatGateway, session_id: str, body: Any, headers: dict[str, str]
) -> Any:
    """Answer one ``/v1/messages`` call through ``gateway``."""
    request = parse_messages_request(body)
    messages = conversation_of(request)
    tools = tools_of(request)
    gateway.check_model(request.model)
    chat = ChatCall(session_id, chat_request_of(request, messages, tools), messages, tools)
    stops = list(request.stop_sequences or [])
    note_client(gateway.recorder, session_id, headers)
    if request.stream:
        # Counted before sampling: message_start, which says it, goes out first.
        counted = gateway.count_prompt(session_id, messages, tools)
        call = SampledCall(gateway, chat)
        events = await open_stream(call, request.model, stops, counted)
        return StreamingResponse(events, media_type="text/event-stream")
    (choice,) = await gateway.chat(chat)
    return message_object(message_id(), request.model, choice, stops)


def count_call(gateway: ChatGateway, session_id: str, body: Any) -> dict[str, int]:
    """``/v1/messages/count_tokens``: the prompt's tokens as a call would be given them."""
    request = parse_count_request(body)
    messages = conversation_of(request)
    tools = tools_of(request)
    gateway.check_model(request.model)
    return {"input_tokens": counted_prompt(gateway, session_id, messages, tools, "count_tokens")}


def add_messages_routes(
    app: FastAPI, gateway: ChatGateway, json_body: JsonBody, session_of: Callable[[Request], str]
) -> None:
    """The Messages API's routes on ``app``, their errors in the API's own shape."""

    async def messages(request: Request) -> Any:
        try:
            body = await json_body(request)
            return await messages_call(gateway, session_of(request), body, dict(request.headers))
        except WireError as exc:
            return JSONResponse(error_body(exc), status_code=exc.status)

    async def count(request: Request) -> Any:
        try:
            return count_call(gateway, session_of(request), await json_body(request))
        except WireError as exc:
            return JSONResponse(error_body(exc), status_code=exc.status)

    for root in ("/v1", "/sessions/{session_id}/v1"):
        app.add_api_route(f"{root}/messages", messages, methods=["POST"])
        app.add_api_route(f"{root}/messages/count_tokens", count, methods=["POST"])
