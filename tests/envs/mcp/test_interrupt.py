"""Ctrl-C on ``trajforge rollout`` stops every MCP server its episodes started, and their children."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

import trajforge

TRAJFORGE = str(Path(sys.executable).with_name("trajforge"))
FACTORY = f"{Path(__file__).with_name('flaky_env.py')}:hanging_env"


def marked(mark: str) -> list[psutil.Process]:
    """Live processes (anywhere, orphans too) whose environment carries ``FLAKY_MARK=mark``."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get("FLAKY_MARK") == mark and process.status() != "zombie":
                found.append(process)
    return found


@pytest.mark.timeout(120)
def test_ctrl_c_leaves_no_server_and_no_child_of_one(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    args = ["rollout", "--env", FACTORY, "--model", "expert", "--tasks", "4"]
    process = subprocess.Popen(
        [TRAJFORGE, *args, "--store", str(tmp_path / "t.db")],
        env={
            **os.environ,
            "PYTHONPATH": str(Path(trajforge.__file__).parents[1]),
            "MARK_SERVERS": mark,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 90
        # 4 servers, each with the child it spawned, all hanging in a call.
        while len(marked(mark)) < 8:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, f"only {len(marked(mark))} of 8 processes up"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 130, stderr
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    deadline = time.monotonic() + 10
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marked(mark) == []
