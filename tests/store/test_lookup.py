"""Id prefixes, short ids and refusing files that are not trajforge stores."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from trajforge.errors import StoreError
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore, lookup


def _store(path: Path, ids: Iterable[str], run_id: str = "r") -> TrajectoryStore:
    st = TrajectoryStore(path)
    st.add_many(
        synthetic_trajectory(i, run_id=run_id).model_copy(update={"id": traj_id})
        for i, traj_id in enumerate(ids)
    )
    return st


def test_trajectory_prefix_resolves_exact_first_then_unique(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    st = _store(db, ["abc", "abcd", "abx1", "b9"])
    assert st.resolve_trajectory_id("abc") == "abc"  # an exact id wins over a longer one
    assert st.resolve_trajectory_id("abcd") == "abcd"
    assert st.resolve_trajectory_id("abx") == "abx1"
    assert st.resolve_trajectory_id("b") == "b9"
    with pytest.raises(StoreError) as none:
        st.resolve_trajectory_id("ab12")
    assert str(none.value) == f"no trajectory starting with 'ab12' in {db}"
    with pytest.raises(StoreError) as several:
        st.resolve_trajectory_id("ab")
    assert str(several.value) == (
        f"'ab' is the start of several trajectory ids in {db}: abc, abcd, abx1; "
        "give more characters"
    )
    with pytest.raises(StoreError, match="empty trajectory id"):
        st.resolve_trajectory_id("")


def test_ambiguous_prefix_shows_a_few_candidates(tmp_path: Path) -> None:
    st = _store(tmp_path / "s.db", [f"x{k}" for k in range(9)])
    with pytest.raises(StoreError) as several:
        st.resolve_trajectory_id("x")
    assert ": x0, x1, x2, x3, x4, ...; give more" in str(several.value)


def test_run_prefix_covers_runs_with_metadata_or_trajectories(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    st = _store(db, ["t1", "t2"], run_id="run-7f3a")
    st.set_run("run-9c1e", {"started": True})  # metadata, no trajectory yet
    st.set_run("run-7f3a", {})
    assert st.resolve_run_id("run-7") == "run-7f3a"
    assert st.resolve_run_id("run-9") == "run-9c1e"
    with pytest.raises(StoreError, match=r"several run ids in .*: run-7f3a, run-9c1e;"):
        st.resolve_run_id("run-")
    with pytest.raises(StoreError, match=r"^no run starting with 'zz' in "):
        st.resolve_run_id("zz")


def test_prefixes_beyond_ascii(tmp_path: Path) -> None:
    top = "\U0010ffff"  # the last code point: the bound must carry to the character before
    st = _store(tmp_path / "s.db", ["é1", "éz", "ê", f"a{top}x", f"a{top}z", "b"])
    assert st.resolve_trajectory_id("é1") == "é1"
    assert st.resolve_trajectory_id("ê") == "ê"
    with pytest.raises(StoreError, match="é1, éz;"):
        st.resolve_trajectory_id("é")
    with pytest.raises(StoreError) as several:
        st.resolve_trajectory_id(f"a{top}")
    assert f": a{top}x, a{top}z; give" in str(several.value)
    assert lookup.prefix_bound("ab") == "ac"
    assert lookup.prefix_bound("a\U0010ffff") == "b"
    assert lookup.prefix_bound("\U0010ffff") is None
    assert lookup.prefix_bound("\ud7ff") == "\ue000"


def test_lookups_only_search_indexes(tmp_path: Path) -> None:
    st = _store(tmp_path / "s.db", [uuid.uuid4().hex for _ in range(50)])
    st.set_run("other", {})
    plans: list[str] = []

    def read(sql: str, params: Iterable[Any]) -> sqlite3.Cursor:
        args = tuple(params)
        plans.extend(row[3] for row in st._conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
        return st._conn.execute(sql, args)

    traj_id = st.summaries(limit=1)[0]["id"]
    lookup.resolve_prefix(read, lookup.TRAJECTORY_SOURCES, "trajectory", traj_id[:6], st.path)
    lookup.resolve_prefix(read, lookup.RUN_SOURCES, "run", "r", st.path)
    lookup.values_with_prefix(read, (("trajectories", "env"),), "")
    lookup.short_ids(read, [traj_id], 8)
    assert plans and all(plan.startswith("SEARCH") for plan in plans), plans


def test_short_ids_are_unique_prefixes(tmp_path: Path) -> None:
    ids = [uuid.uuid4().hex for _ in range(30)] + ["0123456789ab", "0123456789ac", "01234"]
    st = _store(tmp_path / "s.db", ids)
    short = st.short_ids(ids)
    pairs = zip(short, ids, strict=True)
    assert all(len(s) >= min(8, len(full)) and full.startswith(s) for s, full in pairs)
    assert all(len(s) == 8 for s in short[:30])  # random hex rarely shares 8 characters
    assert short[-3:] == ["0123456789ab", "0123456789ac", "01234"]
    assert [st.resolve_trajectory_id(s) for s in short] == ids
    assert st.short_ids(ids[:1], minimum=32) == ids[:1]


def _foreign(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    return path


def _schema(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT type, name FROM sqlite_master ORDER BY name").fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("create", [False, True])
def test_foreign_sqlite_database_is_refused_untouched(tmp_path: Path, create: bool) -> None:
    db = _foreign(tmp_path / "x.db")
    before = db.read_bytes()
    with pytest.raises(StoreError) as exc:
        TrajectoryStore(db, create=create)
    assert str(exc.value) == (
        f"{db} is a SQLite database but not a trajforge store (no trajectories table)"
    )
    assert db.read_bytes() == before and _schema(db) == [("table", "users")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.db"]


def test_a_trajectories_table_of_another_program_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE trajectories (id TEXT, path BLOB)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match=r"not a trajforge store \(its trajectories table has no"):
        TrajectoryStore(db)
    assert _schema(db) == [("table", "trajectories")]


def test_not_sqlite_and_empty_files(tmp_path: Path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("not sqlite at all, " * 100)
    for create in (False, True):
        with pytest.raises(StoreError) as exc:
            TrajectoryStore(text, create=create)
        assert str(exc.value) == f"{text} is not a SQLite database, so not a trajforge store"
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StoreError, match=r"empty\.db is an empty file, not a trajforge store"):
        TrajectoryStore(empty, create=False)
    with TrajectoryStore(empty) as st:  # an empty file may become a store when asked to
        st.add(synthetic_trajectory(0))
    with TrajectoryStore(empty, create=False) as st:
        assert st.count() == 1
