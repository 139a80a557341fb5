"""The OpenAI wire format of chat completions: requests checked field by field, converted to
trajforge messages and sampling parameters, and replies built as the OpenAI SDK parses them.

A request field the gateway cannot honour (``UNSUPPORTED``: ``top_logprobs``, a penalty, a
response format, a forced tool choice) is refused as unsupported with an OpenAI-style 400 that
names it, never silently ignored nor reported as out of range; fields that do not change what is
sampled (``user``, ``metadata``, ``store``) are accepted and ignored.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trajforge.errors import DataError
from trajforge.formats import message_to_openai, messages_from_openai
from trajforge.policy import FinishReason, SamplingParams
from trajforge.schema import FunctionSpec, Message, Role, ToolCall, ToolSpec, check_conversation

DEFAULT_MAX_TOKENS = 512
MAX_CHOICES = 16


class WireError(Exception):
    """An error the client sees as OpenAI's ``{"error": {...}}`` body."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


class ContextFull(WireError):
    """A prompt that leaves the model no room for a reply: each API words it its own way from
    the counts (OpenAI's 400 names the field, with its ``context_length_exceeded`` code;
    Anthropic's says ``prompt is too long``)."""

    def __init__(self, message: str, param: str, prompt_tokens: int, max_context: int) -> None:
        super().__init__(message, param=param, code="context_length_exceeded")
        self.prompt_tokens = prompt_tokens
        self.max_context = max_context


def context_room(
    prompt_tokens: int, max_context: int | None, message: str, param: str
) -> int | None:
    """The tokens a reply may take after a prompt of ``prompt_tokens`` (``None``: no known
    limit); ``ContextFull`` (``message``, naming ``param``) where none is left: a prompt is
    never cut to fit."""
    if max_context is None:
        return None
    room = max_context - prompt_tokens
    if room < 1:
        raise ContextFull(message, param, prompt_tokens, max_context)
    return room


def wire_error_of(exc: ValidationError, prefix: str = "") -> WireError:
    """The first problem of a pydantic validation error, as a 400 naming its field."""
    first = exc.errors()[0]
    param = prefix + ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in first["loc"])
    param = param.replace(".[", "[")
    return WireError(f"{param}: {first['msg']}", param=param)


class WireModel(BaseModel):
    """A request body: fields that do not change what is sampled are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")


BodyT = TypeVar("BodyT", bound=BaseModel)


class FunctionIn(WireModel):
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ToolIn(WireModel):
    type: Literal["function"] = "function"
    function: FunctionIn


class StreamOptions(WireModel):
    include_usage: bool = False


class ChatRequest(WireModel):
    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[ToolIn] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    """vLLM's extension (as Anthropic's and Gemini's APIs have it): the k most likely tokens
    only; 0 or -1 (vLLM's spelling) cut nothing."""
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: bool | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool = False
    """vLLM's extension: the prompt's ids (``prompt_token_ids``) and each choice's sampled ids
    (``token_ids``) in a non-streamed reply."""


def parse_body(body: Any, model: type[BodyT]) -> BodyT:
    """A JSON request body as ``model``; a 400 naming the first bad field otherwise."""
    if not isinstance(body, dict):
        raise WireError("the request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise wire_error_of(exc) from None


def check_tool_choice(tool_choice: str | dict[str, Any] | None) -> None:
    if tool_choice not in (None, "auto", "none"):
        raise WireError(
            "tool_choice: only 'auto' and 'none' can be honoured (no constrained decoding)",
            param="tool_choice",
        )


Unsupported = dict[str, tuple[tuple[Any, ...], str]]
"""Request fields a route cannot honour: the values that change nothing (accepted, as is
``null``) and why any other is refused."""

SAMPLING_UNSUPPORTED: Unsupported = {
    "presence_penalty": ((0, 0.0), "sampling applies no penalties"),
    "frequency_penalty": ((0, 0.0), "sampling applies no penalties"),
    "logit_bias": (({},), "sampling applies no logit bias"),
}
UNSUPPORTED: Unsupported = {
    **SAMPLING_UNSUPPORTED,
    "top_logprobs": ((0,), "no alternatives are returned with the sampled tokens' logprobs"),
    "response_format": (({"type": "text"},), "replies are not constrained to a format"),
    "functions": (([],), "use tools"),
    "function_call": (("auto", "none"), "use tool_choice"),
    "modalities": ((["text"],), "replies are text"),
    "audio": ((), "replies are text"),
    "prediction": ((), "there is no predicted output decoding"),
    "reasoning_effort": ((), "the model has no reasoning setting"),
    "web_search_options": ((), "the model has no web search"),
}
"""The chat-completion fields the gateway cannot honour."""


def check_supported(
    body: dict[str, Any], unsupported: Unsupported = UNSUPPORTED, prefix: str = ""
) -> None:
    """A 400 naming the first field set to something the gateway cannot honour (``prefix``:
    where ``body`` sits in the request)."""
    for name, (harmless, why) in unsupported.items():
        value = body.get(name)
        if value is not None and value not in harmless:
            raise WireError(
                f"{prefix}{name}: not supported by this gateway ({why}); leave it out",
                param=prefix + name,
                code="unsupported_parameter",
            )


def parse_chat_request(body: Any) -> ChatRequest:
    if isinstance(body, dict):
        check_supported(body)
    request = parse_body(body, ChatRequest)
    check_tool_choice(request.tool_choice)
    return request


def messages_of(request: ChatRequest) -> list[Message]:
    """The request's conversation as trajforge messages, checked as a conversation."""
    try:
        messages = messages_from_openai(request.messages)
    except DataError as exc:
        raise wire_error_of_data(exc) from None
    check_messages(messages)
    return messages


def wire_error_of_data(exc: DataError) -> WireError:
    """``messages.0: role: ...`` as OpenAI names the field: ``messages[0].role``."""
    where, _, rest = str(exc).partition(": ")
    field, sep, detail = rest.partition(": ")
    if sep and field.isidentifier():
        where, rest = f"{where}.{field}", detail
    param = re.sub(r"\.(\d+)", r"[\1]", where)
    return WireError(f"{param}: {rest}", param=param)


def check_messages(messages: list[Message]) -> None:
    """A conversation the model can answer: a valid role order, not ending with an assistant
    message (there would be nothing to answer)."""
    try:
        check_conversation(messages)
    except ValueError as exc:
        text = str(exc)
        raise WireError(text, param=text.split(":", 1)[0].split(".")[0]) from None
    if messages[-1].role is Role.ASSISTANT:
        last = f"messages[{len(messages) - 1}]"
        raise WireError(
            f"{last}.role: the conversation ends with an assistant message; it must end with a "
            "user, system or tool message to be answered",
            param=f"{last}.role",
        )


def tools_of(tools: list[ToolIn] | None) -> list[ToolSpec]:
    out = []
    for k, tool in enumerate(tools or []):
        try:
            function = FunctionSpec(
                name=tool.function.name,
                description=tool.function.description,
                parameters=tool.function.parameters,
            )
        except ValidationError as exc:
            raise wire_error_of(exc, f"tools[{k}].function.") from None
        out.append(ToolSpec(function=function))
    return out


def chat_request(
    model: str, messages: list[Message], tools: list[ToolSpec], **sampling: Any
) -> ChatRequest:
    """The chat request another API's request stands for: its conversation and tools in OpenAI's
    shape too (as a gateway forwarding to another server sends them), and its ``sampling``
    fields (``temperature``, ``top_p``, ``top_k``, ``max_tokens``, ``stop``, ``seed``)."""
    return ChatRequest.model_validate(
        {
            "model": model,
            "messages": [message_to_openai(m) for m in messages],
            "tools": [t.to_openai() for t in tools] or None,
            **sampling,
        }
    )


def sampling_of(
    request: ChatRequest, room: int | None, default_max_tokens: int = DEFAULT_MAX_TOKENS
) -> SamplingParams:
    """Sampling as the request asks (OpenAI's defaults: temperature 1, top_p 1); the reply's
    length is bounded by the context left (``room``, at least 1: ``context_room``)."""
    asked = request.max_completion_tokens or request.max_tokens
    limit = asked or default_max_tokens
    if room is not None:
        limit = min(limit, room)
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    return SamplingParams(
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=max(request.top_k or 0, 0),
        max_new_tokens=limit,
        stop=stop,
        seed=request.seed,
    )


# --- replies -------------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def wire_calls(message: Message) -> list[dict[str, Any]]:
    """The assistant message's named calls as OpenAI tool calls. A call whose arguments the
    parser could not read keeps the model's raw text as ``arguments``, as OpenAI's API may
    return invalid JSON there; a call without a name cannot be sent (nor answered): the
    trajectory keeps it, and the client's next call starts a new one."""
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call_arguments_text(call)},
        }
        for call in message.tool_calls
        if call.name
    ]


def call_arguments_text(call: ToolCall) -> str:
    """A call's arguments as the client sees them: JSON, or the raw text of a malformed call."""
    return json.dumps(call.arguments) if call.parse_error is None else call.raw or ""


def finish_reason_of(message: Message, finish: FinishReason) -> str:
    if finish is FinishReason.LENGTH:
        return "length"
    return "tool_calls" if wire_calls(message) else "stop"


def token_logprobs(texts: list[str] | None, logprobs: list[float] | None) -> Any:
    """OpenAI's ``logprobs.content``: one entry per sampled token."""
    if logprobs is None or texts is None:
        return None
    content = []
    for text, logprob in zip(texts, logprobs, strict=True):
        content.append(
            {
                "token": text,
                "logprob": logprob,
                "bytes": list(text.encode()),
                "top_logprobs": [],
            }
        )
    return {"content": content, "refusal": None}


def chat_message(message: Message, content: str) -> dict[str, Any]:
    """The reply ``message`` as OpenAI's assistant message, with ``content`` (its prose as
    sampled) as text."""
    out: dict[str, Any] = {"role": "assistant", "content": content or None}
    calls = wire_calls(message)
    if calls:
        out["tool_calls"] = calls
    out["refusal"] = None
    return out


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion_object(
    reply_id: str, model: str, choices: list[dict[str, Any]], usage_: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": reply_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage_,
        "system_fingerprint": None,
    }


def chunk(
    reply_id: str, model: str, choices: list[dict[str, Any]], usage_: dict[str, int] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": reply_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "system_fingerprint": None,
    }
    if usage_ is not None:
        out["usage"] = usage_
    return out
