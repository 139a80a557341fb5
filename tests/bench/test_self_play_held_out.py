"""bench/self_play.py: a game with fewer held-out tasks than asked fails before any training."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
