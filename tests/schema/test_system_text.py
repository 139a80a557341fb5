"""Text added to a conversation's opening system message."""

from __future__ import annotations

from trajforge.schema import Message, Role, with_system_text


def test_the_text_joins_the_system_message_or_comes_first() -> None:
    system = Message(role=Role.SYSTEM, content="Reach G.")
    user = Message(role=Role.USER, content="a D1")
    joined = with_system_text([system, user], "LESSONS")
    assert [m.content for m in joined] == ["Reach G.\n\nLESSONS", "a D1"]
    assert [m.content for m in with_system_text([user], "LESSONS")] == ["LESSONS", "a D1"]
    empty = Message(role=Role.SYSTEM, content="")
    assert [m.content for m in with_system_text([empty, user], "LESSONS")] == ["LESSONS", "a D1"]
