"""bench/recovery.py end to end on the tiny model: both arms through the pipeline, every figure
with its interval, and the headline JSON line last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "recovery.py"
SMALL = [
    "model=tiny",
    "eval.tasks=3",
    "eval.max_turns=2",
    "eval.max_new_tokens=40",
    "stages.demonstrations.tasks=8",
    "stages.failures.tasks=4",
    "stages.endings.tasks=4",
    "stages.sft.train.data.limit=8",
    "stages.sft.train.batch_size=4",
    "stages.sft.train.tensorboard=false",
]


@pytest.mark.slow
def test_both_arms_run_and_the_ratio_is_recovery_with_repairs_over_without(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1] / "src")}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--seeds", "1", "--out", str(tmp_path), *SMALL],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    runs = {r["arm"]: r for r in result["recovery_runs"]}
    assert set(runs) == {"clean", "repair"}
    for run in runs.values():
        assert run["repairs"] == 4
        assert run["clean"]["of"] == run["recovery"]["of"] == 3
    for key in ("clean_clean", "clean_recovery", "repair_clean", "repair_recovery"):
        mean, low, high = result[key]
        assert low <= mean <= high
    before, after = result["clean_recovery"][0], result["repair_recovery"][0]
    assert result["ratio"] == (round(after / before, 3) if before else None)
    # The clean arm trained on the demonstrations alone, the repair arm on the repairs first.
    results = json.loads((tmp_path / "seed0" / "recovery_repair" / "results.json").read_text())
    sft = next(s for s in results["stages"] if s["name"] == "sft")
    assert sft["config"]["train"]["data"]["run"] == [
        "recovery_repair.repair",
        "recovery_repair.demonstrations",
    ]
