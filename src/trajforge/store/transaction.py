"""Write transactions on a store connection and the busy errors that make a write retry."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Cursor]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn.cursor()
        conn.execute("COMMIT")
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text
