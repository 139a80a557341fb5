"""Creating a store's tables, and bringing a store written by an older trajforge up to the
current layout once, in the same transaction: the ``model`` summary column (filled from the
bodies, then indexed) and the full-text index of every stored trajectory (``text_index``)."""

from __future__ import annotations

import sqlite3

from trajforge.store.rows import BODY_JSON_FUNCTION, SCHEMA_SQL, decode_body
from trajforge.store.text_index import search_text

_SEARCH_TEXT_FUNCTION = "trajforge_search_text"


def _body_search_text(body: bytes) -> str:
    return search_text(decode_body(body))


def create_or_upgrade(cur: sqlite3.Cursor) -> None:
    """Create every table and index ``SCHEMA_SQL`` names that the store lacks, inside the
    caller's write transaction, adding first (and filling after) what an older store lacks."""
    tables = {name for (name,) in cur.execute("SELECT name FROM sqlite_master")}
    older = "trajectories" in tables
    if older and "model" not in {row[1] for row in cur.execute("PRAGMA table_info(trajectories)")}:
        cur.execute("ALTER TABLE trajectories ADD COLUMN model TEXT")
        cur.execute(
            f"UPDATE trajectories SET model = (SELECT json_extract({BODY_JSON_FUNCTION}(b.body), "
            "'$.model') FROM bodies b WHERE b.rowid = trajectories.rowid)"
        )
    for statement in SCHEMA_SQL.split(";"):
        if statement.strip():
            cur.execute(statement)
    if older and "texts" not in tables:
        cur.connection.create_function(
            _SEARCH_TEXT_FUNCTION, 1, _body_search_text, deterministic=True
        )
        cur.execute(
            f"INSERT INTO texts (rowid, text) SELECT rowid, {_SEARCH_TEXT_FUNCTION}(body) "
            "FROM bodies"
        )
