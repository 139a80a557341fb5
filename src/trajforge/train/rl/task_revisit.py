"""Prioritized task revisits for RL over generated tasks.

After Prioritized Level Replay (Jiang, Grefenstette and Rocktäschel, 2021): in an environment
whose tasks are generated, a task the policy has not mastered yet is worth more rollouts than a
fresh one it already solves. Each step, a share of the groups come back to tasks seen before
whose group was not solved by every sample, the most learnable first. With group-relative
advantages the learnable signal of a group is the spread of its rewards, so the priority is the
group's reward standard deviation; a task no sample solved stays in the pool behind those (a
later policy may solve it sometimes). A task leaves the pool when every sample solves it or
after ``max_visits`` revisits; beyond ``capacity`` the lowest-priority entry is dropped.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trajforge.train.config import TaskRevisitSettings


class RevisitEntry(BaseModel):
    """One task in the pool: its latest group's reward spread and its revisits."""

    model_config = ConfigDict(extra="forbid")

    task_index: int = Field(ge=0)
    spread: float = Field(ge=0)
    visits: int = Field(default=0, ge=0)

    @property
    def priority(self) -> tuple[float, int, int]:
        """Sort key, best first: larger spread, fewer revisits, earlier task."""
        return (-self.spread, self.visits, self.task_index)


class TaskRevisits:
    """The pool of tasks to come back to, and the choice of which ones each step."""

    def __init__(self, settings: TaskRevisitSettings) -> None:
        self.settings = settings
        self.entries: dict[int, RevisitEntry] = {}

    def pick(self, groups: int) -> list[int]:
        """The task indices to revisit in a step of ``groups`` groups (a ``fraction`` of them,
        fewer if the pool is smaller), best priority first; each pick counts as a visit."""
        if not self.settings.enabled:
            return []
        wanted = round(self.settings.fraction * groups)
        chosen = sorted(self.entries.values(), key=lambda e: e.priority)[:wanted]
        for entry in chosen:
            entry.visits += 1
        return [entry.task_index for entry in chosen]

    def update(self, outcomes: Mapping[int, Sequence[float]]) -> None:
        """Record each task's group rewards from the latest step (task index -> rewards)."""
        if not self.settings.enabled:
            return
        for index, rewards in outcomes.items():
            solved = all(r >= self.settings.solved_reward for r in rewards)
            previous = self.entries.get(index)
            visits = previous.visits if previous is not None else 0
            if solved or visits >= self.settings.max_visits:
                self.entries.pop(index, None)
                continue
            self.entries[index] = RevisitEntry(
                task_index=index,
                spread=statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
                visits=visits,
            )
        overflow = len(self.entries) - self.settings.capacity
        if overflow > 0:
            for entry in sorted(self.entries.values(), key=lambda e: e.priority)[-overflow:]:
                del self.entries[entry.task_index]

    def state(self) -> list[dict[str, Any]]:
        """The pool, for a checkpoint's cursor."""
        return [e.model_dump() for e in self.entries.values()]

    def load_state(self, state: Sequence[dict[str, Any]]) -> None:
        self.entries = {e.task_index: e for e in map(RevisitEntry.model_validate, state)}

    def metrics(self, picked: int) -> dict[str, float]:
        return {"revisited_groups": float(picked), "revisit_pool": float(len(self.entries))}
