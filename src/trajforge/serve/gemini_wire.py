"""The Gemini API's request (``generateContent``, ``streamGenerateContent``, ``countTokens``):
checked field by field and turned into the gateway's chat call, so it is sampled, recorded and
merged exactly like one.

``systemInstruction`` is the first message; a ``user`` content's ``functionResponse`` parts
become tool messages answering the calls of the ``model`` turn before it (by ``id``, else the
first unanswered call of that name), its text and ``inlineData`` images one user message after
them; a ``model`` content's ``functionCall`` parts are its calls, its ``thought`` text its
reasoning. Fields are taken in camelCase or snake_case, as the API takes them. Fields that do
not change what is sampled (``safetySettings``, ``thinkingConfig``, ``thoughtSignature``) are
accepted and ignored; what the gateway cannot honour (a forced function call, a server tool,
more than one candidate, a response schema, a file URI) is refused, named.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from trajforge.schema import FunctionSpec, ImagePart, Message, Role, TextPart, ToolCall, ToolSpec
from trajforge.serve.wire import (
    SAMPLING_UNSUPPORTED,
    ChatRequest,
    Unsupported,
    WireError,
    WireModel,
    chat_request,
    check_messages,
    check_supported,
    parse_body,
    wire_error_of,
)
from trajforge.serve.wire_content import image_from_base64, user_turn

GENERATION_UNSUPPORTED: Unsupported = {
    **{to_camel(k): v for k, v in SAMPLING_UNSUPPORTED.items() if k != "logit_bias"},
    "candidateCount": ((1,), "one candidate is sampled per call"),
    "responseMimeType": (("text/plain",), "replies are not constrained to a format"),
    "responseSchema": ((), "replies are not constrained to a schema"),
    "responseJsonSchema": ((), "replies are not constrained to a schema"),
    "responseLogprobs": ((False,), "no logprobs are returned"),
    "logprobs": ((), "no logprobs are returned"),
    "responseModalities": ((["TEXT"], ["text"]), "replies are text"),
    "speechConfig": ((), "replies are text"),
}
"""The ``generationConfig`` fields the gateway cannot honour."""

REQUEST_UNSUPPORTED: Unsupported = {
    "cachedContent": ((), "the gateway keeps no cached contents"),
}

SERVER_TOOLS = (
    "googleSearch",
    "googleSearchRetrieval",
    "codeExecution",
    "urlContext",
    "computerUse",
    "fileSearch",
    "googleMaps",
    "retrieval",
)
"""Tools the API runs on its side, which the gateway cannot."""


class GeminiModel(WireModel):
    model_config = ConfigDict(extra="ignore", alias_generator=to_camel, populate_by_name=True)


class Blob(GeminiModel):
    mime_type: str | None = None
    data: str


class FunctionCallIn(GeminiModel):
    id: str | None = None
    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class FunctionResponseIn(GeminiModel):
    id: str | None = None
    name: str = Field(min_length=1)
    response: dict[str, Any] = Field(default_factory=dict)


class PartIn(GeminiModel):
    text: str | None = None
    thought: bool = False
    inline_data: Blob | None = None
    function_call: FunctionCallIn | None = None
    function_response: FunctionResponseIn | None = None
    file_data: dict[str, Any] | None = None
    executable_code: dict[str, Any] | None = None
    code_execution_result: dict[str, Any] | None = None


class ContentIn(GeminiModel):
    role: Literal["user", "model", "function"] | None = None
    parts: list[PartIn] = Field(min_length=1)


class FunctionDeclaration(GeminiModel):
    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] | None = None
    parameters_json_schema: dict[str, Any] | None = None


class ToolIn(GeminiModel):
    function_declarations: list[FunctionDeclaration] = Field(default_factory=list)


class FunctionCallingConfig(GeminiModel):
    mode: Literal["AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED"] = "AUTO"
    allowed_function_names: list[str] | None = None


class ToolConfig(GeminiModel):
    function_calling_config: FunctionCallingConfig | None = None


class GenerationConfig(GeminiModel):
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    max_output_tokens: int | None = Field(default=None, ge=1)
    stop_sequences: list[str] | None = None
    seed: int | None = None


class GenerateRequest(GeminiModel):
    contents: list[ContentIn] = Field(min_length=1)
    system_instruction: ContentIn | None = None
    tools: list[dict[str, Any]] | None = None
    tool_config: ToolConfig | None = None
    generation_config: GenerationConfig | None = None


class CountRequest(GeminiModel):
    """``countTokens``: ``contents`` alone, or a whole ``generateContentRequest``."""

    contents: list[ContentIn] | None = None
    generate_content_request: GenerateRequest | None = None


def parse_generate_request(body: Any) -> GenerateRequest:
    if isinstance(body, dict):
        _check_supported(body)
        config = body.get("generationConfig", body.get("generation_config"))
        if isinstance(config, dict):
            _check_supported(config, GENERATION_UNSUPPORTED, "generationConfig.")
    request = parse_body(body, GenerateRequest)
    _check_tool_config(request.tool_config)
    return request


def _check_supported(
    body: dict[str, Any], unsupported: Unsupported = REQUEST_UNSUPPORTED, prefix: str = ""
) -> None:
    """``check_supported`` on a body whose fields may come in snake_case."""
    check_supported({to_camel(k): v for k, v in body.items()}, unsupported, prefix)


def parse_count_request(body: Any) -> GenerateRequest:
    """The request whose prompt ``countTokens`` counts."""
    request = parse_body(body, CountRequest)
    if request.generate_content_request is not None:
        return parse_generate_request(
            body.get("generateContentRequest", body.get("generate_content_request"))
        )
    if not request.contents:
        raise WireError(
            "contents: either contents or generateContentRequest must be set", param="contents"
        )
    return GenerateRequest(contents=request.contents)


def _check_tool_config(config: ToolConfig | None) -> None:
    calling = config.function_calling_config if config else None
    if calling is None:
        return
    if calling.mode in ("ANY", "VALIDATED"):
        raise WireError(
            f"toolConfig.functionCallingConfig.mode: {calling.mode} cannot be honoured (no "
            "constrained decoding); use AUTO or NONE",
            param="toolConfig.functionCallingConfig.mode",
        )
    if calling.allowed_function_names:
        raise WireError(
            "toolConfig.functionCallingConfig.allowedFunctionNames: only with mode ANY, which "
            "cannot be honoured (no constrained decoding)",
            param="toolConfig.functionCallingConfig.allowedFunctionNames",
        )


def conversation_of(request: GenerateRequest) -> list[Message]:
    """The request's system instruction and contents as trajforge messages, checked as a
    conversation the model can answer."""
    out: list[Message] = []
    if request.system_instruction is not None:
        texts = [_text(p, f"systemInstruction.parts[{k}]")
                 for k, p in enumerate(request.system_instruction.parts)]  # fmt: skip
        out.append(Message(role=Role.SYSTEM, content="".join(texts)))
    for i, content in enumerate(request.contents):
        where = f"contents[{i}]"
        if content.role == "model":
            out.append(_model_turn(content.parts, where, i))
        else:
            out.extend(_user_turn(content.parts, where, out[-1] if out else None))
    check_messages(out)
    return out


def _text(part: PartIn, where: str) -> str:
    if part.text is None:
        raise WireError(f"{where}: a system instruction holds text parts only", param=where)
    return part.text


def call_id(index: int, k: int) -> str:
    """The id of the ``k``-th call of ``contents[index]`` that came without one."""
    return f"call_{index}_{k}"


def _model_turn(parts: list[PartIn], where: str, index: int) -> Message:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    for k, part in enumerate(parts):
        at = f"{where}.parts[{k}]"
        if part.function_call is not None:
            called = part.function_call
            calls.append(ToolCall(id=called.id or call_id(index, len(calls)), name=called.name,
                                  arguments=called.args))  # fmt: skip
        elif part.text is not None:
            (thoughts if part.thought else texts).append(part.text)
        else:
            raise WireError(
                f"{at}: a model turn holds text and functionCall parts, not {_kind(part)}",
                param=at,
            )
    return Message(
        role=Role.ASSISTANT,
        content="".join(texts),
        reasoning="".join(thoughts) if thoughts else None,
        tool_calls=calls,
    )


def _user_turn(parts: list[PartIn], where: str, before: Message | None) -> list[Message]:
    """A user turn: its function responses first (tool messages must follow the calls they
    answer), then its text and images as one user message, if it has any."""
    calls = list(before.tool_calls) if before and before.role is Role.ASSISTANT else []
    results: list[Message] = []
    content: list[TextPart | ImagePart] = []
    for k, part in enumerate(parts):
        at = f"{where}.parts[{k}]"
        if part.function_response is not None:
            answered = _answered(calls, part.function_response, at)
            calls.remove(answered)
            text = json.dumps(part.function_response.response)
            results.append(Message(role=Role.TOOL, content=text, tool_call_id=answered.id))
        elif part.text is not None:
            content.append(TextPart(text=part.text))
        elif part.inline_data is not None:
            blob = part.inline_data
            content.append(image_from_base64(blob.data, blob.mime_type, f"{at}.inlineData"))
        else:
            raise WireError(
                f"{at}: a user turn holds text, inlineData and functionResponse parts, not "
                f"{_kind(part)}",
                param=at,
            )
    return user_turn(results, content)


def _answered(calls: list[ToolCall], response: FunctionResponseIn, where: str) -> ToolCall:
    """The call of the model turn before that ``response`` answers: the one of its ``id``,
    else the first not yet answered of its name."""
    by_id = [call for call in calls if response.id and call.id == response.id]
    for call in by_id or [call for call in calls if call.name == response.name]:
        return call
    raise WireError(
        f"{where}.functionResponse: answers no functionCall of the model turn before it "
        f"(name {response.name!r}, id {response.id!r})",
        param=f"{where}.functionResponse",
    )


def _kind(part: PartIn) -> str:
    if part.file_data is not None:
        return "fileData (files are not fetched; send the bytes as inlineData)"
    if part.executable_code is not None or part.code_execution_result is not None:
        return "code execution (the gateway runs no code)"
    if part.inline_data is not None:
        return "inlineData"
    if part.function_response is not None:
        return "functionResponse"
    return "an empty part"


def tools_of(request: GenerateRequest) -> list[ToolSpec]:
    """The functions declared (none where the mode is ``NONE``); a server tool the gateway
    cannot run is refused, named."""
    calling = request.tool_config.function_calling_config if request.tool_config else None
    if calling is not None and calling.mode == "NONE":
        return []
    out = []
    for k, raw in enumerate(request.tools or []):
        for kind in SERVER_TOOLS:
            if raw.get(kind) is not None or raw.get(_snake(kind)) is not None:
                raise WireError(
                    f"tools[{k}].{kind}: a tool the API runs on its side, which this gateway "
                    "cannot; only functionDeclarations are supported",
                    param=f"tools[{k}].{kind}",
                )
        try:
            tool = ToolIn.model_validate(raw)
        except ValidationError as exc:
            raise wire_error_of(exc, f"tools[{k}].") from None
        for j, declared in enumerate(tool.function_declarations):
            out.append(_tool_spec(declared, f"tools[{k}].functionDeclarations[{j}]"))
    return out


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def _tool_spec(declared: FunctionDeclaration, where: str) -> ToolSpec:
    if declared.parameters_json_schema is not None:
        parameters = declared.parameters_json_schema
    elif declared.parameters is not None:
        parameters = json_schema_of(declared.parameters)
    else:
        parameters = {"type": "object", "properties": {}}
    try:
        function = FunctionSpec(
            name=declared.name, description=declared.description, parameters=parameters
        )
    except ValidationError as exc:
        raise wire_error_of(exc, f"{where}.") from None
    return ToolSpec(function=function)


def json_schema_of(schema: Any) -> Any:
    """The API's OpenAPI-style ``Schema`` (``type: "OBJECT"``) as the JSON schema the chat
    template shows: types in lower case, everything else as given."""
    if isinstance(schema, list):
        return [json_schema_of(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = value.lower()
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: json_schema_of(s) for name, s in value.items()}
        elif key in ("items", "anyOf"):
            out[key] = json_schema_of(value)
        else:
            out[key] = value
    return out


def chat_request_of(
    model: str, request: GenerateRequest, messages: list[Message], tools: list[ToolSpec]
) -> ChatRequest:
    """The chat call the gateway samples for ``request`` (``messages``: ``conversation_of``)."""
    config = request.generation_config or GenerationConfig()
    shared = config.model_dump(include={"temperature", "top_p", "top_k", "seed"})
    return chat_request(
        model,
        messages,
        tools,
        max_tokens=config.max_output_tokens,
        stop=config.stop_sequences,
        **shared,
    )
