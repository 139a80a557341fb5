"""OpenTelemetry GenAI telemetry as trajectories, and trajectories as spans.

Input is OTLP JSON: export requests with ``resourceSpans`` and, where an instrumentation puts
message content in log events, ``resourceLogs`` (a file of one request per line, as the
Collector's file exporter writes, or one request). A chat span's messages are read from, in
order: the current ``gen_ai.input.messages``/``gen_ai.output.messages`` attributes (JSON lists of
``{role, parts}``); the older ``gen_ai.prompt.<i>.*``/``gen_ai.completion.<i>.*`` attributes; or
the span's ``gen_ai.{system,user,assistant,tool}.message`` and ``gen_ai.choice`` events.

The chat calls of one trace become trajectories as the gateway merges calls: a call whose input
repeats a conversation and appends to it continues that conversation; any other starts one. Each
conversation is a trajectory (``otel-<trace>-<k>``, the calls' model, token usage summed,
``execute_tool`` span time as tool time). Content is not captured by default; a trace whose chat
spans carry none is refused with how to turn it on.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trajforge.errors import DataError
from trajforge.formats.jsonl import format_validation_error
from trajforge.formats.openai_chat import messages_from_openai
from trajforge.schema import Message, Outcome, OutcomeStatus, Role, Task, Trajectory, Usage

CAPTURE_HINT = (
    "capture is off by default: set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true "
    "in the agent's environment"
)
_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


@dataclass
class Span:
    trace_id: str
    span_id: str
    name: str
    start: int
    end: int
    attributes: dict[str, Any]
    events: list[tuple[str, Any]] = field(default_factory=list)


def otlp_id(value: str) -> str:
    """A trace or span id as hex: OTLP JSON writes hex, protobuf's JSON mapping base64."""
    if len(value) in (16, 32) and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    try:
        return base64.b64decode(value, validate=True).hex()
    except (binascii.Error, ValueError):
        return value


def any_value(value: dict[str, Any]) -> Any:
    """An OTLP ``AnyValue`` as plain Python."""
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [any_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return {
            kv["key"]: any_value(kv.get("value", {}))
            for kv in value["kvlistValue"].get("values", [])
        }
    return None


def _attributes(raw: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {kv["key"]: any_value(kv.get("value", {})) for kv in raw}


def spans_of(requests: Iterable[dict[str, Any]]) -> list[Span]:
    """Every span of the requests, with the GenAI events logged against it attached."""
    spans: dict[tuple[str, str], Span] = {}
    events: list[tuple[str, str, str, Any]] = []
    for request in requests:
        for resource in request.get("resourceSpans", []):
            for scope in resource.get("scopeSpans", []):
                for raw in scope.get("spans", []):
                    span = Span(
                        trace_id=otlp_id(raw.get("traceId", "")),
                        span_id=otlp_id(raw.get("spanId", "")),
                        name=raw.get("name", ""),
                        start=int(raw.get("startTimeUnixNano", 0)),
                        end=int(raw.get("endTimeUnixNano", 0)),
                        attributes=_attributes(raw.get("attributes", [])),
                    )
                    spans[(span.trace_id, span.span_id)] = span
        for resource in request.get("resourceLogs", []):
            for scope in resource.get("scopeLogs", []):
                for record in scope.get("logRecords", []):
                    attributes = _attributes(record.get("attributes", []))
                    name = record.get("eventName") or attributes.get("event.name", "")
                    body = any_value(record.get("body", {}))
                    trace_id = otlp_id(record.get("traceId", ""))
                    events.append((trace_id, otlp_id(record.get("spanId", "")), name, body))
    for trace_id, span_id, name, body in events:
        found = spans.get((trace_id, span_id))
        if found is not None:
            found.events.append((name, body))
    return sorted(spans.values(), key=lambda s: (s.trace_id, s.start))


def _is_chat(span: Span) -> bool:
    return span.attributes.get("gen_ai.operation.name") in ("chat", "text_completion") or (
        "gen_ai.system" in span.attributes and span.name.startswith("chat")
    )


def _from_parts(message: dict[str, Any]) -> dict[str, Any]:
    """A ``{role, parts}`` message (GenAI semantic conventions) in the OpenAI shape."""
    role = message.get("role", "user")
    text, calls, result = [], [], None
    for part in message.get("parts", []):
        kind = part.get("type")
        if kind == "text":
            text.append(str(part.get("content", "")))
        elif kind == "tool_call":
            arguments = part.get("arguments", {})
            calls.append(
                {
                    "id": part.get("id"),
                    "type": "function",
                    "function": {
                        "name": part.get("name", ""),
                        "arguments": arguments
                        if isinstance(arguments, str)
                        else json.dumps(arguments),
                    },
                }
            )
        elif kind == "tool_call_response":
            response = part.get("response", "")
            result = (
                part.get("id"),
                response if isinstance(response, str) else json.dumps(response),
            )
    if result is not None:
        return {"role": "tool", "tool_call_id": result[0], "content": result[1]}
    out: dict[str, Any] = {"role": role, "content": "".join(text)}
    if calls:
        out["tool_calls"] = calls
    return out


def _by_index(attributes: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``<prefix><i>.<field>`` attributes grouped by ``i``, in order."""
    fields: dict[int, dict[str, Any]] = defaultdict(dict)
    for key, value in attributes.items():
        index, _, rest = key[len(prefix) :].partition(".")
        if key.startswith(prefix) and index.isdigit():
            fields[int(index)][rest] = value
    return [fields[i] for i in sorted(fields)]


def _indexed(attributes: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``gen_ai.prompt.<i>.role``-style attributes as OpenAI-shaped messages."""
    messages = []
    for fields in _by_index(attributes, prefix):
        message: dict[str, Any] = {
            "role": fields.get("role", "assistant"),
            "content": fields.get("content") or "",
        }
        if fields.get("tool_call_id"):
            message["tool_call_id"] = fields["tool_call_id"]
        calls = _by_index(fields, "tool_calls.")
        if calls:
            message["tool_calls"] = [
                {"id": c.get("id"), "type": "function",
                 "function": {"name": c.get("name", ""), "arguments": c.get("arguments") or "{}"}}
                for c in calls
            ]  # fmt: skip
        messages.append(message)
    return messages


def chat_messages(span: Span) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A chat span's input and output messages, OpenAI-shaped (empty: no content captured)."""
    attributes = span.attributes
    if "gen_ai.input.messages" in attributes:
        inputs = json.loads(attributes["gen_ai.input.messages"])
        outputs = json.loads(attributes.get("gen_ai.output.messages", "[]"))
        return [_from_parts(m) for m in inputs], [_from_parts(m) for m in outputs[:1]]
    if any(key.startswith("gen_ai.prompt.") for key in attributes):
        outputs = _indexed(attributes, "gen_ai.completion.")
        return _indexed(attributes, "gen_ai.prompt."), outputs[:1]
    inputs, outputs = [], []
    for name, body in span.events:
        body = body if isinstance(body, dict) else {}
        if name in _EVENT_ROLES:
            message = {"role": _EVENT_ROLES[name], "content": body.get("content") or ""}
            if body.get("tool_calls"):
                message["tool_calls"] = body["tool_calls"]
            if name == "gen_ai.tool.message":
                message["tool_call_id"] = body.get("id")
            inputs.append(message)
        elif name == "gen_ai.choice" and body.get("index", 0) == 0:
            outputs.append({"role": "assistant", **(body.get("message") or {})})
    # Without content capture the events still come, holding roles and call names only.
    if not any(_has_content(m) for m in [*inputs, *outputs]):
        return [], []
    return inputs, outputs[:1]


def _has_content(message: dict[str, Any]) -> bool:
    calls = message.get("tool_calls") or []
    return bool(message.get("content")) or any("arguments" in c.get("function", {}) for c in calls)


def trajectories_from_spans(spans: list[Span], run_id: str | None = None) -> list[Trajectory]:
    """The conversations of every trace's chat spans, as trajectories."""
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    out = []
    for trace_id, members in by_trace.items():
        chats = [s for s in members if _is_chat(s)]
        if not chats:
            continue
        tool_time = (
            sum(
                max(0, s.end - s.start)
                for s in members
                if s.attributes.get("gen_ai.operation.name") == "execute_tool"
            )
            / 1e9
        )
        out += _conversations(trace_id, chats, tool_time, run_id)
    return out


def _conversations(
    trace_id: str, chats: list[Span], tool_time: float, run_id: str | None
) -> list[Trajectory]:
    conversations: list[tuple[list[Message], list[Span]]] = []
    for span in chats:
        raw_in, raw_out = chat_messages(span)
        if not raw_in and not raw_out:
            raise DataError(
                f"trace {trace_id}: chat span {span.span_id} carries no messages: {CAPTURE_HINT}"
            )
        try:
            inputs = messages_from_openai(raw_in)
            reply = messages_from_openai(raw_out)
        except DataError as exc:
            raise DataError(f"trace {trace_id}: span {span.span_id}: {exc}") from None
        for messages, calls in conversations:
            if len(messages) <= len(inputs) and all(
                _same(a, b) for a, b in zip(messages, inputs, strict=False)
            ):
                messages[:] = [*inputs, *reply]
                calls.append(span)
                break
        else:
            conversations.append(([*inputs, *reply], [span]))
    trajectories = []
    for k, (messages, calls) in enumerate(conversations):
        attributes = calls[-1].attributes
        model = attributes.get("gen_ai.response.model") or attributes.get("gen_ai.request.model")
        usage = Usage(
            prompt_tokens=sum(int(s.attributes.get("gen_ai.usage.input_tokens", 0)) for s in calls),
            completion_tokens=sum(
                int(s.attributes.get("gen_ai.usage.output_tokens", 0)) for s in calls
            ),
            turns=sum(1 for m in messages if m.role is Role.ASSISTANT),
            tool_calls=sum(len(m.tool_calls) for m in messages),
            tool_time_s=tool_time if k == 0 else 0.0,
            generation_time_s=sum(max(0, s.end - s.start) for s in calls) / 1e9,
        )
        prompt = next((m.text for m in messages if m.role is Role.USER), "")
        open_calls = bool(messages) and bool(messages[-1].tool_calls)
        outcome = (
            Outcome(
                status=OutcomeStatus.TRUNCATED, reason="the trace ends with unanswered tool calls"
            )
            if open_calls
            else Outcome()
        )
        try:
            trajectories.append(
                Trajectory(
                    id=f"otel-{trace_id}-{k}",
                    task=Task(id=f"otel-{trace_id}", prompt=prompt),
                    run_id=run_id,
                    model=model,
                    messages=messages,
                    outcome=outcome,
                    usage=usage,
                    metadata={"otel": {"trace_id": trace_id, "chat_spans": len(calls)}},
                )
            )
        except ValidationError as exc:
            raise DataError(format_validation_error(exc, f"trace {trace_id}")) from None
    return trajectories


def _same(a: Message, b: Message) -> bool:
    return (
        a.role,
        a.text.strip(),
        [(c.id, c.name, c.arguments) for c in a.tool_calls],
        a.tool_call_id,
    ) == (
        b.role,
        b.text.strip(),
        [(c.id, c.name, c.arguments) for c in b.tool_calls],
        b.tool_call_id,
    )


def read_otlp_file(path: Path) -> Iterator[Trajectory]:
    """The trajectories of an OTLP JSON file (one export request, or one per line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
    requests = []
    try:
        whole = json.loads(text)
        requests = whole if isinstance(whole, list) else [whole]
    except json.JSONDecodeError:
        for lineno, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    requests.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{lineno}: invalid JSON: {exc.msg}") from None
    if not all(
        isinstance(r, dict) and ("resourceSpans" in r or "resourceLogs" in r) for r in requests
    ):
        raise DataError(f"{path}: not OTLP JSON (no resourceSpans or resourceLogs)")
    try:
        yield from trajectories_from_spans(spans_of(requests))
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
