"""A Ray rollout whose driver is SIGKILLed mid-run resumes like a local one: ``--resume``
plays only the missing episodes, and the store ends with each task x sample exactly once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trajforge.store.sqlite import TrajectoryStore

SLOW_ENV = f"{Path(__file__).parent / 'ray_envs.py'}:slow_calculator"
TASKS = 32
TRAJFORGE = [str(Path(sys.executable).with_name("trajforge"))]


def _stored(db: Path) -> int:
    try:
        with sqlite3.connect(db) as conn:
            return int(conn.execute("SELECT count(*) FROM trajectories").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0


def _session_pids(sid: int) -> list[int]:
    """The live processes of session ``sid`` (the driver's and the Ray processes it started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow
def test_a_driver_killed_mid_run_resumes_to_exactly_every_episode(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    args = [
        *("--env", SLOW_ENV, "--model", "expert", "--tasks", str(TASKS), "--concurrency", "2"),
        *("--run", "killed", "--store", str(db), "--json", "--ray", "--ray-actors", "2"),
    ]
    # Its own session, so that the Ray processes the driver starts can be found and ended.
    driver = subprocess.Popen(
        [*TRAJFORGE, "rollout", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while _stored(db) < 3 and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.2)
        assert driver.poll() is None, "the run ended before it could be killed"
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    finally:
        # Ray's node agents outlive a SIGKILLed driver; end the session's processes.
        for pid in _session_pids(driver.pid):
            os.kill(pid, signal.SIGKILL)
    partial = _stored(db)
    assert 3 <= partial < TASKS
    resumed = subprocess.run(
        [*TRAJFORGE, "rollout", "--resume", "killed", "--store", str(db), "--json", "--ray"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    with TrajectoryStore(db) as store:
        stored = store.query(run="killed")
    keys = [(t.task.id, t.sample_index or 0) for t in stored]
    assert len(keys) == TASKS
    assert len(set(keys)) == TASKS
    assert all(t.outcome.reward == 1.0 for t in stored)
