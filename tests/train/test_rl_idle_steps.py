"""A step whose every group scored alike trains nothing, and says so at once; the run's end says
how many such steps it made."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_helpers import small_rl_config, token_id_rubric

from trajforge.judge.scorer import FunctionScorer, Rubric
from trajforge.schema import EvaluatorKind, Trajectory
from trajforge.train.rl import RLTrainer


def same_reward(trajectory: Trajectory) -> float:
    return 1.0


@pytest.mark.parametrize("filter_zero_advantage", [False, True])
def test_steps_whose_groups_all_scored_alike_say_they_trained_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], filter_zero_advantage: bool
) -> None:
    rubric = Rubric([(FunctionScorer(same_reward, "same", EvaluatorKind.RULE), 1.0)])
    cfg = small_rl_config(tmp_path, steps=2, filter_zero_advantage=filter_zero_advantage)
    trainer = RLTrainer(cfg, rubric=rubric)
    history = trainer.train().history
    assert [h["zero_adv_frac"] for h in history] == [1.0, 1.0]
    trained = [h["trained_trajectories"] for h in history]
    assert trained == ([0.0, 0.0] if filter_zero_advantage else [4.0, 4.0])
    err = capsys.readouterr().err
    for step in (1, 2):
        line = next(x for x in err.splitlines() if x.startswith(f"rl step {step} trained nothing"))
        assert "all 2 groups" in line and "temperature" in line and "samples_per_group" in line
    assert "rl: 2 of 2 steps trained nothing (steps 1, 2)" in err
    assert trainer.idle.steps == [1, 2]


def test_a_step_with_a_signal_says_nothing_of_the_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = RLTrainer(small_rl_config(tmp_path, samples_per_group=3), rubric=token_id_rubric())
    (metrics,) = trainer.train().history
    assert metrics["zero_adv_frac"] < 1.0
    assert "trained nothing" not in capsys.readouterr().err
    assert trainer.idle.steps == []
