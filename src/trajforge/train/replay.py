"""Replay of past successes for RL groups in which every sample failed."""

from __future__ import annotations

from collections.abc import Sequence

from trajforge.schema import Trajectory


class ReplayBuffer:
    """Past successes per task, to put back into groups where every sample failed."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.items: list[Trajectory] = []

    def add(self, trajs: Sequence[Trajectory]) -> None:
        self.items.extend(trajs)
        self.items = self.items[-self.max_size :]

    def for_task(self, task_id: str) -> Trajectory | None:
        for t in reversed(self.items):
            if t.task.id == task_id:
                return t
        return None
