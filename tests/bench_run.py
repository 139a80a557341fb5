"""A bench script run as a user runs it: in a process of its own, with trajforge from this
checkout, its exit code checked and its last line read as the bench's JSON result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def run_bench(script: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``bench/<script> args``, finished with exit code 0 (else the test fails on its stderr)."""
    env = {**os.environ, "PYTHONPATH": str(BENCH_DIR.parent / "src")}
    done = subprocess.run(
        [sys.executable, str(BENCH_DIR / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def result_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one JSON line a bench ends with."""
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
