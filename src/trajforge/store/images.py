"""Image bytes in the store: one row per distinct image, keyed by its sha256, that trajectory
bodies refer to (a body keeps each image part's media type, size and hash, never its bytes), so
a screenshot repeated across turns, samples and runs is stored once."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from trajforge.errors import StoreError
from trajforge.schema import ImagePart, Trajectory
from trajforge.store.lookup import Read

IMAGES_SQL = """CREATE TABLE IF NOT EXISTS images (
    sha256 TEXT PRIMARY KEY,
    media_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
)"""

_CHUNK = 500  # hashes looked up per statement


def _parts(trajs: Iterable[Trajectory]) -> Iterable[tuple[Trajectory, ImagePart]]:
    for traj in trajs:
        for message in traj.messages:
            for part in message.images:
                yield traj, part


def save_images(cur: sqlite3.Cursor, trajs: Iterable[Trajectory]) -> None:
    """Store the bytes of every image the trajectories hold that the store lacks; a part
    without bytes must refer to an image stored already (``StoreError`` names it)."""
    with_data: dict[str, ImagePart] = {}
    references: dict[str, Trajectory] = {}
    for traj, part in _parts(trajs):
        if part.data is not None:
            with_data.setdefault(part.sha256, part)
        else:
            references.setdefault(part.sha256, traj)
    cur.executemany(
        "INSERT OR IGNORE INTO images (sha256, media_type, size, data) VALUES (?, ?, ?, ?)",
        [(p.sha256, p.media_type, p.size, p.data) for p in with_data.values()],
    )
    missing = [h for h in references if h not in with_data]
    found = _stored(lambda sql, params: cur.execute(sql, tuple(params)), missing, "sha256")
    for sha in missing:
        if sha not in found:
            raise StoreError(
                f"trajectory {references[sha].id!r}: image {sha[:12]} has no bytes "
                "and the store holds none"
            )


def load_images(read: Read, trajs: list[Trajectory]) -> list[Trajectory]:
    """``trajs`` (freshly decoded bodies) with each image part's bytes filled in from the store."""
    wanted = [part for _, part in _parts(trajs) if part.data is None]
    if not wanted:
        return trajs
    data = _stored(read, list({p.sha256 for p in wanted}), "data")
    for part in wanted:
        blob = data.get(part.sha256)
        if not isinstance(blob, bytes):
            raise StoreError(f"image {part.sha256[:12]}: a stored trajectory refers to it, "
                             "but the store has no bytes for it")  # fmt: skip
        part.data = blob
    return trajs


def stored_image(read: Read, sha256: str) -> ImagePart | None:
    """The stored image with this hash, its bytes loaded, or ``None``."""
    row = read("SELECT media_type, data FROM images WHERE sha256 = ?", (sha256,)).fetchone()
    return None if row is None else ImagePart.from_bytes(row[1], row[0])


def _stored(read: Read, hashes: list[str], column: str) -> dict[str, object]:
    """``column`` of each stored image among ``hashes``, by hash."""
    found: dict[str, object] = {}
    for k in range(0, len(hashes), _CHUNK):
        chunk = hashes[k : k + _CHUNK]
        marks = ",".join("?" * len(chunk))
        sql = f"SELECT sha256, {column} FROM images WHERE sha256 IN ({marks})"
        found.update(read(sql, chunk))
    return found
