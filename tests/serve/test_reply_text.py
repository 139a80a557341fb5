"""A reply's prose as sampled, and what of it may be streamed before the reply ends."""

from __future__ import annotations

import pytest

from trajforge.formats.tool_calls import format_tool_call, parse_text_protocol
from trajforge.serve.reply_text import ReplyText, prose, settled

CALL = format_tool_call("add", {"a": 1, "b": 2})
REPLIES = [
    "The total is 3.",
    "   ",
    "\n\nIndented answer \n",
    f"Let me add.\n{CALL}",
    f"{CALL}\n{CALL}",
    f"First {CALL} then {CALL} done. ",
    'Unclosed <tool_call>{"name": "add", "arg',
    "a < b and <tool but no call",
    "ends with a partial <tool_ca",
    "café \u00e9t\u00e9 \U0001f600",
]


@pytest.mark.parametrize("text", REPLIES)
def test_streamed_prose_is_the_whole_replys_char_by_char(text: str) -> None:
    stream = ReplyText()
    pieces = [stream.feed(text[:k]) for k in range(1, len(text) + 1)]
    pieces.append(stream.finish(text))
    assert "".join(pieces) == prose(text)
    # Nothing of a call, nor a possible start of one, is ever sent as text.
    assert all("<tool_call" not in p and '"name"' not in p for p in pieces)


@pytest.mark.parametrize("text", REPLIES)
def test_prose_stripped_is_the_parsed_content(text: str) -> None:
    assert prose(text).strip() == parse_text_protocol(text).content


def test_a_reply_without_calls_is_its_exact_text() -> None:
    assert prose("   ") == "   "
    assert prose("\n\nIndented answer \n") == "\n\nIndented answer \n"
    assert prose(f"Let me add.\n{CALL}") == "Let me add."


def test_text_that_may_start_a_call_is_held_back_until_decided() -> None:
    assert settled("Sure <tool") == "Sure"
    assert settled("Sure <tools are") == "Sure <tools are"
    assert settled(f"Sure {CALL[:20]}") == "Sure"
    assert settled("half a character \ufffd") == "half a character"
