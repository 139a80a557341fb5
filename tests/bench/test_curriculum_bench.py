"""bench/curriculum.py --quick: both arms end to end on the tiny model, and a rerun reads the
finished runs back instead of training them again."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench_run import result_of, run_bench


def _run(out: Path) -> subprocess.CompletedProcess[str]:
    return run_bench("curriculum.py", "--quick", "--seeds", "0", "--steps", "2", "--out", str(out))


@pytest.mark.slow
def test_quick_run_prints_both_arms_and_a_rerun_reads_them_back(tmp_path: Path) -> None:
    first = _run(tmp_path)
    result = result_of(first)
    assert set(result["arms"]) == {"plain", "difficulty"}
    for arm in result["arms"].values():
        (curve,) = arm["validation"]
        assert [step for step, _ in curve] == [0, 1, 2]  # validated before and after every step
    assert "tasks loaded" in first.stderr + first.stdout
    again = _run(tmp_path)
    assert "tasks loaded" not in again.stderr + again.stdout  # no RL run made again
    rerun = result_of(again)
    assert rerun["arms"] == json.loads(json.dumps(result["arms"]))
