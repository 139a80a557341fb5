"""bench/self_play.py: a game with fewer held-out tasks than asked fails before any training; a
micro run with the SFT on every token and GiGPO's credit goes through."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "self_play.py"


def test_too_many_held_out_games_fail_before_training(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1] / "src")}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--micro", "--env", "tictactoe", "--eval", "200",
         "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "could only generate 130 distinct test tasks of the 200 asked for" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no demonstrations, no SFT


@pytest.mark.slow
def test_a_micro_run_learns_the_views_and_takes_step_level_credit(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1] / "src")}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--micro", "--env", "nim", "--sft-on", "all",
         "--credit", "gigpo", "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=600, check=True,
    )  # fmt: skip
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert (line["sft_on"], line["credit"], line["env"]) == ("all", "gigpo", "nim")
    assert 0.0 <= line["win_after"] <= 1.0
    metrics = [json.loads(row) for row in (tmp_path / "rl" / "metrics.jsonl").open()]
    # GiGPO's step-level groups: the same pile and mover recur among a task's samples.
    assert all("anchor_step_frac" in m for m in metrics)
