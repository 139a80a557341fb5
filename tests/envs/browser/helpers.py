"""Reading page trees and writing GUI calls in the browser env's tests."""

from __future__ import annotations

from trajforge.envs.browser.axtree import find
from trajforge.schema import Message, Role, ToolCall


def element(tree: str, role: str, name: str) -> str:
    """The id of the element with ``role`` and ``name`` in a page tree."""
    found = find(tree, role, name)
    assert found is not None, f"no [{role} {name!r}] in:\n{tree}"
    return found


def calls(*actions: tuple[str, dict[str, object]]) -> Message:
    """An assistant message calling GUI actions."""
    tool_calls = [
        ToolCall(id=f"call_{i}", name=name, arguments=arguments)
        for i, (name, arguments) in enumerate(actions)
    ]
    return Message(role=Role.ASSISTANT, content="", tool_calls=tool_calls)
