"""Replay of past successes for RL groups in which every sample failed."""

from __future__ import annotations

from collections.abc import Sequence

from trajforge.curate import group_key
from trajforge.schema import Trajectory, is_success
from trajforge.train.rl.advantages import episode_reward
from trajforge.train.rl.settings import ReplaySettings


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

    def fill(self, trajs: list[Trajectory], rewards: list[float], settings: ReplaySettings) -> int:
        """Add a past success (and its reward) to each group of ``trajs`` where every sample
        failed, at most ``settings.per_step``; keep this step's successes. Returns how many
        were added."""
        solved = [
            is_success(t.outcome.status, r, settings.min_reward)
            for t, r in zip(trajs, rewards, strict=True)
        ]
        successes = [t for t, ok in zip(trajs, solved, strict=True) if ok]
        added = 0
        groups: dict[str, list[int]] = {}
        for i, t in enumerate(trajs):
            groups.setdefault(group_key(t), []).append(i)
        for idx in groups.values():
            if added >= settings.per_step or any(solved[i] for i in idx):
                continue
            past = self.for_task(trajs[idx[0]].task.id)
            if past is not None:
                trajs.append(past.model_copy(update={"group_id": trajs[idx[0]].group_id}))
                rewards.append(episode_reward(past))
                added += 1
        self.add(successes)
        return added
