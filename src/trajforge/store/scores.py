"""Scores given to a trajectory after it was stored: appended (a judge's verdict) or replacing a
family of them (a re-run triage verdict), in its body and in the ``scores`` index in one
transaction."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from trajforge.errors import StoreError
from trajforge.schema import Score
from trajforge.store.rows import decode_body, encode_body


def in_family(name: str, family: str) -> bool:
    """Whether score ``name`` is ``family`` or one of its ``family.<name>`` scores."""
    return name == family or name.startswith(family + ".")


def store_scores(
    cur: sqlite3.Cursor,
    traj_id: str,
    new: list[Score],
    *,
    store: Path,
    compress: bool,
    replacing: str | None = None,
) -> None:
    """Give stored trajectory ``traj_id`` the scores ``new``, in place of its ``replacing``
    family when one is named, else beside what it has."""
    row = cur.execute(
        "SELECT t.rowid, b.body FROM trajectories t JOIN bodies b ON b.rowid = t.rowid "
        "WHERE t.id = ?",
        (traj_id,),
    ).fetchone()
    if row is None:
        raise StoreError(f"no trajectory {traj_id!r} in {store}")
    rowid, body = row
    traj = decode_body(body)
    kept = traj.scores
    if replacing is not None:
        kept = [s for s in kept if not in_family(s.name, replacing)]
        cur.execute(
            "DELETE FROM scores WHERE traj_rowid = ? AND (name = ? OR substr(name, 1, ?) = ?)",
            (rowid, replacing, len(replacing) + 1, replacing + "."),
        )
    traj.scores = [*kept, *new]
    cur.execute(
        "UPDATE bodies SET body = ? WHERE rowid = ?", (encode_body(traj, compress=compress), rowid)
    )
    cur.executemany(
        "INSERT OR REPLACE INTO scores (traj_rowid, name, value) VALUES (?, ?, ?)",
        [(rowid, s.name, s.value) for s in new],
    )
