"""The store's tables and rows: DDL, body encoding, summary rows, filter clauses, stats totals.

Kept apart from ``sqlite.py`` (connections, transactions, the public API) so each stays short.
"""

from __future__ import annotations

import re
import sqlite3
import zlib
from pathlib import Path
from typing import Any

from trajforge.errors import StoreError
from trajforge.schema import WITHOUT_IMAGE_BYTES, Role, Trajectory
from trajforge.store.images import IMAGES_SQL
from trajforge.store.text_index import TEXTS_SQL

# The run and env indexes cover every column stats() reads, in its GROUP BY order, so statistics
# (filtered by run or env, or not at all) read one index in order: no table lookups, no sort.
SCHEMA_SQL = f"""
CREATE TABLE IF NOT EXISTS trajectories (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    run_id TEXT,
    task_id TEXT NOT NULL,
    env TEXT,
    group_id TEXT,
    sample_index INTEGER,
    status TEXT NOT NULL,
    reward REAL,
    turns INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    created_at REAL NOT NULL,
    model TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS trajectories_run_task_sample
    ON trajectories (coalesce(run_id, ''), task_id, sample_index) WHERE sample_index IS NOT NULL;
CREATE INDEX IF NOT EXISTS trajectories_run_cover
    ON trajectories (run_id, env, status, reward, turns, tokens);
CREATE INDEX IF NOT EXISTS trajectories_env_cover
    ON trajectories (env, run_id, status, reward, turns, tokens);
CREATE INDEX IF NOT EXISTS trajectories_task ON trajectories (task_id);
CREATE INDEX IF NOT EXISTS trajectories_group ON trajectories (group_id);
CREATE INDEX IF NOT EXISTS trajectories_created ON trajectories (created_at);
CREATE INDEX IF NOT EXISTS trajectories_model ON trajectories (model);
CREATE TABLE IF NOT EXISTS bodies (rowid INTEGER PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS scores (
    traj_rowid INTEGER NOT NULL,
    name TEXT NOT NULL,
    value REAL,
    PRIMARY KEY (traj_rowid, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    metadata TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
{TEXTS_SQL};
{IMAGES_SQL};
"""

# The summary columns, in the order of ``summary_row``; a table called ``trajectories`` without
# them (bar ``ADDED_COLUMNS``) belongs to some other program.
SUMMARY_COLUMNS = (
    "id",
    "run_id",
    "task_id",
    "env",
    "group_id",
    "sample_index",
    "status",
    "reward",
    "turns",
    "tokens",
    "created_at",
    "model",
)

ADDED_COLUMNS = ("model",)
"""Summary columns added after the first stores were written; ``store.migrate`` adds them."""

ORDER_COLUMNS = frozenset(
    {
        "created_at",
        "reward",
        "turns",
        "tokens",
        "id",
        "run_id",
        "task_id",
        "env",
        "status",
        "sample_index",
        "model",
    }
)
_ASSISTANT = Role.ASSISTANT
# Measured on synthetic 6-turn trajectories: level-1 zlib makes bodies 2.7x smaller but ingest
# ~1.5x slower, so bodies are plain JSON unless the store is opened with compress=True.
_COMPRESS_LEVEL = 1
# Bodies are several KB; 16 KiB pages keep most of a body on one page (ingest ~1.4x faster than 4 KiB).
PAGE_SIZE = 16384


SCHEMA_OBJECTS = frozenset(re.findall(r"IF NOT EXISTS (\w+)", SCHEMA_SQL))
"""The tables and indexes ``SCHEMA_SQL`` creates: a store that has them all needs no write."""


def check_is_store(conn: sqlite3.Connection, path: Path, *, create: bool) -> None:
    """Refuse a file that is not a trajforge store, before anything is written to it.

    A SQLite file with no tables at all is a store yet to be set up when ``create`` is true;
    one with other tables is someone else's database and is never touched.
    """
    try:
        names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError as exc:
        if "not a database" not in str(exc):
            raise StoreError(f"{path}: cannot read the store: {exc}") from exc
        raise StoreError(f"{path} is not a SQLite database, so not a trajforge store") from None
    if "trajectories" in names:
        have = {row[1] for row in conn.execute("PRAGMA table_info(trajectories)")}
        missing = [c for c in SUMMARY_COLUMNS if c not in have and c not in ADDED_COLUMNS]
        if missing:
            raise StoreError(
                f"{path} is a SQLite database but not a trajforge store "
                f"(its trajectories table has no column {missing[0]})"
            )
        return
    if create and not names:
        return
    if not names and path.stat().st_size == 0:
        raise StoreError(f"{path} is an empty file, not a trajforge store")
    raise StoreError(
        f"{path} is a SQLite database but not a trajforge store (no trajectories table)"
    )


def encode_body(traj: Trajectory, *, compress: bool = False) -> bytes:
    """The body of ``traj``: its JSON, image parts as references (``store.images`` keeps the
    bytes, once per distinct image)."""
    data = traj.model_dump_json(context={WITHOUT_IMAGE_BYTES: True}).encode()
    return zlib.compress(data, _COMPRESS_LEVEL) if compress else data


def decode_body(body: bytes) -> Trajectory:
    # Plain JSON bodies are read too, so a store written without compression stays readable.
    text = body if body[:1] == b"{" else zlib.decompress(body)
    return Trajectory.model_validate_json(text)


BODY_JSON_FUNCTION = "trajforge_body_json"
"""The SQL function (registered on every store connection) giving a body as JSON text, so
SQLite's JSON functions read plain and compressed bodies alike."""


def body_json(body: bytes | None) -> str | None:
    """A stored body as JSON text (``BODY_JSON_FUNCTION``)."""
    if body is None:
        return None
    return (body if body[:1] == b"{" else zlib.decompress(body)).decode()


def summary_row(traj: Trajectory) -> tuple[Any, ...]:
    # One pass without the Trajectory properties: this runs for every row of a bulk ingest.
    turns = tokens = 0
    for msg in traj.messages:
        if msg.role is _ASSISTANT:
            turns += 1
        if msg.token_ids is not None:
            tokens += len(msg.token_ids)
    if not tokens:
        tokens = traj.usage.prompt_tokens + traj.usage.completion_tokens
    return (
        traj.id,
        traj.run_id,
        traj.task.id,
        traj.env or traj.task.env,
        traj.group_id,
        traj.sample_index,
        traj.outcome.status.value,
        traj.outcome.reward,
        turns,
        tokens,
        traj.created_at,
        traj.model,
    )
