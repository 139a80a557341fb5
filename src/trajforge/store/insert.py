"""Writing trajectories into the store's tables: each one's summary row, body, search text and
score index together, added beside the stored ones, in place of the stored version, or deleted;
images no row refers to any more leave the image table with them. The caller holds the write
transaction."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence

from trajforge.errors import StoreError
from trajforge.schema import Trajectory
from trajforge.store import rows as store_rows
from trajforge.store.images import save_images
from trajforge.store.rows import SUMMARY_COLUMNS, body_json
from trajforge.store.text_index import search_text

SUMMARY_LIST = ", ".join(SUMMARY_COLUMNS)


def insert_rows(
    cur: sqlite3.Cursor, rows: list[tuple[Trajectory, bytes]], skip_existing: bool
) -> int:
    """Insert each ``(trajectory, encoded body)`` of ``rows``; returns how many were added (one
    already stored is skipped with ``skip_existing``, else a ``StoreError``)."""
    verb = "INSERT OR IGNORE" if skip_existing else "INSERT"
    marks = ",".join("?" * len(SUMMARY_COLUMNS))
    summary_sql = f"{verb} INTO trajectories ({SUMMARY_LIST}) VALUES ({marks})"
    bodies: list[tuple[int | None, bytes]] = []
    texts: list[tuple[int | None, str]] = []
    scores: list[tuple[int | None, str, float | None]] = []
    save_images(cur, [traj for traj, _ in rows])
    for traj, body in rows:
        try:
            cur.execute(summary_sql, store_rows.summary_row(traj))
        except sqlite3.IntegrityError:
            raise StoreError(
                f"trajectory {traj.id!r} (run {traj.run_id!r}, task {traj.task.id!r}, "
                f"sample {traj.sample_index}) is already stored "
                "(skip_existing / --skip-existing skips it)"
            ) from None
        if cur.rowcount == 0:
            continue
        bodies.append((cur.lastrowid, body))
        texts.append((cur.lastrowid, search_text(traj)))
        scores.extend((cur.lastrowid, s.name, s.value) for s in traj.scores)
    cur.executemany("INSERT INTO bodies (rowid, body) VALUES (?, ?)", bodies)
    cur.executemany("INSERT INTO texts (rowid, text) VALUES (?, ?)", texts)
    cur.executemany(
        "INSERT OR REPLACE INTO scores (traj_rowid, name, value) VALUES (?, ?, ?)", scores
    )
    return len(bodies)


def replace_row(cur: sqlite3.Cursor, traj: Trajectory, body: bytes) -> None:
    """Store ``traj`` (its encoded ``body``) in place of the stored trajectory with its id."""
    save_images(cur, [traj])
    row = cur.execute("SELECT rowid FROM trajectories WHERE id = ?", (traj.id,))
    found = row.fetchone()
    if found is not None:
        kept = {part.sha256 for message in traj.messages for part in message.images}
        _prune_images(cur, _delete_rows(cur, [found[0]]) - kept)
    marks = ",".join("?" * len(SUMMARY_COLUMNS))
    cur.execute(
        f"INSERT INTO trajectories ({SUMMARY_LIST}) VALUES ({marks})",
        store_rows.summary_row(traj),
    )
    rowid = cur.lastrowid
    cur.execute("INSERT INTO bodies (rowid, body) VALUES (?, ?)", (rowid, body))
    cur.execute("INSERT INTO texts (rowid, text) VALUES (?, ?)", (rowid, search_text(traj)))
    cur.executemany(
        "INSERT OR REPLACE INTO scores (traj_rowid, name, value) VALUES (?, ?, ?)",
        [(rowid, s.name, s.value) for s in traj.scores],
    )


def delete_rows(cur: sqlite3.Cursor, traj_ids: Sequence[str]) -> int:
    """Delete the stored trajectories with these ids (absent ones are no error) and the images
    only they referred to; how many trajectories went."""
    rowids = [
        found[0]
        for traj_id in traj_ids
        if (found := cur.execute("SELECT rowid FROM trajectories WHERE id = ?", (traj_id,))
            .fetchone()) is not None
    ]  # fmt: skip
    _prune_images(cur, _delete_rows(cur, rowids))
    return len(rowids)


_IMAGE_HASH = re.compile(r'"sha256":"([0-9a-f]{64})"')


def _delete_rows(cur: sqlite3.Cursor, rowids: list[int]) -> set[str]:
    """Delete the rows; the hashes of the images their bodies referred to."""
    hashes: set[str] = set()
    for rowid in rowids:
        body = cur.execute("SELECT body FROM bodies WHERE rowid = ?", (rowid,)).fetchone()
        if body is not None:
            hashes.update(_IMAGE_HASH.findall(body_json(body[0]) or ""))
        cur.execute("DELETE FROM trajectories WHERE rowid = ?", (rowid,))
        cur.execute("DELETE FROM bodies WHERE rowid = ?", (rowid,))
        cur.execute("DELETE FROM texts WHERE rowid = ?", (rowid,))
        cur.execute("DELETE FROM scores WHERE traj_rowid = ?", (rowid,))
    return hashes


def _prune_images(cur: sqlite3.Cursor, candidates: set[str]) -> int:
    """Delete the images of ``candidates`` that no stored body mentions; how many went. Bodies
    are scanned only when there are candidates (a trajectory that lost an image), and a hash
    found anywhere in a body keeps its image: pruning never removes an image in use."""
    left = set(candidates)
    if not left:
        return 0
    for (body,) in cur.execute("SELECT body FROM bodies").fetchall():
        text = body_json(body) or ""
        left = {sha for sha in left if sha not in text}
        if not left:
            return 0
    cur.executemany("DELETE FROM images WHERE sha256 = ?", [(sha,) for sha in left])
    return len(left)
