"""Write transactions on a store connection and the busy errors that make a write retry."""

from __future__ import annotations

import sqlite3
from types import TracebackType


class Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any error."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> sqlite3.Cursor:
        self._conn.execute("BEGIN IMMEDIATE")
        return self._conn.cursor()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                self._conn.execute("COMMIT")
        finally:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")


def is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text
