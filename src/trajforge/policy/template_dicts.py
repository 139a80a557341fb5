"""Messages as the dicts a chat template reads: under the native tool protocol, calls and
results as the template's own fields; under the text protocol, calls written as text in the
assistant's content, results as ``tool`` messages where the template renders that role (else
as labelled user messages), and the tools described in the system message."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from trajforge.formats import format_tool_call
from trajforge.policy.tool_prompt import tools_system_prompt
from trajforge.schema import Message, Role, ToolSpec


class ToolProtocol(StrEnum):
    AUTO = "auto"
    NATIVE = "native"
    TEXT = "text"


def message_text(message: Message) -> str:
    """An assistant message as text-protocol text: its prose, then each call as written."""
    parts = [message.text] if message.text else []
    parts += [
        call.raw if call.raw is not None else format_tool_call(call.name, call.arguments)
        for call in message.tool_calls
    ]
    return "\n".join(parts)


def template_message(message: Message, protocol: ToolProtocol, tool_role: str) -> dict[str, Any]:
    """``message`` as a template dict under ``protocol`` (not ``auto``: the one decided);
    ``tool_role``: the role a text-protocol tool result takes (``tool`` or ``user``)."""
    native = protocol is ToolProtocol.NATIVE
    if message.role is Role.ASSISTANT:
        if not native:
            return {"role": "assistant", "content": message_text(message)}
        out: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in message.tool_calls
            ]
        return out
    if message.role is Role.TOOL:
        if native:
            out = {"role": "tool", "content": message.content}
            out["tool_call_id"] = message.tool_call_id
            if message.name:
                out["name"] = message.name
            return out
        if tool_role == "tool":
            return {"role": "tool", "content": message.content}
        label = f"Tool result ({message.name})" if message.name else "Tool result"
        return {"role": "user", "content": f"{label}:\n{message.content}"}
    return {"role": message.role.value, "content": message.content}


def with_tools_prompt(conversation: list[dict[str, Any]], tools: Sequence[ToolSpec]) -> None:
    """Describe ``tools`` in the conversation's system message (one added where it has none)."""
    block = tools_system_prompt(tools)
    if conversation[0]["role"] == "system":
        content = conversation[0]["content"]
        conversation[0]["content"] = f"{content}\n\n{block}" if content else block
    else:
        conversation.insert(0, {"role": "system", "content": block})
