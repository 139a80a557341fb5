"""Two trajectories message by message: where their conversations part and how each pair of
messages differs (a line diff of the text, tool calls included)."""

from __future__ import annotations

import difflib
import json
from itertools import zip_longest
from typing import Any

from trajforge.schema import Message, Trajectory, labelled_text


def message_text(msg: Message) -> str:
    """The text a reader compares: content, reasoning and tool calls, one item per line."""
    parts = [labelled_text(msg.content)]
    if msg.reasoning:
        parts.insert(0, f"[reasoning] {msg.reasoning}")
    for call in msg.tool_calls:
        args = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False)
        parts.append(f"[call {call.name}] {args}")
    return "\n".join(p for p in parts if p)


def diff_trajectories(a: Trajectory, b: Trajectory) -> dict[str, Any]:
    """Per message index: both roles and texts, whether they are equal, and the line diff."""
    rows: list[dict[str, Any]] = []
    first_difference: int | None = None
    for index, (ma, mb) in enumerate(zip_longest(a.messages, b.messages)):
        text_a = "" if ma is None else message_text(ma)
        text_b = "" if mb is None else message_text(mb)
        role_a = None if ma is None else ma.role.value
        role_b = None if mb is None else mb.role.value
        same = ma is not None and mb is not None and role_a == role_b and text_a == text_b
        if not same and first_difference is None:
            first_difference = index
        lines = difflib.ndiff(text_a.splitlines(), text_b.splitlines())
        rows.append(
            {
                "index": index,
                "role_a": role_a,
                "role_b": role_b,
                "same": same,
                "text_a": text_a,
                "text_b": text_b,
                "diff": [
                    {"op": line[0], "text": line[2:]} for line in lines if not line.startswith("?")
                ],
            }
        )
    return {
        "a": a.id,
        "b": b.id,
        "first_difference": first_difference,
        "messages": rows,
        "reward_a": a.outcome.reward,
        "reward_b": b.outcome.reward,
        "status_a": a.outcome.status.value,
        "status_b": b.outcome.status.value,
    }
