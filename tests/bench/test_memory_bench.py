"""bench/memory.py --quick end to end: the calculator job on the tiny model, its held-out eval
without and with a memory of the SFT weights' own episodes, and a rerun that makes nothing
again."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench_run import result_of, run_bench


def _run(out: Path) -> subprocess.CompletedProcess[str]:
    return run_bench("memory.py", "--quick", "--seeds", "0", "--out", str(out))


@pytest.mark.slow
def test_quick_run_compares_with_and_without_memory_and_resumes(tmp_path: Path) -> None:
    result = result_of(_run(tmp_path))
    assert (result["bench"], result["seeds"], result["experience_tasks"]) == ("memory", [0], 4)
    for arm in ("without", "with"):
        (rate,) = result[arm]["per_seed"]
        assert 0.0 <= rate <= 1.0
    assert "ratio" in result
    run = tmp_path / "calculator-s0"
    items = (run / "memory" / "memory.jsonl").read_text().splitlines()
    assert len(items) == 4  # one item per experience episode
    stages = {s["name"]: s for s in json.loads((run / "results.json").read_text())["stages"]}
    assert stages["with_memory"]["status"] == "done"
    assert stages["with_memory"]["summary"]["episodes"] == 8
    # Every stage is found done the second time: nothing is made again.
    again = _run(tmp_path)
    assert "with_memory: done, unchanged" in again.stdout + again.stderr
    assert "experience done in" not in again.stdout + again.stderr
