"""Reading trajectories and their summary rows by filter: the matches sorted and streamed body
by body, their summary rows, their count."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trajforge.errors import StoreError
from trajforge.schema import Trajectory
from trajforge.store.filters import TrajectoryFilter, where_clause
from trajforge.store.images import load_images
from trajforge.store.insert import SUMMARY_LIST
from trajforge.store.lookup import Read
from trajforge.store.rows import ORDER_COLUMNS, decode_body

_BODY_CHUNK = 500  # bodies fetched per statement while streaming query results


def iter_trajectories(
    read: Read, where: TrajectoryFilter, order_by: str, descending: bool, limit: int | None
) -> Iterator[Trajectory]:
    """The trajectories matching ``where``, sorted by ``order_by``, at most ``limit``, decoded
    one body at a time."""
    if order_by not in ORDER_COLUMNS:
        raise StoreError(f"order_by: {order_by!r} is not one of {', '.join(sorted(ORDER_COLUMNS))}")
    sql_where, params = where_clause(where)
    direction = "DESC" if descending else "ASC"
    # Rowids first, bodies after: sorting the matches with their bodies attached would drag
    # every matching body through the sorter, not just the ``limit`` returned.
    sql = f"SELECT t.rowid FROM trajectories t {sql_where} ORDER BY t.{order_by} {direction}, t.rowid {direction}"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(int(limit))
    rowids = [rowid for (rowid,) in read(sql, params)]
    for k in range(0, len(rowids), _BODY_CHUNK):
        chunk = rowids[k : k + _BODY_CHUNK]
        marks = ",".join("?" * len(chunk))
        bodies = dict(read(f"SELECT rowid, body FROM bodies WHERE rowid IN ({marks})", chunk))
        for rowid in chunk:
            yield load_images(read, [decode_body(bodies[rowid])])[0]


def summaries(read: Read, where: TrajectoryFilter, limit: int | None) -> list[dict[str, Any]]:
    """Summary rows (no bodies) matching ``where``, newest first, at most ``limit``."""
    sql_where, params = where_clause(where)
    sql = f"SELECT {SUMMARY_LIST} FROM trajectories t {sql_where} ORDER BY t.created_at DESC, t.rowid DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(int(limit))
    cur = read(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur]


def count(read: Read, where: TrajectoryFilter) -> int:
    """How many trajectories match ``where``."""
    sql_where, params = where_clause(where)
    return int(read(f"SELECT count(*) FROM trajectories t {sql_where}", params).fetchone()[0])
