"""Trajectories to and from OpenAI Responses API input: ``{"input": [items], "tools": [...]}``.

A message is a ``message`` item (``input_text``/``output_text`` and ``input_image`` parts, an
image's ``image_url`` a base64 data URL; remote URLs and file ids are refused, never fetched);
an assistant's tool calls are ``function_call`` items after it and their results
``function_call_output`` items (whose ``output`` is text, or parts when it holds an image). A
``developer`` message and the request's ``instructions`` are system text. Tools are Responses
function tools (``{"type": "function", "name", ...}``). A ``reasoning`` item read opens the
assistant turn it precedes (its ``reasoning_text`` is the turn's reasoning); a call of a tool in
a ``namespace`` is read as the flat name ``{namespace}__{name}``. Reasoning, token ids, logprobs
and rewards are not written. The gateway's ``/v1/responses`` reads requests with
``messages_from_responses``.
"""

from __future__ import annotations

import json
from typing import Any

from trajforge.errors import DataError
from trajforge.formats.images import image_url_part
from trajforge.formats.imported import imported_trajectory, text_or_parts
from trajforge.formats.openai_chat import TEXT_PARTS
from trajforge.schema import (
    Content,
    ImagePart,
    Message,
    Role,
    TextPart,
    ToolCall,
    ToolSpec,
    Trajectory,
)

ITEM_KINDS = ("message", "function_call", "function_call_output", "reasoning")
NAMESPACE_JOIN = "__"
"""Between a namespace and a tool's name in the flat name the model sees."""


def namespaced(namespace: str | None, name: str) -> str:
    """The flat name of tool ``name`` in ``namespace`` (``name`` itself outside one)."""
    return f"{namespace}{NAMESPACE_JOIN}{name}" if namespace else name


def to_responses(traj: Trajectory) -> dict[str, Any]:
    """The trajectory's conversation and tools as a Responses API request body."""
    items: list[dict[str, Any]] = []
    for message in traj.messages:
        if message.role is Role.TOOL:
            content = message.content
            output = content if isinstance(content, str) else _parts(content, "input_text")
            items.append({"type": "function_call_output", "call_id": message.tool_call_id,
                          "output": output})  # fmt: skip
            continue
        if message.role is not Role.ASSISTANT or message.content or not message.tool_calls:
            kind = "output_text" if message.role is Role.ASSISTANT else "input_text"
            items.append({"type": "message", "role": message.role.value,
                          "content": _parts(message.content, kind)})  # fmt: skip
        items += [
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": json.dumps(call.arguments, ensure_ascii=False),
            }
            for call in message.tool_calls
        ]
    out: dict[str, Any] = {"input": items}
    if traj.tools:
        out["tools"] = [{"type": "function", **tool.function.model_dump()} for tool in traj.tools]
    return out


def _parts(content: Content, text_kind: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": text_kind, "text": content}]
    return [
        {"type": text_kind, "text": part.text}
        if isinstance(part, TextPart)
        else {"type": "input_image", "image_url": part.data_url()}
        for part in content
    ]


def from_responses(record: dict[str, Any], **fields: Any) -> Trajectory:
    """A trajectory from a Responses request body; ``DataError`` names the bad field."""
    raw = record.get("input")
    if not isinstance(raw, str | list):
        raise DataError("input: expected a string or a list of input items")
    messages = messages_from_responses(raw, record.get("instructions"))
    return imported_trajectory(
        str(fields.pop("task_id", "responses")),
        messages,
        lambda: [
            ToolSpec(function=_function(t, k)) for k, t in enumerate(record.get("tools") or [])
        ],
        "responses record",
        **fields,
    )


def _function(tool: Any, k: int) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function" or not tool.get("name"):
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        raise DataError(f"tools.{k}.type: only function tools are supported, got {kind!r}")
    return {key: tool[key] for key in ("name", "description", "parameters") if key in tool}


def messages_from_responses(raw: str | list[Any], instructions: str | None) -> list[Message]:
    """Responses input items as a chat conversation: function calls join the assistant turn
    before them and their outputs become tool messages. ``DataError`` names the item
    (``input.3.role: ...``)."""
    out: list[Message] = []
    if instructions:
        out.append(Message(role=Role.SYSTEM, content=instructions))
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
    for i, item in enumerate(items):
        where = f"input.{i}"
        if not isinstance(item, dict):
            raise DataError(f"{where}: expected an input item object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise DataError(f"{where}.role: unknown role {role!r}")
            content = responses_content(item.get("content", ""), where)
            if role in ("system", "developer") and out and out[0].role is Role.SYSTEM:
                out[0] = out[0].model_copy(update={"content": _joined(out[0].content, content)})
                continue
            if role == "assistant" and _opened_by_reasoning(out):
                out[-1] = out[-1].model_copy(update={"content": content})
                continue
            chat_role = Role.SYSTEM if role == "developer" else Role(role)
            out.append(Message(role=chat_role, content=content))
        elif kind == "function_call":
            arguments = _arguments(item.get("arguments"), f"{where}.arguments")
            name = namespaced(item.get("namespace"), str(item.get("name", "")))
            call = ToolCall(id=str(item.get("call_id", "")), name=name, arguments=arguments)
            if out and out[-1].role is Role.ASSISTANT:
                calls = [*out[-1].tool_calls, call]
                out[-1] = out[-1].model_copy(update={"tool_calls": calls})
            else:
                out.append(Message(role=Role.ASSISTANT, tool_calls=[call]))
        elif kind == "function_call_output":
            content = responses_content(item.get("output", ""), where, field="output")
            out.append(Message(role=Role.TOOL, content=content, tool_call_id=item.get("call_id")))
        elif kind == "reasoning":
            out.append(Message(role=Role.ASSISTANT, reasoning=_reasoning(item, where)))
        else:
            raise DataError(
                f"{where}.type: {kind!r} items are not supported ({', '.join(ITEM_KINDS)} are)"
            )
    # A turn whose reasoning item held no text has no reasoning.
    return [m.model_copy(update={"reasoning": None}) if m.reasoning == "" else m for m in out]


def _opened_by_reasoning(out: list[Message]) -> bool:
    """Whether the last message is an assistant turn a ``reasoning`` item opened, which the
    turn's text joins."""
    last = out[-1] if out else None
    return (
        last is not None and last.role is Role.ASSISTANT and not last.content
        and not last.tool_calls and last.reasoning is not None
    )  # fmt: skip


def _reasoning(item: dict[str, Any], where: str) -> str:
    """A reasoning item's text: its ``reasoning_text`` parts (a summary or encrypted content is
    not what the model wrote)."""
    parts = item.get("content") or []
    if not isinstance(parts, list):
        raise DataError(f"{where}.content: expected a list of reasoning_text parts")
    return "".join(
        str(p.get("text", "")) for p in parts
        if isinstance(p, dict) and p.get("type") == "reasoning_text"
    )  # fmt: skip


def _arguments(text: Any, where: str) -> dict[str, Any]:
    """A function call's ``arguments`` JSON string as the object it must hold."""
    try:
        value = json.loads(text or "{}")
    except (json.JSONDecodeError, TypeError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else "not a string"
        raise DataError(f"{where}: not valid JSON ({why})") from None
    if not isinstance(value, dict):
        raise DataError(f"{where}: must be a JSON object")
    return value


def responses_content(content: Any, where: str, field: str = "content") -> Content:
    """A Responses message's content (or a function output): a string where it is text only,
    text and image parts where it has ``input_image`` parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise DataError(f"{where}.{field}: expected a string or a list of parts")
    parts: list[TextPart | ImagePart] = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind == "input_image" and isinstance(part, dict):
            if part.get("image_url") is None:
                raise DataError(f"{where}.{field}.{k}.image_url: an input_image needs a data URL "
                                "(file ids are not taken)")  # fmt: skip
            parts.append(image_url_part(part, f"{where}.{field}.{k}"))
        elif kind in TEXT_PARTS and isinstance(part, dict):
            parts.append(TextPart(text=str(part.get("text", ""))))
        else:
            raise DataError(f"{where}.{field}.{k}: only text and input_image parts are "
                            f"supported, not {kind!r}")  # fmt: skip
    return text_or_parts(parts)


def _joined(first: Content, more: Content) -> Content:
    """Two system contents as one: text joined by a blank line, parts one after the other."""
    if isinstance(first, str) and isinstance(more, str):
        return f"{first}\n\n{more}"
    as_parts = [[TextPart(text=c)] if isinstance(c, str) else list(c) for c in (first, more) if c]
    return [part for parts in as_parts for part in parts]
