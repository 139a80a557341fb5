"""The full-text index behind the ``text`` filter: one row per trajectory in the FTS5 table
``texts`` (trigram tokenizer, so any substring of three characters or more is an index lookup,
case-insensitive), keyed by the trajectory's rowid.

A trajectory's searchable text is each message's content and each tool call's name, arguments
(compact JSON) and raw text, joined by a separator no query contains, so a match never spans
two of them. A query shorter than a trigram scans the index's stored text instead (still no
body is read).
"""

from __future__ import annotations

import json
from typing import Any

from trajforge.schema import Trajectory

_SEPARATOR = "\x1f"  # the ASCII unit separator: typed by nobody, so never inside a query
_TRIGRAM = 3


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


def text_clause(text: str) -> tuple[str, list[Any]]:
    """The condition (over ``trajectories t``) that ``text`` occurs in a trajectory's
    ``search_text``, ignoring case, and its parameters."""
    if len(text) >= _TRIGRAM:
        # A phrase of trigrams at consecutive positions: exactly the substring, from the index.
        phrase = '"' + text.replace('"', '""') + '"'
        return "t.rowid IN (SELECT rowid FROM texts WHERE texts MATCH ?)", [phrase]
    pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    return "t.rowid IN (SELECT rowid FROM texts WHERE text LIKE ? ESCAPE '\\')", [pattern]
