"""Evaluation summaries: success, mean reward with a 95% CI, pass@k, pass^k and per-scorer
means."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from trajforge.judge.process import process_metrics
from trajforge.judge.scorer import Scorer, score_trajectory
from trajforge.judge.stats import (
    FailureSplit,
    mean_pass_at_k,
    mean_pass_hat_k,
    split_failures,
    summarize_rewards,
)
from trajforge.schema import (
    SUCCESS_THRESHOLD,
    Score,
    Trajectory,
    is_infra_failure,
    is_success,
)


@dataclass
class EvalSummary:
    """An evaluation's figures. ``success``, ``reward_mean`` and its interval follow
    ``RewardSummary``: the mean is over the ``scored`` episodes (``None`` when none was)."""

    episodes: int
    tasks: int
    scored: int
    success: float
    reward_mean: float | None
    reward_ci_low: float | None
    reward_ci_high: float | None
    pass_at: dict[int, float]
    turns_mean: float
    tokens_mean: float
    tool_error_rate: float
    invalid_tool_call_rate: float
    status: dict[str, int]
    # Per scorer: the mean of each trajectory's latest value, and how many have one.
    scores: dict[str, float] = field(default_factory=dict)
    scores_scored: dict[str, int] = field(default_factory=dict)
    # tau-bench's pass^k (all k samples of a task succeed), for the same k as pass@k.
    pass_hat: dict[int, float] = field(default_factory=dict)
    # The episodes that did not succeed: the policy's own failures, and those lost to the
    # infrastructure (a crashed server, a sandbox that did not start).
    policy_failures: int = 0
    infra_failures: int = 0

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["pass_at"] = {str(k): v for k, v in self.pass_at.items()}
        data["pass_hat"] = {str(k): v for k, v in self.pass_hat.items()}
        return data


def failure_split(
    trajectories: Iterable[Trajectory], threshold: float = SUCCESS_THRESHOLD
) -> FailureSplit:
    """The ``FailureSplit`` of trajectories."""
    return split_failures(
        ((t.outcome.status, t.outcome.reward, is_infra_failure(t)) for t in trajectories),
        threshold,
    )


def summarize(
    trajectories: Sequence[Trajectory],
    *,
    ks: Sequence[int] = (1,),
    success_threshold: float = SUCCESS_THRESHOLD,
    rewards: Sequence[float | None] | None = None,
) -> EvalSummary:
    """Summarise finished trajectories: success and mean reward as ``RewardSummary`` defines
    them, pass@k and pass^k, process metrics, and per scorer the mean of each trajectory's latest
    score. The reward of each is ``rewards`` when given (RL validation: its rubric totals), else
    its outcome's."""
    if rewards is None:
        rewards = [t.outcome.reward for t in trajectories]
    outcomes = [(t.outcome.status, r) for t, r in zip(trajectories, rewards, strict=True)]
    summary = summarize_rewards(outcomes, success_threshold)
    successes = [
        (t.task.id, is_success(status, r, success_threshold))
        for t, (status, r) in zip(trajectories, outcomes, strict=True)
    ]
    per_task: dict[str, int] = defaultdict(int)
    status: dict[str, int] = defaultdict(int)
    score_values: dict[str, list[float]] = defaultdict(list)
    for t in trajectories:
        per_task[t.task.id] += 1
        status[t.outcome.status.value] += 1
        for name in dict.fromkeys(s.name for s in t.scores):
            latest = t.score(name)
            values = score_values[name]  # a scorer that always failed is listed, unscored
            if latest is not None and latest.value is not None:
                values.append(latest.value)
    min_n = min(per_task.values(), default=0)
    metrics = [process_metrics(t) for t in trajectories]
    n = len(trajectories)
    ci_low, ci_high = summary.reward_ci
    failures = failure_split(trajectories, success_threshold)
    return EvalSummary(
        episodes=n,
        tasks=len(per_task),
        scored=summary.scored,
        success=summary.success,
        reward_mean=summary.reward_mean,
        reward_ci_low=ci_low,
        reward_ci_high=ci_high,
        pass_at={k: mean_pass_at_k(successes, k) for k in ks if 0 < k <= min_n},
        pass_hat={k: mean_pass_hat_k(successes, k) for k in ks if 0 < k <= min_n},
        turns_mean=sum(m.turns for m in metrics) / n if n else 0.0,
        tokens_mean=sum(m.tokens for m in metrics) / n if n else 0.0,
        tool_error_rate=sum(m.tool_error_rate for m in metrics) / n if n else 0.0,
        invalid_tool_call_rate=sum(m.invalid_tool_call_rate for m in metrics) / n if n else 0.0,
        status=dict(status),
        scores={k: sum(v) / len(v) for k, v in sorted(score_values.items()) if v},
        scores_scored={k: len(v) for k, v in sorted(score_values.items())},
        policy_failures=failures.policy,
        infra_failures=failures.infra,
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


async def score_missing_into(
    sink: ScoreSink, trajectories: Sequence[Trajectory], scorers: list[Scorer]
) -> list[Trajectory]:
    """``score_into`` with, for each trajectory, only the scorers it has no score from yet, so
    that finishing an interrupted evaluation does not score anything twice."""
    scored = []
    for t in trajectories:
        todo = [s for s in scorers if t.score(s.name) is None]
        scored.extend(await score_into(sink, [t], todo) if todo else [t])
    return scored
