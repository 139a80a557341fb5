"""Validation inside an RL run: greedy episodes on training-split tasks the run never samples,
and the weights of the best-validated step (HF Trainer's ``load_best_model_at_end`` for an
on-policy loop).

A few RL steps on a policy that already solves most tasks can trade one kind of task for
another; greedy success on tasks apart from both the RL's prompts and the test split tells
whether the trade paid, without looking at the held-out tasks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from trajforge.envs import EnvEntry
from trajforge.errors import ConfigError
from trajforge.judge import Evaluation
from trajforge.schema import Task
from trajforge.train.config import ValidationMetric, ValidationSettings


@dataclass(frozen=True)
class ValidationPoint:
    """One validation: after ``step`` optimizer steps (0: the starting weights)."""

    step: int
    reward_mean: float
    success: float
    scored: int
    episodes: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def validation_tasks(
    entry: EnvEntry, settings: ValidationSettings, *, split: str, avoid: Sequence[Task]
) -> list[Task]:
    """``settings.tasks`` tasks of ``split`` drawn with ``settings.seed``, none of them in
    ``avoid`` (the RL's own tasks)."""
    taken = {t.id for t in avoid}
    drawn = entry.tasks(settings.tasks + len(taken), seed=settings.seed, split=split)
    chosen = [t for t in drawn if t.id not in taken][: settings.tasks]
    if len(chosen) < settings.tasks:
        raise ConfigError(
            f"validation.tasks: env {entry.name!r} has only {len(chosen)} {split} tasks apart "
            f"from the {len(taken)} the RL samples, {settings.tasks} asked for"
        )
    return chosen


def validation_point(step: int, evaluation: Evaluation) -> ValidationPoint:
    """Mean reward and success of the greedy validation episodes, as the eval recipe
    (``judge.evaluate`` with the RL's rubric) summarised them; ``scored``: how many carry an
    outcome reward."""
    summary = evaluation.summary
    if not summary.episodes:
        return ValidationPoint(step, math.nan, math.nan, 0, 0)
    assert summary.reward_mean is not None  # every episode has a rubric total
    return ValidationPoint(
        step=step,
        reward_mean=summary.reward_mean,
        success=summary.success,
        scored=sum(t.outcome.reward is not None for t in evaluation.trajectories),
        episodes=summary.episodes,
    )


class BestWeights:
    """A copy of a module's trainable parameters at its best validation so far."""

    def __init__(self, model: nn.Module, by: ValidationMetric = ValidationMetric.REWARD) -> None:
        self.model = model
        self.by = by
        self.best: ValidationPoint | None = None
        self._saved: dict[str, torch.Tensor] = {}

    def _rank(self, point: ValidationPoint) -> tuple[float, ...]:
        if self.by is ValidationMetric.SUCCESS:
            return (point.success, point.reward_mean)
        return (point.reward_mean,)

    def offer(self, point: ValidationPoint) -> bool:
        """Keep the current weights if ``point`` beats the best so far by ``by`` (ties keep
        the earlier: a step must improve on them); return whether it did."""
        if self.best is not None and self._rank(point) <= self._rank(self.best):
            return False
        self.best = point
        self._saved = {
            name: p.detach().clone() for name, p in self.model.named_parameters() if p.requires_grad
        }
        return True

    @torch.no_grad()
    def restore(self) -> None:
        """Put the kept parameters back into the module."""
        for name, p in self.model.named_parameters():
            if name in self._saved:
                p.copy_(self._saved[name])
