"""The full-text index behind the ``text`` filter: one row per trajectory in the FTS5 table
``texts`` (unicode61 words), keyed by the trajectory's rowid.

A trajectory's searchable text is each message's content and each tool call's name, arguments
(compact JSON) and raw text, joined by a separator no query contains. ``text`` matches a
trajectory where its words occur in that order, next to each other, in one of those parts:
case, accents and the punctuation between words are ignored, and the last word may be the
start of a longer one (``count to a mil`` finds "Count to a MILLION,"; ``illion`` does not).
A query of punctuation alone (no letter or digit) matches its exact text, by a scan of the
index's stored text; no filter reads a body.
"""

from __future__ import annotations

import json
import re
from typing import Any

from trajforge.schema import Trajectory

TEXTS_SQL = "CREATE VIRTUAL TABLE IF NOT EXISTS texts USING fts5(text, tokenize = 'unicode61')"
_SEPARATOR = "\x1f"  # the ASCII unit separator: typed by nobody, so never inside a query
_WORD = re.compile(r"[^\W_]+")  # unicode61's tokens: runs of letters and digits


def search_text(traj: Trajectory) -> str:
    """What the ``text`` filter searches in ``traj``."""
    parts: list[str] = []
    for msg in traj.messages:
        if msg.content:
            parts.append(msg.text)
        for call in msg.tool_calls:
            parts.append(call.name)
            parts.append(json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":")))
            if call.raw:
                parts.append(call.raw)
    return _SEPARATOR.join(parts)


def text_clause(text: str) -> tuple[str, list[Any]]:
    """The condition (over ``trajectories t``) that ``text`` matches a trajectory's
    ``search_text`` as the module says, and its parameters."""
    words = _WORD.findall(text)
    if not words:
        return "t.rowid IN (SELECT x.rowid FROM texts x WHERE instr(x.text, ?) > 0)", [text]
    # The words as one phrase, the last a prefix unless the query ends after it.
    phrase = '"' + " ".join(words) + '"' + (" *" if text.rstrip()[-1:].isalnum() else "")
    return "t.rowid IN (SELECT x.rowid FROM texts x WHERE texts MATCH ?)", [phrase]
