"""The Gemini API's replies: a ``GenerateContentResponse`` built from a sampled choice (its
parts, ``finishReason``, ``usageMetadata``), the model objects the SDK lists, and the API's own
error body.

A reply's text part is its prose exactly as sampled (as the chat route sends it), so a
conversation sent back matches the recorded one; its calls are ``functionCall`` parts, with the
recorded call's ``id``, parsed by the same machinery as every route's. A call whose arguments
could not be read is not sent: the reply ends ``MALFORMED_FUNCTION_CALL``, as the API's does.
"""

from __future__ import annotations

import uuid
from typing import Any

from trajforge.policy import FinishReason
from trajforge.serve.gateway import Choice
from trajforge.serve.wire import ContextFull, WireError

STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
"""The API's error ``status`` by HTTP status (any other is ``INTERNAL``)."""


def response_id() -> str:
    return uuid.uuid4().hex[:22]


def error_body(exc: WireError) -> dict[str, Any]:
    """``{"error": {"code", "message", "status"}}``; a prompt that leaves no room for a reply
    names its token count and the largest the model takes, as the API words it."""
    text = exc.message
    if isinstance(exc, ContextFull):
        text = (
            f"The input token count ({exc.prompt_tokens}) exceeds the maximum number of tokens "
            f"allowed ({exc.max_context - 1})."
        )
    status = STATUSES.get(exc.status, "INTERNAL")
    return {"error": {"code": exc.status, "message": text, "status": status}}


def function_calls(choice: Choice) -> list[dict[str, Any]]:
    """The reply's readable, named calls as ``functionCall`` parts."""
    return [
        {"functionCall": {"id": call.id, "name": call.name, "args": call.arguments}}
        for call in choice.message.tool_calls
        if call.name and call.parse_error is None
    ]


def finish_reason(choice: Choice) -> str:
    if choice.finish is FinishReason.LENGTH:
        return "MAX_TOKENS"
    malformed = any(c.parse_error is not None or not c.name for c in choice.message.tool_calls)
    return "MALFORMED_FUNCTION_CALL" if malformed else "STOP"


def reply_parts(choice: Choice) -> list[dict[str, Any]]:
    """The reply's thought, prose and calls, in the order the model wrote them."""
    reasoning = choice.message.reasoning
    parts = [{"text": reasoning, "thought": True}] if reasoning else []
    if choice.content:
        parts.append({"text": choice.content})
    return parts + function_calls(choice)


def usage_metadata(choice: Choice) -> dict[str, int]:
    prompt, completion = choice.prompt_tokens, choice.completion_tokens
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion,
        "totalTokenCount": prompt + completion,
    }


def generate_response(
    reply_id: str, model: str, parts: list[dict[str, Any]], choice: Choice | None
) -> dict[str, Any]:
    """A ``GenerateContentResponse`` holding ``parts``; with its ``finishReason`` and usage
    where ``choice`` (the reply, once sampled) is given."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": reply_id}
    if choice is not None:
        candidate["finishReason"] = finish_reason(choice)
        out["usageMetadata"] = usage_metadata(choice)
    return out


def model_object(name: str) -> dict[str, Any]:
    """A served model as the API's ``Model``."""
    return {
        "name": f"models/{name}",
        "baseModelId": name,
        "version": "1",
        "displayName": name,
        "description": "served by the trajforge gateway",
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
    }
