"""Several processes writing one store: nothing lost, nothing torn, and SIGKILL leaves it intact."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trajforge.schema.synthetic import synthetic_trajectory
from trajforge.store import TrajectoryStore

WRITER = textwrap.dedent(
    """
    import os, sys, time
    from trajforge.schema.synthetic import synthetic_trajectory
    from trajforge.store import TrajectoryStore

    path, run, n, batch, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    trajs = [synthetic_trajectory(i, run_id=run) for i in range(n)]
    with TrajectoryStore(path) as store:
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.01)
        for k in range(0, n, batch):
            store.add_many(trajs[k : k + batch])
    """
)

# Commits `full` batches, then blocks in the middle of the next one, inside its transaction,
# and says so; the test SIGKILLs it there.
KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    import trajforge.store.rows as store_rows
    from trajforge.schema.synthetic import synthetic_trajectory
    from trajforge.store import TrajectoryStore

    path, full, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    trajs = [synthetic_trajectory(i, run_id="killed") for i in range((full + 1) * batch)]
    stop_at = trajs[full * batch + batch // 2].id
    summary = store_rows.summary_row

    def summary_then_block(traj):
        if traj.id == stop_at:
            print("mid-batch", flush=True)
            time.sleep(600)
        return summary(traj)

    store_rows.summary_row = summary_then_block
    with TrajectoryStore(path) as store:
        for k in range(0, len(trajs), batch):
            store.add_many(trajs[k : k + batch])
            print("committed", k + batch, flush=True)
    """
)


def _spawn(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    go = tmp_path / "go"
    TrajectoryStore(path).close()
    writers = [_spawn(WRITER, path, run, 1000, 25, go) for run in ("a", "b")]
    for proc in writers:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    # Both writers start while another connection holds the write lock, so both must wait.
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    go.touch()
    time.sleep(0.5)
    blocker.execute("COMMIT")
    blocker.close()
    for proc in writers:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    with TrajectoryStore(path) as store:
        assert store.count() == 2000
        assert store.count(run="a") == 1000 and store.count(run="b") == 1000
        stored = {t.id: t for t in store.query()}
    assert len(stored) == 2000
    for run in ("a", "b"):
        for i in (0, 1, 499, 998, 999):
            expected = synthetic_trajectory(i, run_id=run)
            assert stored[expected.id] == expected
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT count(*) FROM bodies").fetchone()[0] == 2000


def test_sigkill_mid_batch_keeps_committed_rows_and_a_sound_file(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    full, batch = 4, 50
    proc = _spawn(KILLED_WRITER, path, full, batch)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if line.strip() == "mid-batch":
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert lines == [f"committed {(k + 1) * batch}" for k in range(full)] + ["mid-batch"]
    assert proc.returncode == -signal.SIGKILL

    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with TrajectoryStore(path) as store:
        assert store.count() == full * batch
        for i in range(full * batch):
            expected = synthetic_trajectory(i, run_id="killed")
            assert store.get(expected.id) == expected
        # The lock died with the writer: the half-written batch can be written again now.
        rest = [
            synthetic_trajectory(i, run_id="killed")
            for i in range(full * batch, (full + 1) * batch)
        ]
        assert store.add_many(rest) == batch
        assert store.count() == (full + 1) * batch


def test_a_reader_opens_and_reads_while_a_writer_holds_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with TrajectoryStore(path) as store:
        store.add(synthetic_trajectory(0))
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # what a store's write holds while it commits a batch
    try:
        # Opening a complete store only reads: it neither waits for the writer's lock nor
        # fails when that lock outlasts the busy timeout.
        with TrajectoryStore(path, busy_timeout=0.05) as reader:
            assert reader.count() == 1
    finally:
        writer.execute("ROLLBACK")
        writer.close()
