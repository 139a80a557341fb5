"""``trajforge collect`` killed mid-way (Ctrl-C or SIGKILL) then ``--resume``d stores every
run exactly once: the runs that ended are kept, those cut off run again."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

import trajforge
from trajforge.cli.main import app
from trajforge.schema import Task
from trajforge.store import TrajectoryStore

AGENT = f"{sys.executable} {Path(__file__).parent / 'agent_program.py'}"
RUNS = 50
KILL_AFTER = 8
"""Runs stored before the collection is killed."""


def _stored(db: Path) -> int:
    """Runs of ``col`` in ``db``, by a plain SQLite reader: opening a ``TrajectoryStore``
    prepares the file (tables, migrations) and may wait on the collection's writes, and a
    ``mode=ro`` connection to a WAL file being written failed on a loaded machine, which read as
    "nothing stored" until the collection had ended."""
    if not db.exists():
        return 0
    with closing(sqlite3.connect(db, timeout=30)) as conn:
        try:
            query = "SELECT count(*) FROM trajectories WHERE run_id = ?"
            return int(conn.execute(query, ("col",)).fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):  # the collection has not made its tables yet
                raise
            return 0


def _kill_mid_way(
    db: Path, args: list[str], how: signal.Signals
) -> subprocess.CompletedProcess[str]:
    """Start ``trajforge collect`` and send it ``how`` once ``KILL_AFTER`` runs are stored."""
    source = str(Path(trajforge.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": source}
    process = subprocess.Popen(
        [sys.executable, "-m", "trajforge", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A disposition of "ignore" survives exec: where something in this test process left
        # SIGINT ignored, the collection ignored Ctrl-C and ran to its end (seen in the suite).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 600
    while _stored(db) < KILL_AFTER:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"fewer than {KILL_AFTER} runs stored in 600 s"
        time.sleep(0.05)
    assert process.poll() is None, "the collection ended before it could be killed"
    process.send_signal(how)
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_a_killed_collection_resumes_to_exactly_every_run(
    tmp_path: Path, how: signal.Signals, processes_with: Callable[[str], list[int]]
) -> None:
    marker = f"trajforge-resume-{uuid.uuid4().hex}"
    tasks_file = tmp_path / "tasks.jsonl"
    tasks = [
        Task(
            id=f"t{k:02d}",
            prompt=f"Add {k} and 1?",
            answer=k + 1,
            # A second a run: 50 runs four at a time outlast the kill by seconds on a fast CPU
            # (at 0.3 s a quiet machine finished them between the count and the signal).
            data={"sleep": 1.0, "max_tokens": 4},
        )
        for k in range(RUNS)
    ]
    tasks_file.write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    db = tmp_path / "c.db"
    # The marker rides on the program's command line, so its processes can be found.
    args = ["collect", "--agent", f"{AGENT} {marker}", "--tasks-file", str(tasks_file)]
    args += ["--model", "tiny", "--concurrency", "4", "--run", "col", "--store", str(db)]
    killed = _kill_mid_way(db, [*args, "--json"], how)
    cut_short = _stored(db)
    assert KILL_AFTER <= cut_short < RUNS, "the collection ended before it was killed"
    if how is signal.SIGINT:
        assert killed.returncode == 130, killed.stderr
        assert "trajforge collect --resume col" in killed.stderr
        assert processes_with(marker) == []  # the runs under way were stopped with it
    else:
        assert killed.returncode == -signal.SIGKILL

    resumed = CliRunner().invoke(app, ["collect", "--resume", "col", "--store", str(db), "--json"])
    assert resumed.exit_code == 0, resumed.output
    summary = json.loads(resumed.stdout)
    assert (summary["runs"], summary["resumed_from"]) == (RUNS, cut_short)
    with TrajectoryStore(db) as store:
        stored = store.query(run="col")
        assert store.completed_keys("col") == {(t.id, 0) for t in tasks}
    assert len(stored) == RUNS
    assert {t.task.id for t in stored} == {t.id for t in tasks}
