"""bench/credit_assignment.py leaves no process behind: a bench killed while its arms run takes
its pool workers with it (they would otherwise play their arms out as orphans)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "credit_assignment.py"


def _pool_workers(bench: psutil.Process) -> list[psutil.Process]:
    workers = []
    for child in bench.children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                workers.append(child)
        except psutil.NoSuchProcess:
            continue
    return workers


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_bench_takes_its_arm_workers_with_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1] / "src")}
    args = ["--model", "tiny", "--seeds", "0", "1", "--jobs", "2", "--out", str(tmp_path)]
    proc = subprocess.Popen(
        [sys.executable, str(BENCH), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    bench = psutil.Process(proc.pid)
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 240
        # The pool starts once the SFT prefix is done; an arm's run folder means work is under way.
        while time.monotonic() < deadline and proc.poll() is None:
            workers = _pool_workers(bench)
            if len(workers) == 2 and any(tmp_path.glob("*-grpo-s*")):
                break
            time.sleep(0.2)
        assert len(workers) == 2, "the bench never ran two arm workers"
        proc.kill()
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(workers, timeout=15)
        assert not alive, f"workers left running after the bench died: {[p.pid for p in alive]}"
        assert len(gone) == 2
    finally:
        for p in [bench, *workers]:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
