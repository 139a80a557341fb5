"""A reply's prose, exactly as sampled, and how much of it can be streamed before the reply ends.

The prose is the sampled text outside the tool-call blocks of the text protocol
(``<tool_call>{json}</tool_call>``): all of it when the reply makes no call (a reply sampled as
whitespace only is that whitespace), without its trailing whitespace when it does (the protocol
writes a newline between prose and calls). Its stripped form is the recorded message's content.

While tokens arrive, ``ReplyText`` releases the part of the prose no later token can change:
never a character of a tool-call block, nor text that may be the start of one (``<tool`` at the
end), nor trailing whitespace (a call may follow it), nor a character still being decoded.
What it releases is always a prefix of ``prose`` of the whole reply, so a streamed reply's text
is the non-streamed one's.
"""

from __future__ import annotations

from trajforge.formats import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

_UNDECODED = "\ufffd"
"""What a decoder writes for the bytes of a character whose last token has not come yet."""


def _outside_blocks(text: str) -> tuple[str, bool, bool]:
    """The text outside tool-call blocks, whether any block opened, and whether ``text`` ends
    inside one (an unclosed block runs to the end, as the parser reads it)."""
    outside: list[str] = []
    pos, opened = 0, False
    while True:
        start = text.find(TOOL_CALL_OPEN, pos)
        if start < 0:
            outside.append(text[pos:])
            return "".join(outside), opened, False
        outside.append(text[pos:start])
        opened = True
        end = text.find(TOOL_CALL_CLOSE, start + len(TOOL_CALL_OPEN))
        if end < 0:
            return "".join(outside), opened, True
        pos = end + len(TOOL_CALL_CLOSE)


def prose(text: str) -> str:
    """The prose of a whole reply's text (see the module's docstring)."""
    outside, called, _ = _outside_blocks(text)
    return outside.rstrip() if called else outside


def _partial_open(text: str) -> int:
    """How many characters at the end of ``text`` may begin ``<tool_call>``."""
    for k in range(min(len(text), len(TOOL_CALL_OPEN) - 1), 0, -1):
        if TOOL_CALL_OPEN.startswith(text[-k:]):
            return k
    return 0


def settled(text: str) -> str:
    """The prose of a reply that starts with ``text`` whatever follows it."""
    outside, _, inside = _outside_blocks(text)
    if not inside:
        outside = outside[: len(outside) - _partial_open(outside)]
    return outside.rstrip().rstrip(_UNDECODED).rstrip()


class ReplyText:
    """The prose of one reply as its text grows: ``feed`` each longer text, get what is new."""

    def __init__(self) -> None:
        self.sent = ""

    def feed(self, text: str) -> str:
        """The prose released by ``text`` (the reply so far) that was not released before."""
        ready = settled(text)
        if len(ready) <= len(self.sent) or not ready.startswith(self.sent):
            return ""
        delta, self.sent = ready[len(self.sent) :], ready
        return delta

    def finish(self, text: str) -> str:
        """The rest of the prose once ``text`` is the whole reply."""
        whole = prose(text)
        delta = whole[len(self.sent) :] if whole.startswith(self.sent) else ""
        self.sent = whole
        return delta
