"""Tool-call parsing: model output -> content text plus ``ToolCall``s.

Parsers never raise on model output. A call that cannot be understood becomes a ``ToolCall``
with ``parse_error`` set and ``raw`` holding the text, so the environment can answer it with a
tool message that says what went wrong.

Parsers live in a small registry keyed by name; ``text`` is the documented text protocol::

    <tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>

used for models whose chat template has no tool support.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from trajforge.registry import Registry
from trajforge.schema import ToolCall

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"


@dataclass
class ParsedCompletion:
    """What a parser made of one completion: the prose and the calls, in order."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)


ToolCallParser = Callable[[str, str], ParsedCompletion]

PARSERS: Registry[ToolCallParser] = Registry("tool-call parser")
"""Text parsers by name, each called as ``parser(text, id_prefix)``; register more with
``@PARSERS.register("name")``."""


def get_parser(name: str) -> ToolCallParser:
    """The parser registered as ``name`` (``ConfigError`` naming the known ones if none)."""
    return PARSERS.get(name)


def parse_tool_calls(text: str, parser: str = "text", id_prefix: str = "call") -> ParsedCompletion:
    """Parse ``text`` with the named parser. Never raises on any ``text``."""
    return get_parser(parser)(text, id_prefix)


def _call_from_payload(payload: Any, call_id: str, raw: str) -> ToolCall:
    if not isinstance(payload, dict):
        kind = type(payload).__name__
        return _bad_call(call_id, raw, f"a tool call must be a JSON object, got {kind}")
    name = payload.get("name")
    if not isinstance(name, str) or not name.strip():
        return _bad_call(call_id, raw, 'the tool call has no "name" string')
    arguments: Any = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):
        # OpenAI servers send arguments as a JSON-encoded string; models often copy that.
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError) as exc:
            return _bad_call(
                call_id, raw, f'"arguments" is not valid JSON: {_json_error(exc)}', name
            )
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        kind = type(arguments).__name__
        return _bad_call(call_id, raw, f'"arguments" must be a JSON object, got {kind}', name)
    if not all(isinstance(key, str) for key in arguments):
        return _bad_call(call_id, raw, '"arguments" keys must be strings', name)
    try:
        return ToolCall(id=call_id, name=name.strip(), arguments=arguments, raw=raw)
    except ValidationError as exc:
        return _bad_call(call_id, raw, f"invalid tool call: {exc.errors()[0]['msg']}", name)


def _json_error(exc: ValueError | RecursionError) -> str:
    """Why ``json.loads`` failed, in words (it also raises plain ValueError, e.g. on huge ints)."""
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    if isinstance(exc, RecursionError):
        return "nesting too deep"
    return str(exc)


def _bad_call(call_id: str, raw: str, error: str, name: str = "") -> ToolCall:
    return ToolCall(
        id=call_id, name=name if isinstance(name, str) else "", raw=raw, parse_error=error
    )


_BLOCK = re.compile(
    re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|$)", re.S
)


@PARSERS.register("text")
def parse_text_protocol(text: str, id_prefix: str = "call") -> ParsedCompletion:
    """The ``<tool_call>{json}</tool_call>`` protocol. An unclosed final block is still parsed
    (generation often stops at the closing tag), and reported if its JSON is incomplete."""
    calls: list[ToolCall] = []
    prose: list[str] = []
    pos = 0
    for k, match in enumerate(_BLOCK.finditer(text)):
        prose.append(text[pos : match.start()])
        pos = match.end()
        body = match.group(1).strip()
        call_id = f"{id_prefix}_{k}"
        closed = match.group(0).endswith(TOOL_CALL_CLOSE)
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError) as exc:
            reason = _json_error(exc)
            hint = "" if closed else f" (and no closing {TOOL_CALL_CLOSE})"
            calls.append(
                _bad_call(call_id, match.group(0), f"invalid JSON in tool call: {reason}{hint}")
            )
            continue
        calls.append(_call_from_payload(payload, call_id, match.group(0)))
    prose.append(text[pos:])
    return ParsedCompletion(content="".join(prose).strip(), tool_calls=calls)


def parse_openai_tool_calls(raw_calls: Any, id_prefix: str = "call") -> list[ToolCall]:
    """OpenAI-style structured calls (``[{"id", "type": "function", "function": {"name",
    "arguments": "<json>"}}]``) -> ``ToolCall``s. Never raises on any input."""
    if raw_calls is None or (isinstance(raw_calls, list | tuple) and not raw_calls):
        return []
    if not isinstance(raw_calls, list | tuple):
        return [_bad_call(f"{id_prefix}_0", _dump(raw_calls), "tool_calls must be a list")]
    calls: list[ToolCall] = []
    for k, item in enumerate(raw_calls):
        fallback_id = f"{id_prefix}_{k}"
        raw = _dump(item)
        if not isinstance(item, dict):
            calls.append(_bad_call(fallback_id, raw, "a tool call must be a JSON object"))
            continue
        call_id = (
            item.get("id") if isinstance(item.get("id"), str) and item.get("id") else fallback_id
        )
        function = item.get("function", item)
        calls.append(_call_from_payload(function, str(call_id), raw))
    return calls


def _dump(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """Render one call in the text protocol (what a scripted expert or a demonstration writes)."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}{body}{TOOL_CALL_CLOSE}"
