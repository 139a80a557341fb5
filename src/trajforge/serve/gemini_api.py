"""The Gemini API on the gateway: ``POST /v1beta/models/{model}:generateContent``,
``:streamGenerateContent`` (``?alt=sse``, as the SDKs ask), ``:countTokens``, and
``GET /v1beta/models`` (one model: ``/v1beta/models/{model}``), the same on ``/v1``, on the
root and per session (``/sessions/{id}/v1beta``, or the ``X-Trajforge-Session`` header).

A call is the equivalent chat call (``gemini_wire``), so a client's calls in a session grow one
token-exact trajectory through the one recorder, as chat calls do, with the client's name and
version (its ``User-Agent``, and its ``x-goog-api-client`` header). Errors are the API's own
body with its HTTP status. Keys are not checked, as on the other routes, but one must be sent
(``x-goog-api-key``, ``?key=`` or a bearer token), as the API asks: a call without one is
refused as the API refuses it (403), a blank one as invalid (400).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from trajforge.serve.chat_stream import SampledCall
from trajforge.serve.client_info import note_client
from trajforge.serve.gateway import ChatCall, ChatGateway, counted_prompt
from trajforge.serve.gemini_reply import (
    error_body,
    generate_response,
    model_object,
    reply_parts,
    response_id,
)
from trajforge.serve.gemini_stream import open_stream
from trajforge.serve.gemini_wire import (
    chat_request_of,
    conversation_of,
    parse_count_request,
    parse_generate_request,
    tools_of,
)
from trajforge.serve.recorder import Recorder
from trajforge.serve.wire import WireError

JsonBody = Callable[[Request], Awaitable[Any]]
VERSION = "v1beta"
VERSIONS = (VERSION, "v1")
"""The API versions served: the Python SDK asks for ``v1`` by default, the JavaScript SDK (and
Gemini CLI) for ``v1beta``. Models are listed on ``v1`` by the OpenAI route, whose list and
model objects carry the Gemini API's fields too."""
MODEL_PREFIX = "models/"


def check_key(request: Request) -> None:
    """Any key is taken (as on the other routes), but a call must carry one, as the API's
    must: none is the API's 403, a blank one its 400."""
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
    key = request.headers.get("x-goog-api-key", request.query_params.get("key", bearer or None))
    if key is None:
        raise WireError(
            "Method doesn't allow unregistered callers (callers without established identity). "
            "Please use API Key or other form of API consumer identity to call this API.",
            status=403,
        )
    if not key.strip():
        raise WireError("API key not valid. Please pass a valid API key.", status=400)


def note_gemini_client(recorder: Recorder, session_id: str, headers: Mapping[str, str]) -> None:
    """Record the calling client: its ``User-Agent`` (``GeminiCLI/0.9.0 ...``), else its
    ``x-goog-api-client`` (``google-genai-sdk/1.30.0 gl-node/v20.19.0``), which is kept too."""
    api_client = headers.get("x-goog-api-client", "")
    note_client(recorder, session_id, {"user-agent": headers.get("user-agent") or api_client})
    if api_client:
        recorder.session(session_id).metadata.setdefault("client", {})["api_client"] = api_client


def model_name(name: str) -> str:
    """A model as a path names it (``models/tiny`` or ``tiny``) as the gateway serves it."""
    return name.removeprefix(MODEL_PREFIX)


async def generate_call(
    gateway: ChatGateway, session_id: str, model: str, body: Any, request: Request, stream: bool
) -> Any:
    """Answer one ``generateContent`` / ``streamGenerateContent`` call through ``gateway``."""
    asked = parse_generate_request(body)
    messages = conversation_of(asked)
    tools = tools_of(asked)
    gateway.check_model(model)
    chat = ChatCall(session_id, chat_request_of(model, asked, messages, tools), messages, tools)
    note_gemini_client(gateway.recorder, session_id, request.headers)
    if stream and request.query_params.get("alt") == "sse":
        call = SampledCall(gateway, chat)
        chunks = await open_stream(call, model)
        return StreamingResponse(chunks, media_type="text/event-stream")
    (choice,) = await gateway.chat(chat)
    reply = generate_response(response_id(), model, reply_parts(choice), choice)
    return [reply] if stream else reply  # a stream asked without SSE is a JSON array


def count_call(gateway: ChatGateway, session_id: str, model: str, body: Any) -> dict[str, int]:
    """``countTokens``: the prompt's tokens as a call would be given them."""
    asked = parse_count_request(body)
    messages = conversation_of(asked)
    tools = tools_of(asked)
    gateway.check_model(model)
    return {"totalTokens": counted_prompt(gateway, session_id, messages, tools, "countTokens")}


def add_gemini_routes(
    app: FastAPI, gateway: ChatGateway, json_body: JsonBody, session_of: Callable[[Request], str]
) -> None:
    """The Gemini API's routes on ``app``, their errors in the API's own shape."""

    async def answered(request: Request, call: Callable[[], Awaitable[Any]]) -> Any:
        try:
            check_key(request)
            return await call()
        except WireError as exc:
            return JSONResponse(error_body(exc), status_code=exc.status)

    async def method(session_id: str, target: str, request: Request) -> Any:
        name, _, verb = target.rpartition(":")
        model = model_name(name)
        if verb in ("generateContent", "streamGenerateContent"):
            body = await json_body(request)
            stream = verb == "streamGenerateContent"
            return await generate_call(gateway, session_id, model, body, request, stream)
        if verb == "countTokens":
            return count_call(gateway, session_id, model, await json_body(request))
        raise WireError(
            f"{target}: no such method; this gateway serves generateContent, "
            "streamGenerateContent and countTokens",
            status=404,
        )

    async def models() -> dict[str, Any]:
        return {"models": [model_object(n) for n in gateway.model_names]}

    async def one(name: str) -> dict[str, Any]:
        gateway.check_model(model_name(name))
        return model_object(model_name(name))

    async def _method(target: str, request: Request) -> Any:
        return await answered(request, lambda: method(session_of(request), target, request))

    async def _models(request: Request) -> Any:
        return await answered(request, models)

    async def _model(name: str, request: Request) -> Any:
        return await answered(request, lambda: one(name))

    # At the API's own root (the session from the header) and at a session's.
    for root in ("", "/sessions/{session_id}"):
        for version in VERSIONS:
            app.add_api_route(f"{root}/{version}/models/{{target:path}}", _method, methods=["POST"])
        app.add_api_route(f"{root}/{VERSION}/models", _models, methods=["GET"])
        app.add_api_route(f"{root}/{VERSION}/models/{{name:path}}", _model, methods=["GET"])
