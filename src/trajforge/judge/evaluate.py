"""Evaluation summaries: success, mean reward with a 95% CI, pass@k and per-scorer means."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from trajforge.judge.process import process_metrics
from trajforge.judge.scorer import Scorer, score_trajectory
from trajforge.judge.stats import mean_ci95, mean_pass_at_k
from trajforge.schema import OutcomeStatus, Score, Trajectory


@dataclass
class EvalSummary:
    episodes: int
    tasks: int
    success: float
    reward_mean: float
    reward_ci_low: float
    reward_ci_high: float
    pass_at: dict[int, float]
    turns_mean: float
    tokens_mean: float
    tool_error_rate: float
    invalid_tool_call_rate: float
    status: dict[str, int]
    scores: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["pass_at"] = {str(k): v for k, v in self.pass_at.items()}
        return data


def is_success(trajectory: Trajectory, threshold: float = 1.0) -> bool:
    reward = trajectory.outcome.reward
    return (
        trajectory.outcome.status is OutcomeStatus.OK and reward is not None and reward >= threshold
    )


def summarize(
    trajectories: Sequence[Trajectory], *, ks: Sequence[int] = (1,), success_threshold: float = 1.0
) -> EvalSummary:
    """Summarise finished trajectories. A trajectory with no reward counts as reward 0, and an
    episode that did not end ``ok`` is never a success."""
    rewards = [t.outcome.reward or 0.0 for t in trajectories]
    ci = mean_ci95(rewards)
    successes = [(t.task.id, is_success(t, success_threshold)) for t in trajectories]
    per_task: dict[str, int] = defaultdict(int)
    for t in trajectories:
        per_task[t.task.id] += 1
    min_n = min(per_task.values(), default=0)
    metrics = [process_metrics(t) for t in trajectories]
    status: dict[str, int] = defaultdict(int)
    for t in trajectories:
        status[t.outcome.status.value] += 1
    score_values: dict[str, list[float]] = defaultdict(list)
    for t in trajectories:
        for s in t.scores:
            if s.value is not None:
                score_values[s.name].append(s.value)
    n = len(trajectories)
    return EvalSummary(
        episodes=n,
        tasks=len(per_task),
        success=sum(ok for _, ok in successes) / n if n else 0.0,
        reward_mean=ci.mean if n else 0.0,
        reward_ci_low=ci.low if n else 0.0,
        reward_ci_high=ci.high if n else 0.0,
        pass_at={k: mean_pass_at_k(successes, k) for k in ks if 0 < k <= min_n},
        turns_mean=sum(m.turns for m in metrics) / n if n else 0.0,
        tokens_mean=sum(m.tokens for m in metrics) / n if n else 0.0,
        tool_error_rate=sum(m.tool_error_rate for m in metrics) / n if n else 0.0,
        invalid_tool_call_rate=sum(m.invalid_tool_call_rate for m in metrics) / n if n else 0.0,
        status=dict(status),
        scores={k: sum(v) / len(v) for k, v in sorted(score_values.items())},
    )


async def score_all(trajectories: Sequence[Trajectory], scorers: list[Scorer]) -> list[Trajectory]:
    """Trajectories with the scorers' verdicts appended to their ``scores``."""
    scored = []
    for t in trajectories:
        new = await score_trajectory(t, scorers)
        scored.append(t.model_copy(update={"scores": [*t.scores, *new]}))
    return scored


class ScoreSink(Protocol):
    """Where new verdicts go (a ``TrajectoryStore``)."""

    def add_scores(self, traj_id: str, scores: Iterable[Score]) -> None: ...


async def score_into(
    sink: ScoreSink, trajectories: Sequence[Trajectory], scorers: list[Scorer]
) -> list[Trajectory]:
    """``score_all``, also appending each trajectory's new scores to ``sink``."""
    scored = await score_all(trajectories, scorers)
    for old, new in zip(trajectories, scored, strict=True):
        sink.add_scores(old.id, new.scores[len(old.scores) :])
    return scored
