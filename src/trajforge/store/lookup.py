"""Id lookups by index seeks: unique prefixes (as git resolves short hashes) and short ids.

Every function here reads a few index entries per id, never a whole table, so ``show <prefix>``
and the short ids of ``ls`` cost the same on a store of ten trajectories or ten million.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from trajforge.errors import StoreError

Read = Callable[[str, Iterable[Any]], sqlite3.Cursor]
# (table, column) pairs an id kind is looked up in; the column must lead an index.
Sources = Sequence[tuple[str, str]]

TRAJECTORY_SOURCES: Sources = (("trajectories", "id"),)
# A run exists once it has metadata or trajectories; either may come first.
RUN_SOURCES: Sources = (("runs", "run_id"), ("trajectories", "run_id"))
CANDIDATES_SHOWN = 5

_MAX_CODE_POINT = 0x10FFFF
_SURROGATES = range(0xD800, 0xE000)


def prefix_bound(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``; None if there is none.

    SQLite's BINARY collation compares UTF-8 bytes, and UTF-8 byte order is code point order,
    so bumping the last code point that can be bumped gives the exclusive upper bound.
    """
    chars = list(prefix)
    while chars:
        point = ord(chars.pop()) + 1
        if point in _SURROGATES:  # not encodable in UTF-8, so no stored string holds them
            point = _SURROGATES.stop
        if point <= _MAX_CODE_POINT:
            return "".join(chars) + chr(point)
    return None


def _next_value(read: Read, table: str, column: str, prefix: str, after: str | None) -> str | None:
    """The least value of ``column`` that starts with ``prefix`` and sorts above ``after``."""
    clauses, params = [f"{column} >= ?"], [prefix]
    bound = prefix_bound(prefix)
    if bound is not None:
        clauses.append(f"{column} < ?")
        params.append(bound)
    if after is not None:
        clauses.append(f"{column} > ?")
        params.append(after)
    row = read(
        f"SELECT {column} FROM {table} WHERE {' AND '.join(clauses)} ORDER BY {column} LIMIT 1",
        params,
    ).fetchone()
    return None if row is None else str(row[0])


def values_with_prefix(
    read: Read, sources: Sources, prefix: str, limit: int | None = None
) -> list[str]:
    """The first ``limit`` (default: all) distinct values starting with ``prefix`` in any
    source, sorted.

    One index seek per value: a ``SELECT DISTINCT`` would walk every row of a run with a
    million trajectories to find the next run id.
    """
    found: set[str] = set()
    for table, column in sources:
        value: str | None = None
        taken = 0
        while limit is None or taken < limit:
            value = _next_value(read, table, column, prefix, value)
            if value is None:
                break
            found.add(value)
            taken += 1
    return sorted(found)[:limit]


class AmbiguousIdError(StoreError):
    """A short id that starts several stored ids; the message lists some of them."""


def resolve_prefix(
    read: Read, sources: Sources, kind: str, prefix: str, where: os.PathLike[str]
) -> str:
    """The one value of ``kind`` that is ``prefix`` or starts with it; ``StoreError`` otherwise."""
    if not prefix:
        raise StoreError(f"an empty {kind} id matches nothing in {where}")
    for table, column in sources:
        if read(f"SELECT 1 FROM {table} WHERE {column} = ? LIMIT 1", (prefix,)).fetchone():
            return prefix
    found = values_with_prefix(read, sources, prefix, CANDIDATES_SHOWN + 1)
    if not found:
        raise StoreError(f"no {kind} starting with {prefix!r} in {where}")
    if len(found) > 1:
        shown = ", ".join(found[:CANDIDATES_SHOWN])
        more = ", ..." if len(found) > CANDIDATES_SHOWN else ""
        raise AmbiguousIdError(
            f"{prefix!r} is the start of several {kind} ids in {where}: {shown}{more}; "
            "give more characters"
        )
    return found[0]


def _common_length(a: str, b: str) -> int:
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return k
    return min(len(a), len(b))


def short_ids(read: Read, ids: Sequence[str], minimum: int) -> list[str]:
    """Each trajectory id cut to its shortest prefix of at least ``minimum`` characters that no
    other stored id starts with, so it can be pasted back into any command taking an id."""
    shortened = []
    for traj_id in ids:
        length = minimum
        for comparison, order in ((">", "ASC"), ("<", "DESC")):
            row = read(
                f"SELECT id FROM trajectories WHERE id {comparison} ? ORDER BY id {order} LIMIT 1",
                (traj_id,),
            ).fetchone()
            if row is not None:
                length = max(length, _common_length(traj_id, row[0]) + 1)
        shortened.append(traj_id[:length])
    return shortened
