"""Which episode of a run: the key every rollout phase and store row is addressed by."""

from __future__ import annotations

from dataclasses import dataclass

from trajforge.schema import Task


@dataclass(frozen=True)
class EpisodeKey:
    """Which episode of a run: the task (and its position in the task list) and the sample."""

    task_index: int
    task: Task
    sample_index: int

    @property
    def store_key(self) -> tuple[str, int]:
        return (self.task.id, self.sample_index)
