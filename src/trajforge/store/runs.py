"""The ``runs`` table: one metadata object per run (what made it: a rollout's spec, a
stage's config), with its creation and last update times."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from trajforge.store.lookup import Read


def upsert_run(cur: sqlite3.Cursor, run_id: str, metadata: dict[str, Any]) -> None:
    """Create or replace run ``run_id``'s metadata, keeping its creation time."""
    now = time.time()
    cur.execute(
        "INSERT INTO runs (run_id, metadata, created_at, updated_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (run_id) DO UPDATE SET metadata = excluded.metadata, "
        "updated_at = excluded.updated_at",
        (run_id, json.dumps(metadata, sort_keys=True, default=str), now, now),
    )


def run_metadata(read: Read, run_id: str) -> dict[str, Any] | None:
    """Run ``run_id``'s metadata, or None if it was never set."""
    row = read("SELECT metadata FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return None if row is None else dict(json.loads(row[0]))


def list_runs(read: Read) -> list[dict[str, Any]]:
    """Every run with metadata or trajectories, oldest first: ``run_id``, ``created_at``,
    ``count``, ``metadata``."""
    rows = read(
        "SELECT r.run_id, r.created_at, r.metadata, "
        "(SELECT count(*) FROM trajectories t WHERE t.run_id = r.run_id) FROM runs r UNION ALL "
        "SELECT run_id, min(created_at), NULL, count(*) FROM trajectories "
        "WHERE run_id IS NOT NULL AND run_id NOT IN (SELECT run_id FROM runs) GROUP BY run_id "
        "ORDER BY 2",
        (),
    ).fetchall()
    return [
        {"run_id": r[0], "created_at": r[1], "metadata": json.loads(r[2]) if r[2] else {},
         "count": r[3]}
        for r in rows
    ]  # fmt: skip
