"""Trajectories as OpenTelemetry GenAI spans (OTLP JSON): per trajectory an ``invoke_agent``
span holding one ``chat`` span per assistant turn, its input and output messages in the current
``gen_ai.input.messages``/``gen_ai.output.messages`` attributes, which ``formats.otel`` reads
back."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from trajforge.formats.images import refuse_images_in
from trajforge.schema import Message, Role, Trajectory


def to_otlp(traj: Trajectory) -> dict[str, Any]:
    """The trajectory as an OTLP JSON export request: an ``invoke_agent`` span holding one
    ``chat`` span per assistant turn with ``gen_ai.input.messages``/``gen_ai.output.messages``.
    Text only: a trajectory with image parts is refused."""
    refuse_images_in(traj, "OTel export")
    trace_id = _digest(traj.id, 16)
    root = _digest(f"{traj.id}/root", 8)
    start = int(traj.created_at * 1e9)
    spans = [
        _span(
            trace_id,
            root,
            None,
            "invoke_agent",
            start,
            start + 1,
            {"gen_ai.operation.name": "invoke_agent"},
        )
    ]
    for index, message in enumerate(traj.messages):
        if message.role is not Role.ASSISTANT:
            continue
        inputs = [_to_parts(m) for m in traj.messages[:index]]
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": traj.model or "",
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps([_to_parts(message)]),
        }
        spans.append(
            _span(
                trace_id,
                _digest(f"{traj.id}/{index}", 8),
                root,
                f"chat {traj.model or ''}".strip(),
                start + index,
                start + index + 1,
                attributes,
            )
        )
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": []},
                "scopeSpans": [{"scope": {"name": "trajforge"}, "spans": spans}],
            }
        ]
    }


def _digest(value: str, size: int) -> str:
    return hashlib.blake2b(value.encode(), digest_size=size).hexdigest()


def _to_parts(message: Message) -> dict[str, Any]:
    if message.role is Role.TOOL:
        return {
            "role": "tool",
            "parts": [
                {
                    "type": "tool_call_response",
                    "id": message.tool_call_id,
                    "response": message.text,
                }
            ],
        }
    parts: list[dict[str, Any]] = []
    if message.text:
        parts.append({"type": "text", "content": message.text})
    for call in message.tool_calls:
        arguments: Any = call.raw if call.parse_error is not None else call.arguments
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": arguments}
        )
    return {"role": message.role.value, "parts": parts}


def _span(
    trace_id: str,
    span_id: str,
    parent: str | None,
    name: str,
    start: int,
    end: int,
    attributes: dict[str, Any],
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": [{"key": k, "value": {"stringValue": str(v)}} for k, v in attributes.items()],
    }
    if parent is not None:
        out["parentSpanId"] = parent
    return out
