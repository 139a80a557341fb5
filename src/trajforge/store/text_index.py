"""The full-text index behind the ``text`` filter: one row per trajectory in the FTS5 table
``texts`` (unicode61 words), keyed by the trajectory's rowid.

A trajectory's searchable text is each message's content and each tool call's name, arguments
(compact JSON) and raw text, joined by a separator no query contains, so a match never spans
two of them. ``text`` matches where it occurs in that text starting at a word, ignoring case:
``count to a mil`` finds "Count to a MILLION", ``illion`` does not. The index finds the
trajectories holding the query's words in order (the last as a prefix); the exact text is then
checked in those alone. A query without a letter or digit scans the index's stored text (still
no body is read).
"""

from __future__ import annotations

import json
import re
from typing import Any

from trajforge.schema import Trajectory

TEXTS_SQL = "CREATE VIRTUAL TABLE IF NOT EXISTS texts USING fts5(text, tokenize = 'unicode61')"
CONTAINS_FUNCTION = "trajforge_contains"
"""The SQL function (registered on every store connection) that checks a casefolded needle."""

_SEPARATOR = "\x1f"  # the ASCII unit separator: typed by nobody, so never inside a query
_WORD = re.compile(r"[^\W_]+")  # unicode61's tokens: runs of letters and digits


def search_text(traj: Trajectory) -> str:
    """What the ``text`` filter searches in ``traj``."""
    parts: list[str] = []
    for msg in traj.messages:
        if msg.content:
            parts.append(msg.content)
        for call in msg.tool_calls:
            parts.append(call.name)
            parts.append(json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":")))
            if call.raw:
                parts.append(call.raw)
    return _SEPARATOR.join(parts)


def contains(text: str | None, needle: str) -> bool:
    """``CONTAINS_FUNCTION``: whether casefolded ``needle`` is in ``text``, ignoring case."""
    return text is not None and needle in text.casefold()


def text_clause(text: str) -> tuple[str, list[Any]]:
    """The condition (over ``trajectories t``) that ``text`` occurs in a trajectory's
    ``search_text`` from the start of a word, ignoring case, and its parameters."""
    exact = f"{CONTAINS_FUNCTION}(x.text, ?)"
    words = _WORD.findall(text)
    if not words:
        return f"t.rowid IN (SELECT x.rowid FROM texts x WHERE {exact})", [text.casefold()]
    # The words in order as a phrase, the last a prefix unless the query ends after it.
    phrase = '"' + " ".join(words) + '"' + (" *" if text.rstrip()[-1:].isalnum() else "")
    return (
        f"t.rowid IN (SELECT x.rowid FROM texts x WHERE texts MATCH ? AND {exact})",
        [phrase, text.casefold()],
    )
