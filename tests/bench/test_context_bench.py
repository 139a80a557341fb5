"""bench/context.py --quick end to end: the tiny model through demonstrations (whole and folding),
SFT, every arm's held-out eval and the fold arm's RL; no forward held more than its arm's budget,
and the budget is below an expert episode's full history."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "context.py"
ARMS = {"cut", "keep_last", "summary", "fold_sft", "fold_rl"}


@pytest.mark.slow
def test_quick_preset_keeps_every_forward_within_its_budget(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1] / "src")}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--seeds", "0", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["bench"], result["model"], result["seeds"]) == ("context", "tiny", [0])
    assert set(result["arms"]) == ARMS
    assert result["budget"] < result["expert_history_tokens"]["max"]
    assert result["fold_budget"] > result["budget"]  # the fold tool's description is paid for
    for name, arm in result["arms"].items():
        assert 0 < arm["max_prompt_tokens"] <= arm["budget"], name
        low, high = arm["seeds"]["ci95"]
        assert low <= arm["seeds"]["mean"] <= high
        assert arm["pooled"]["n"] == result["tasks"]
    assert result["within_budget"] is True
    assert result["max_prompt_tokens"] <= result["fold_budget"]
    assert len(result["rl_curves"]["reward_mean"]) == 1
    assert sorted(p.name for p in (tmp_path / "evals").iterdir()) == sorted(
        f"{arm}-s0.json" for arm in ARMS
    )
