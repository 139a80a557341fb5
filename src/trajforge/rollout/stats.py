"""Running figures of a rollout: counts and sums over the episodes it has finished so far."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from trajforge.schema import OutcomeStatus, Trajectory


@dataclass
class RolloutStats:
    """Counts and sums over the trajectories a run has finished so far."""

    total: int
    done: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    reward_sum: float = 0.0
    rewarded: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    turns: int = 0
    tool_calls: int = 0
    started: float = field(default_factory=time.monotonic)

    def add(self, traj: Trajectory) -> None:
        self.done += 1
        self.statuses[traj.outcome.status.value] += 1
        if traj.outcome.reward is not None:
            self.reward_sum += traj.outcome.reward
            self.rewarded += 1
        self.completion_tokens += traj.usage.completion_tokens
        self.prompt_tokens += traj.usage.prompt_tokens
        self.turns += traj.usage.turns
        self.tool_calls += traj.usage.tool_calls

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def tokens_per_s(self) -> float:
        elapsed = self.elapsed_s
        return self.completion_tokens / elapsed if elapsed > 0 else 0.0

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None

    @property
    def errors(self) -> int:
        return self.statuses[OutcomeStatus.ERROR.value]

    def as_dict(self) -> dict[str, Any]:
        return {
            "episodes": self.done,
            "requested": self.total,
            "statuses": {s.value: self.statuses[s.value] for s in OutcomeStatus},
            "mean_reward": self.mean_reward,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens": self.prompt_tokens,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "wall_time_s": round(self.elapsed_s, 3),
            "tokens_per_s": round(self.tokens_per_s, 2),
        }
