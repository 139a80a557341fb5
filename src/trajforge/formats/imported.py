"""What the chat-record importers (OpenAI chat, Responses, ShareGPT) share: content as trajforge
holds it, and the checked trajectory a record's messages and tools make."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from trajforge.errors import DataError
from trajforge.formats.jsonl import format_validation_error
from trajforge.schema import Content, ImagePart, Message, Role, Task, TextPart, ToolSpec, Trajectory


def text_or_parts(parts: Sequence[TextPart | ImagePart], sep: str = "") -> Content:
    """``parts`` as content: their text joined by ``sep`` where they are text only."""
    if all(isinstance(p, TextPart) for p in parts):
        return sep.join(p.text for p in parts if isinstance(p, TextPart))
    return list(parts)


def imported_trajectory(
    task: Task | str,
    messages: list[Message],
    tools: Callable[[], list[ToolSpec]],
    what: str,
    **fields: Any,
) -> Trajectory:
    """The trajectory of an imported record: ``task``, or by its id the task whose prompt is
    the first user message; the tools ``tools`` builds; a bad field a ``DataError`` naming it
    in ``what`` (the record)."""
    if isinstance(task, str):
        task = Task(id=task, prompt=next((m.text for m in messages if m.role is Role.USER), ""))
    try:
        return Trajectory(task=task, tools=tools(), messages=messages, **fields)
    except ValidationError as exc:
        raise DataError(format_validation_error(exc, what)) from None
