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
from trajforge.serve.client_info import note_client
from trajforge.serve.gateway import ChatGateway
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
    chat = chat_request_of(request, messages, tools)
    stops = list(request.stop_sequences or [])
    note_client(gateway.recorder, session_id, headers)
    if request.stream:
        events = await open_stream(gateway, session_id, chat, messages, tools, stops)
        return StreamingResponse(events, media_type="text/event-stream")
    (choice,) = await gateway.chat(session_id, chat, messages, tools)
    return message_object(message_id(), request.model, choice, stops)


def count_call(gateway: ChatGateway, session_id: str, body: Any) -> dict[str, int]:
    """``/v1/messages/count_tokens``: the prompt's tokens as a call would be given them."""
    request = parse_count_request(body)
    messages = conversation_of(request)
    tools = tools_of(request)
    gateway.check_model(request.model)
    return {"input_tokens": gateway.count_prompt(session_id, messages, tools)}


def add_messages_routes(
    app: FastAPI, gateway: ChatGateway, json_body: JsonBody, session_of: Callable[[Request], str]
) -> None:
    """The Messages API's routes on ``app``, their errors in the API's own shape."""

    async def answered(call: Awaitable[Any]) -> Any:
        try:
            return await call
        except WireError as exc:
            return JSONResponse(error_body(exc), status_code=exc.status)

    async def messages(session_id: str, request: Request) -> Any:
        headers = dict(request.headers)
        return await messages_call(gateway, session_id, await json_body(request), headers)

    async def count(session_id: str, request: Request) -> Any:
        return count_call(gateway, session_id, await json_body(request))

    @app.post("/v1/messages")
    async def _messages(request: Request) -> Any:
        return await answered(messages(session_of(request), request))

    @app.post("/sessions/{session_id}/v1/messages")
    async def _session_messages(session_id: str, request: Request) -> Any:
        return await answered(messages(session_id, request))

    @app.post("/v1/messages/count_tokens")
    async def _count(request: Request) -> Any:
        return await answered(count(session_of(request), request))

    @app.post("/sessions/{session_id}/v1/messages/count_tokens")
    async def _session_count(session_id: str, request: Request) -> Any:
        return await answered(count(session_id, request))
