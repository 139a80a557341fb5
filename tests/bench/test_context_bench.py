"""bench/context.py --quick end to end: the tiny model through demonstrations (whole and folding),
SFT, every arm's held-out eval and the fold arm's RL; no forward held more than its arm's budget,
and the budget is below an expert episode's full history."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_run import result_of, run_bench

ARMS = {"cut", "keep_last", "summary", "fold_sft", "fold_rl"}


@pytest.mark.slow
def test_quick_preset_keeps_every_forward_within_its_budget(tmp_path: Path) -> None:
    result = result_of(run_bench("context.py", "--quick", "--seeds", "0", "--out", str(tmp_path)))
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
