"""The gateway's HTTP face: OpenAI's endpoints, per session, and the session endpoints.

A session is a base URL, ``/sessions/{id}/v1``, or the ``X-Trajforge-Session`` header on
``/v1``; without either, calls go to the session ``default``. Agents see only standard OpenAI
objects. ``POST /sessions/{id}`` opens a session for a task, ``POST /sessions/{id}/reward``
rewards it and ``GET /sessions/{id}`` lists what it recorded.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from trajforge.schema import Task
from trajforge.serve.anthropic_messages import add_messages_routes
from trajforge.serve.chat_stream import chat_stream, choices_usage
from trajforge.serve.client_info import note_client
from trajforge.serve.completions import completions_route
from trajforge.serve.gateway import ChatCall, ChatGateway, Choice
from trajforge.serve.gemini_api import add_gemini_routes
from trajforge.serve.gemini_reply import model_object
from trajforge.serve.recording import DEFAULT_SESSION
from trajforge.serve.responses import KeptResponses, responses_route
from trajforge.serve.wire import (
    ChatRequest,
    WireError,
    chat_message,
    completion_object,
    finish_reason_of,
    messages_of,
    new_id,
    parse_body,
    parse_chat_request,
    token_logprobs,
    tools_of,
)

SESSION_HEADER = "x-trajforge-session"
ROOTS = ("/v1", "/sessions/{session_id}/v1")


class SessionOpen(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: Task | None = None
    group_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class LoadAdapter(BaseModel):
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)


class UnloadAdapter(BaseModel):
    lora_name: str = Field(min_length=1)


class RewardIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reward: float = Field(allow_inf_nan=False)
    scores: dict[str, float] = Field(default_factory=dict)


async def json_body(request: Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WireError(f"the request body is not valid JSON: {exc}") from None


def create_app(gateway: ChatGateway) -> FastAPI:
    """The FastAPI app serving ``gateway``."""
    app = FastAPI(title="trajforge gateway", docs_url=None, redoc_url=None)

    @app.exception_handler(WireError)
    async def _wire_error(request: Request, exc: WireError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    def models() -> dict[str, Any]:
        # One list every SDK reads: OpenAI's fields, Anthropic's (its page's too) and, as the
        # Gemini SDK asks for it on /v1 by default, Gemini's ``models``.
        data = [_model(n) for n in gateway.model_names]
        return {"object": "list", "data": data, "has_more": False,
                "models": [model_object(n) for n in gateway.model_names],
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None}  # fmt: skip

    def model(name: str) -> dict[str, Any]:
        gateway.check_model(name)
        return _model(name)

    async def chat(session_id: str, request: Request) -> Any:
        body = parse_chat_request(await json_body(request))
        messages = messages_of(body)
        tools = [] if body.tool_choice == "none" else tools_of(body.tools)
        gateway.check_model(body.model)
        note_client(gateway.recorder, session_id, dict(request.headers))
        call = ChatCall(session_id, body, messages, tools)
        if body.stream:
            stream = chat_stream(gateway, call)
            return StreamingResponse(stream, media_type="text/event-stream")
        choices = await gateway.chat(call)
        reply = completion_object(
            new_id("chatcmpl"),
            body.model,
            [_choice(k, c, body) for k, c in enumerate(choices)],
            choices_usage(choices),
        )
        if body.return_token_ids:
            reply["prompt_token_ids"] = choices[0].prompt_ids
        return reply

    def session_of(request: Request) -> str:
        """The session a path names (``/sessions/{id}/v1``), else the header's, else the
        default one."""
        named = request.path_params.get("session_id")
        return str(named or request.headers.get(SESSION_HEADER) or DEFAULT_SESSION)

    async def _models() -> dict[str, Any]:
        return models()

    async def _model_info(name: str) -> dict[str, Any]:
        return model(name)

    async def _chat(request: Request) -> Any:
        return await chat(session_of(request), request)

    kept = KeptResponses()

    async def _responses(request: Request) -> Any:
        session_id = session_of(request)
        body = await json_body(request)
        note_client(gateway.recorder, session_id, dict(request.headers))
        return await responses_route(gateway, kept, session_id, body)

    async def _completions(request: Request) -> Any:
        return await completions_route(gateway, session_of(request), await json_body(request))

    # Every API answers at /v1 (the session from the header) and at a session's own root.
    for root in ROOTS:
        app.add_api_route(f"{root}/models", _models, methods=["GET"])
        app.add_api_route(f"{root}/models/{{name:path}}", _model_info, methods=["GET"])
    add_messages_routes(app, gateway, json_body, session_of)
    add_gemini_routes(app, gateway, json_body, session_of)
    for root in ROOTS:
        app.add_api_route(f"{root}/chat/completions", _chat, methods=["POST"])
        app.add_api_route(f"{root}/responses", _responses, methods=["POST"])
        app.add_api_route(f"{root}/completions", _completions, methods=["POST"])

    @app.post("/sessions/{session_id}")
    async def _open(session_id: str, request: Request) -> dict[str, Any]:
        spec = parse_body(await json_body(request), SessionOpen)
        gateway.recorder.open(session_id, spec.task, group_id=spec.group_id, metadata=spec.metadata)
        return {"session": session_id, "base_url": f"/sessions/{session_id}/v1"}

    @app.post("/sessions/{session_id}/reward")
    async def _reward(session_id: str, request: Request) -> dict[str, Any]:
        reward = parse_body(await json_body(request), RewardIn)
        session = gateway.recorder.find(session_id)
        count = gateway.recorder.set_reward(session, reward.reward, reward.scores)
        return {"session": session_id, "trajectories": count}

    @app.get("/sessions/{session_id}")
    async def _session(session_id: str) -> dict[str, Any]:
        session = gateway.recorder.find(session_id)
        trajectories = gateway.recorder.trajectories(session)
        return {
            "session": session_id,
            "reward": session.reward,
            "trajectories": [
                {"id": t.id, "status": t.outcome.status.value, "turns": t.num_turns}
                for t in trajectories
            ],
        }

    @app.post("/v1/load_lora_adapter")
    async def _load_adapter(request: Request) -> PlainTextResponse:
        spec = parse_body(await json_body(request), LoadAdapter)
        await gateway.load_adapter(spec.lora_name, spec.lora_path)
        return PlainTextResponse(f"Success: LoRA adapter '{spec.lora_name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def _unload_adapter(request: Request) -> PlainTextResponse:
        spec = parse_body(await json_body(request), UnloadAdapter)
        await gateway.unload_adapter(spec.lora_name)
        return PlainTextResponse(f"Success: LoRA adapter '{spec.lora_name}' removed successfully.")

    @app.get("/health")
    async def _health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "trajforge",
            "type": "model", "display_name": name, "created_at": "1970-01-01T00:00:00Z",
            "lifecycle": "active", **model_object(name)}  # fmt: skip


def _choice(index: int, choice: Choice, body: ChatRequest) -> dict[str, Any]:
    message = choice.message
    out = {
        "index": index,
        "message": chat_message(message, choice.content),
        "finish_reason": finish_reason_of(message, choice.finish),
        "logprobs": token_logprobs(choice.token_texts, message.logprobs) if body.logprobs else None,
    }
    if body.return_token_ids:
        out["token_ids"] = message.token_ids
    return out
