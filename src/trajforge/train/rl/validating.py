"""An RL run's validation: greedy episodes on held-out tasks before the first step, every
``validation.every`` steps and after the last, each giving a ``ValidationPoint``; where
``keep_best`` asks, the best weights are kept and restored at the end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from trajforge.envs import EnvEntry
from trajforge.judge import Evaluation
from trajforge.schema import Task
from trajforge.train.config import RLConfig
from trajforge.train.validation import (
    BestWeights,
    ValidationPoint,
    validation_point,
    validation_tasks,
)


class RunValidation:
    """The validation tasks of a run (none: it never validates), its points so far and the
    best weights kept."""

    def __init__(self, cfg: RLConfig, entry: EnvEntry, avoid: list[Task]) -> None:
        self.cfg = cfg
        self.tasks = (
            validation_tasks(entry, cfg.validation, split=cfg.task_split, avoid=avoid)
            if cfg.validation.tasks
            else []
        )
        self.points: list[ValidationPoint] = []
        self.best: BestWeights | None = None

    def keep_best(self, model: nn.Module) -> None:
        """Keep the best weights of ``model`` where the config asks."""
        if self.tasks and self.cfg.validation.keep_best:
            self.best = BestWeights(model, self.cfg.validation.keep_best_by)

    def due(self, step: int) -> bool:
        every = self.cfg.validation.every
        last = step == self.cfg.steps
        return bool(self.tasks) and (last or (every > 0 and step % every == 0))

    def resumed_at(self, start: int) -> bool:
        """Whether the weights at ``start`` were validated before the run was interrupted (then
        offered to the best kept again)."""
        if not self.points or self.points[-1].step != start:
            return False
        if self.best is not None:
            self.best.offer(self.points[-1])
        return True

    def run(self, step: int, episodes: Callable[[], Evaluation]) -> ValidationPoint:
        """The point of ``episodes``, played at ``step``; the best kept."""
        point = validation_point(step, episodes())
        self.points.append(point)
        if self.best is not None:
            self.best.offer(point)
        return point

    def restore_best(self) -> None:
        """Load the best weights validated where they are not the last."""
        if self.best is not None and self.best.best is not self.points[-1]:
            self.best.restore()

    def kept_step(self) -> int | None:
        """The step whose weights the run ends on where it keeps the best (``None``: it does
        not)."""
        if self.best is None or self.best.best is None:
            return None
        return self.best.best.step

    def state(self) -> list[dict[str, Any]]:
        return [p.as_dict() for p in self.points]

    def load_state(self, state: list[dict[str, Any]]) -> None:
        self.points = [ValidationPoint(**p) for p in state]
