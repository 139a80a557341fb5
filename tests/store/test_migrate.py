"""A store written before the ``model`` column and the text index gets both when opened."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore


def _older_store(path: Path) -> None:
    """A store as trajforge wrote it before: no ``model`` column, no ``texts`` table."""
    trajs = [synthetic_trajectory(i) for i in range(6)]
    trajs[2] = trajs[2].model_copy(update={"model": "other"})
    trajs[3].messages[1].content = "an old needle"
    with TrajectoryStore(path, compress=True) as store:
        store.add_many(trajs)
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX trajectories_model")
    conn.execute("ALTER TABLE trajectories DROP COLUMN model")
    conn.execute("DROP TABLE texts")
    conn.commit()
    conn.close()


def test_an_older_store_gains_the_model_column_and_the_text_index(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _older_store(path)
    with TrajectoryStore(path, create=False) as store:
        assert [r["id"] for r in store.page(model="other")] == ["synthetic-0000002"]
        assert store.count(model="synthetic") == 5
        (hit,) = store.page(text="OLD NEEDLE")
        assert hit["id"] == "synthetic-0000003"
        store.add(synthetic_trajectory(7))  # new rows are indexed as they are written
        assert store.count(model="synthetic") == 6
    conn = sqlite3.connect(path)
    names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
    assert {"texts", "trajectories_model"} <= names
    conn.close()
