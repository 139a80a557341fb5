"""RL's success rate is ``schema.is_success``: a rewarded episode that was cut short is not a
success, as in eval, stats and the viewer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from train_helpers import small_rl_config

from trajforge.judge.scorer import FunctionScorer, Rubric
from trajforge.schema import EvaluatorKind, OutcomeStatus, Trajectory
from trajforge.train.rl import RLTrainer
from trajforge.train.rl import update as rl_update


def full_reward(trajectory: Trajectory) -> float:
    return 1.0


def test_rl_success_rate_leaves_out_rewarded_episodes_that_were_cut_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rubric = Rubric([(FunctionScorer(full_reward, "full", EvaluatorKind.RULE), 1.0)])
    trainer = RLTrainer(small_rl_config(tmp_path), rubric=rubric)
    episodes = trainer._episodes

    async def one_cut_short(step: int, tasks: list[object], *rest: Any) -> list[Trajectory]:
        trajs = await episodes(step, tasks, *rest)
        statuses = [OutcomeStatus.TRUNCATED] + [OutcomeStatus.OK] * (len(trajs) - 1)
        for t, status in zip(trajs, statuses, strict=True):
            t.outcome = t.outcome.model_copy(update={"status": status, "reward": 1.0})
        return trajs

    monkeypatch.setattr(trainer, "_episodes", one_cut_short)
    monkeypatch.setattr(rl_update, "optimize", lambda *args: {})
    (metrics,) = trainer.train().history
    assert metrics["reward_mean"] == pytest.approx(1.0)  # the reward is the reward
    assert metrics["success_rate"] == pytest.approx(3 / 4)  # the cut-off one is no success
