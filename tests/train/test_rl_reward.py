"""One reward figure: what RL trains an episode on is what the viewer's advantages read."""

from __future__ import annotations

import pytest

from trajforge.schema import (
    Evaluator,
    EvaluatorKind,
    Message,
    Outcome,
    Role,
    Score,
    Task,
    Trajectory,
)
from trajforge.train.rl import advantage_input, episode_reward
from trajforge.train.rl.advantages import REWARD, reward_score
from trajforge.viewer.advantages import group_advantages


def _episode(outcome: float | None, *scores: Score) -> Trajectory:
    messages = [Message(role=Role.USER, content="2+2?"), Message(role=Role.ASSISTANT, content="4")]
    return Trajectory(
        task=Task(id="t", prompt="2+2?"),
        messages=messages,
        group_id="g",
        outcome=Outcome(reward=outcome),
        scores=list(scores),
    )


def test_the_recorded_rubric_total_wins_over_the_outcome_reward() -> None:
    other = Score(name="judge", value=0.3, evaluator=Evaluator(kind=EvaluatorKind.LLM))
    assert episode_reward(_episode(1.0)) == 1.0
    assert episode_reward(_episode(None)) == 0.0
    assert episode_reward(_episode(1.0, other)) == 1.0  # another score is not the reward
    assert episode_reward(_episode(1.0, reward_score(0.25), other)) == 0.25
    failed = Score(
        name=REWARD, error="scorer failed", evaluator=Evaluator(kind=EvaluatorKind.METRIC)
    )
    assert episode_reward(_episode(1.0, failed)) == 0.0  # a failed score counts 0


def test_the_viewer_ranks_a_group_by_the_reward_rl_trained_on() -> None:
    # The env said 1 then 0; the rubric RL trained with said the opposite.
    group = [_episode(1.0, reward_score(0.0)), _episode(0.0, reward_score(1.0))]
    assert advantage_input(group).rewards.tolist() == [0.0, 1.0]
    rows = group_advantages(group, "grpo")["trajectories"]
    assert rows[0]["mean"] < 0 < rows[1]["mean"]
    assert rows[1]["mean"] == pytest.approx(-rows[0]["mean"])
