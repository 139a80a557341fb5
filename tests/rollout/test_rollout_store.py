"""Store integration: trajectories written as they finish, resume after a crash, no duplicates."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rollout_child import TASKS, N
from rollout_doubles import FakePolicy, TurnsEnv, make_tasks, run_live
from test_rollout_engine import content_of

from trajforge.store.sqlite import TrajectoryStore

HERE = Path(__file__).parent


@pytest.mark.timeout(60)
def test_resume_runs_only_the_missing_pairs_and_returns_everything_in_order(tmp_path: Path) -> None:
    tasks = make_tasks(4)
    with TrajectoryStore(tmp_path / "s.db") as store:
        first = run_live(
            lambda: TurnsEnv(2),
            FakePolicy(),
            tasks[:2],
            n=3,
            store=store,
            run_id="r",
        )
        assert store.count(run="r") == 6 and store.get_run("r") is not None
        policy = FakePolicy()
        trajs = run_live(
            lambda: TurnsEnv(2),
            policy,
            tasks,
            n=3,
            store=store,
            run_id="r",
        )
        assert policy.calls == 6 * 2  # only the 6 new episodes, 2 turns each
        assert [(t.task.id, t.sample_index) for t in trajs] == [
            (f"t{i}", s) for i in range(4) for s in range(3)
        ]
        assert [t.id for t in trajs[:6]] == [t.id for t in first]
        assert store.count(run="r") == 12
        assert len(store.completed_keys("r")) == 12
        # Resuming a complete run runs nothing and changes nothing.
        again = FakePolicy()
        assert [
            t.id
            for t in run_live(
                lambda: TurnsEnv(2),
                again,
                tasks,
                n=3,
                store=store,
                run_id="r",
            )
        ] == [t.id for t in trajs]
        assert again.calls == 0 and store.count(run="r") == 12
    # The same run in one go gives the same trajectories.
    fresh = run_live(lambda: TurnsEnv(2), FakePolicy(), tasks, n=3, run_id="r")
    assert [content_of(t) for t in fresh] == [content_of(t) for t in trajs]
    assert [t.group_id for t in fresh] == [t.group_id for t in trajs]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_run_killed_with_sigkill_halfway_then_resumed_has_every_trajectory_once(
    tmp_path: Path,
) -> None:
    db = tmp_path / "kill.db"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.Popen(
        [sys.executable, str(HERE / "rollout_child.py"), str(db), "k"], env=env
    )
    total = TASKS * N
    try:
        deadline = time.monotonic() + 90
        stored = 0
        while stored < total // 4:
            assert child.poll() is None, "the child ended before it could be killed"
            assert time.monotonic() < deadline, (
                "the child never wrote a quarter of its trajectories"
            )
            time.sleep(0.05)
            if db.exists():
                with TrajectoryStore(db) as store:
                    stored = store.count(run="k")
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    with TrajectoryStore(db) as store:
        before = store.count(run="k")
        assert total // 4 <= before < total
        policy = FakePolicy()
        trajs = run_live(
            lambda: TurnsEnv(3, delay=lambda task, turn: 0.0),
            policy,
            make_tasks(TASKS),
            n=N,
            store=store,
            run_id="k",
            seed=3,
        )
        assert policy.calls == (total - before) * 3
        assert len(trajs) == total and store.count(run="k") == total
        keys = [(t.task.id, t.sample_index) for t in store.query(run="k")]
        assert len(keys) == len(set(keys)) == total
        assert [(t.task.id, t.sample_index) for t in trajs] == [
            (f"t{i}", s) for i in range(TASKS) for s in range(N)
        ]
        assert all(t.outcome.status.value == "ok" for t in trajs)
