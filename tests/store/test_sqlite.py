"""TrajectoryStore: storage, filters, ordering, statistics, scores, runs, resume keys, export."""

from __future__ import annotations

import sqlite3
import statistics
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from trajforge.errors import StoreError
from trajforge.formats.jsonl import load_trajectories
from trajforge.schema import Evaluator, EvaluatorKind, Score, Trajectory
from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore


def _trajs() -> list[Trajectory]:
    """40 trajectories over two runs and two envs, 2 samples per task."""
    return [
        synthetic_trajectory(i, run_id=run, env=env, samples_per_task=2)
        for run in ("r1", "r2")
        for env, offset in (("calc", 0), ("py", 100))
        for i in range(offset, offset + 10)
    ]


@pytest.fixture
def store(tmp_path: Path) -> TrajectoryStore:
    st = TrajectoryStore(tmp_path / "sub" / "store.db")
    st.add_many(_trajs())
    return st


def test_get_returns_the_exact_trajectory(store: TrajectoryStore) -> None:
    traj = synthetic_trajectory(3, run_id="r2", env="calc", samples_per_task=2)
    assert store.get(traj.id) == traj
    assert traj.id in store and "nope" not in store
    with pytest.raises(StoreError, match="no trajectory 'nope'"):
        store.get("nope")


def test_wal_mode_and_tables(store: TrajectoryStore) -> None:
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT count(*) FROM trajectories").fetchone()[0] == 40
    assert conn.execute("SELECT count(*) FROM bodies").fetchone()[0] == 40
    assert conn.execute("SELECT count(DISTINCT name) FROM scores").fetchone()[0] == 1


def test_filters_match_a_python_filter(store: TrajectoryStore) -> None:
    trajs = _trajs()
    cases: list[tuple[dict[str, Any], Callable[[Trajectory], bool]]] = [
        ({"run": "r1"}, lambda t: t.run_id == "r1"),
        ({"env": "py", "status": "ok"}, lambda t: t.env == "py" and t.outcome.status == "ok"),
        ({"task": "task-51"}, lambda t: t.task.id == "task-51"),
        ({"group": "r2/task-2"}, lambda t: t.group_id == "r2/task-2"),
        ({"min_reward": 0.3, "max_reward": 0.7}, lambda t: 0.3 <= (t.reward or 0) <= 0.7),
        ({"score": "correct", "min_score": 0.5}, lambda t: (t.reward or 0) >= 0.5),
    ]
    for filters, keep in cases:
        expected = sorted(t.id for t in trajs if keep(t))
        assert expected, filters
        assert sorted(t.id for t in store.query(**filters)) == expected, filters
        assert store.count(**filters) == len(expected)
    assert store.count(score="missing") == 0


def test_order_and_limit(store: TrajectoryStore) -> None:
    top = store.query(run="r1", order_by="reward", descending=True, limit=5)
    rewards = sorted((t.reward or 0.0 for t in _trajs() if t.run_id == "r1"), reverse=True)
    assert [t.reward for t in top] == rewards[:5]
    assert [t.created_at for t in store.query(limit=3)] == sorted(t.created_at for t in _trajs())[
        :3
    ]
    with pytest.raises(StoreError, match="order_by: 'body; drop table'"):
        store.query(order_by="body; drop table")
    with pytest.raises(StoreError, match="min_score: name the score"):
        store.query(min_score=0.5)


def test_stats_match_python(store: TrajectoryStore) -> None:
    trajs = [t for t in _trajs() if t.env == "calc"]
    stats = store.stats(env="calc")
    rewards = [t.reward for t in trajs if t.reward is not None]
    assert stats["count"] == len(trajs)
    assert stats["reward_mean"] == pytest.approx(statistics.fmean(rewards))
    assert stats["reward_std"] == pytest.approx(statistics.pstdev(rewards))
    assert stats["turns_mean"] == 6
    assert stats["tokens_total"] == sum(t.num_tokens for t in trajs)
    statuses = {
        s: sum(t.outcome.status == s for t in trajs)
        for s in {t.outcome.status.value for t in trajs}
    }
    assert stats["status"] == dict(sorted(statuses.items()))
    assert set(stats["by_run"]) == {"r1", "r2"} and set(stats["by_env"]) == {"calc"}
    r1 = [t.reward for t in trajs if t.run_id == "r1" and t.reward is not None]
    assert stats["by_run"]["r1"]["reward_mean"] == pytest.approx(statistics.fmean(r1))
    assert sum(v["count"] for v in stats["by_status"].values()) == len(trajs)


def test_empty_stats(tmp_path: Path) -> None:
    with TrajectoryStore(tmp_path / "s.db") as st:
        stats = st.stats()
    assert stats["count"] == 0 and stats["reward_mean"] is None and stats["by_run"] == {}


def test_duplicates_fail_the_whole_batch_or_are_skipped(store: TrajectoryStore) -> None:
    new = synthetic_trajectory(500, run_id="r1")
    same_key = synthetic_trajectory(0, run_id="r1", env="calc", samples_per_task=2).model_copy(
        update={"id": "other"}
    )
    with pytest.raises(StoreError, match=r"run 'r1', task 'task-0', sample 0\) is already stored"):
        store.add_many([new, same_key])
    assert new.id not in store and store.count() == 40
    with pytest.raises(StoreError, match="already stored"):
        store.add(synthetic_trajectory(0, run_id="r1", env="calc", samples_per_task=2))
    assert store.add_many([new, same_key], skip_existing=True) == 1
    assert store.get(new.id) == new and "other" not in store


def test_null_sample_index_is_not_unique_but_run_none_is(tmp_path: Path) -> None:
    base = synthetic_trajectory(0)
    with TrajectoryStore(tmp_path / "s.db") as st:
        st.add(base.model_copy(update={"id": "a", "sample_index": None}))
        st.add(base.model_copy(update={"id": "b", "sample_index": None}))
        st.add(base.model_copy(update={"id": "c", "run_id": None}))
        with pytest.raises(StoreError, match="already stored"):
            st.add(base.model_copy(update={"id": "d", "run_id": None}))
        assert st.count() == 3


def test_completed_keys(store: TrajectoryStore) -> None:
    keys = store.completed_keys("r2")
    assert len(keys) == 20
    assert ("task-0", 1) in keys and ("task-54", 1) in keys
    assert store.completed_keys("unknown") == set()


def test_add_scores_updates_body_and_filter(store: TrajectoryStore) -> None:
    traj_id = synthetic_trajectory(1, run_id="r1", env="calc", samples_per_task=2).id
    judge = Evaluator(kind=EvaluatorKind.LLM, name="judge")
    store.add_scores(traj_id, [Score(name="helpful", value=0.9, evaluator=judge)])
    store.add_scores(traj_id, [Score(name="helpful", value=0.2, evaluator=judge)])
    assert [s.value for s in store.get(traj_id).scores if s.name == "helpful"] == [0.9, 0.2]
    assert store.count(score="helpful") == 1
    assert store.count(score="helpful", min_score=0.5) == 0  # the latest value counts
    with pytest.raises(StoreError, match="no trajectory 'missing'"):
        store.add_scores("missing", [])


def test_runs(store: TrajectoryStore) -> None:
    assert store.get_run("r1") is None
    store.set_run("r1", {"policy": "tiny", "n": 2})
    store.set_run("r1", {"policy": "tiny", "n": 3})
    assert store.get_run("r1") == {"policy": "tiny", "n": 3}
    runs = {r["run_id"]: r for r in store.list_runs()}
    assert runs["r1"]["count"] == 20 and runs["r1"]["metadata"]["n"] == 3
    assert runs["r2"]["count"] == 20 and runs["r2"]["metadata"] == {}


def test_export_round_trip(store: TrajectoryStore, tmp_path: Path) -> None:
    out = tmp_path / "export.jsonl"
    assert store.export_jsonl(out, run="r2", env="py") == 10
    exported = load_trajectories(out)
    assert exported == store.query(run="r2", env="py")
    with TrajectoryStore(tmp_path / "copy.db") as copy:
        copy.add_many(exported)
        assert copy.stats() == store.stats(run="r2", env="py")


def test_compressed_bodies_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    plain, packed = synthetic_trajectory(0), synthetic_trajectory(1)
    with TrajectoryStore(path) as st:
        st.add(plain)
    with TrajectoryStore(path, compress=True) as st:
        st.add(packed)
    with TrajectoryStore(path, create=False) as st:
        assert st.get(plain.id) == plain and st.get(packed.id) == packed


def test_missing_store_is_not_created_when_asked(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no store at this path"):
        TrajectoryStore(tmp_path / "none.db", create=False)
    assert not (tmp_path / "none.db").exists()


def test_threads_sharing_one_store(tmp_path: Path) -> None:
    trajs = [synthetic_trajectory(i) for i in range(80)]
    with TrajectoryStore(tmp_path / "s.db") as st, ThreadPoolExecutor(4) as pool:
        added = list(pool.map(st.add_many, [trajs[k : k + 10] for k in range(0, 80, 10)]))
        assert added == [10] * 8 and st.count() == 80


def test_put_replaces_a_trajectory_with_its_summary_and_scores(store: TrajectoryStore) -> None:
    traj = synthetic_trajectory(7, run_id="live")
    store.put(traj)
    judge = Evaluator(kind=EvaluatorKind.RULE, name="judge")
    grown = traj.model_copy(
        update={
            "outcome": traj.outcome.model_copy(update={"reward": 0.25}),
            "scores": [Score(name="judge", value=0.5, evaluator=judge)],
        }
    )
    store.put(grown)
    assert store.count(run="live") == 1
    assert store.get(traj.id) == grown
    assert store.query(run="live", min_reward=0.2)[0].id == traj.id
    assert store.stats(run="live")["count"] == 1
