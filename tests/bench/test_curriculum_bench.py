"""bench/curriculum.py --quick: both arms end to end on the tiny model, and a rerun reads the
finished runs back instead of training them again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "curriculum.py"


def _run(out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1] / "src")}
    args = [sys.executable, str(BENCH), "--quick", "--seeds", "0", "--steps", "2", "--out", str(out)]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.mark.slow
def test_quick_run_prints_both_arms_and_a_rerun_reads_them_back(tmp_path: Path) -> None:
    first = _run(tmp_path)
    result = json.loads(first.stdout.strip().splitlines()[-1])
    assert set(result["arms"]) == {"plain", "difficulty"}
    for arm in result["arms"].values():
        (curve,) = arm["validation"]
        assert [step for step, _ in curve] == [0, 1, 2]  # validated before and after every step
    assert "tasks loaded" in first.stderr + first.stdout
    again = _run(tmp_path)
    assert "tasks loaded" not in again.stderr + again.stdout  # no RL run made again
    rerun = json.loads(again.stdout.strip().splitlines()[-1])
    assert rerun["arms"] == json.loads(json.dumps(result["arms"]))
