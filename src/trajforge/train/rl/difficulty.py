"""Online difficulty filtering and a curriculum for RL over generated tasks.

With group-relative advantages a group whose samples all got the same reward (every one solved
the task, or none did) has advantage 0 everywhere: it costs its rollouts and teaches nothing,
and a step made mostly of such groups is a small, noisy step. Three parts, on under the RL
config's ``difficulty:``:

- Pass rates: each task's share of passing samples, an exponential moving average over the
  groups played on it, kept across steps and in the checkpoint.
- Dynamic sampling (DAPO, Yu et al. 2025; verl's ``filter_groups``, SkyRL's
  ``sample_full_batch``), ``refill``: the groups that scored alike are dropped from training and
  groups on new tasks are rolled out in their place, round after round, until
  ``groups_per_step`` groups with a spread are in hand or ``max_refills`` / ``max_extra_groups``
  stops it.
- A curriculum (after prime-rl's difficulty buffer and WebRL's self-evolving curriculum),
  ``band``: walking the task order, a task is taken when its pass rate lies in the band (an
  unseen one counts as in it); one outside is taken with probability ``explore``, so a task
  that got easy or hard is still tried now and then and its pass rate moves on.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trajforge.curate import by_group
from trajforge.schema import Task, Trajectory, is_success
from trajforge.train.rl.advantages import episode_reward
from trajforge.train.rl.settings import DifficultySettings

RollGroups = Callable[[int, int], list[Trajectory]]
"""``roll(round, groups)``: ``groups`` groups on new tasks, played and scored, for refill round
``round`` (1-based)."""


class PassRate(BaseModel):
    """One task's tracked pass rate and how many groups it has seen."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    rate: float = Field(ge=0, le=1)
    groups: int = Field(ge=1)


class Filtered(BaseModel):
    """What dynamic sampling did in one step: the groups it dropped, and its metrics."""

    dropped: set[str] = Field(default_factory=set)
    metrics: dict[str, float] = Field(default_factory=dict)


def alike_groups(trajs: Sequence[Trajectory]) -> set[str]:
    """The groups of ``trajs`` whose samples all got the same reward (``episode_reward``)."""
    alike = set()
    for key, group in by_group(trajs).items():
        rewards = [episode_reward(t) for t in group]
        if math.isclose(max(rewards), min(rewards), rel_tol=0, abs_tol=1e-9):
            alike.add(key)
    return alike


class Difficulty:
    """A run's pass rates, the curriculum's choice of tasks and the refilling of its steps.

    Args:
        settings: The config's ``difficulty`` (``None``: off; tasks are taken in order and
            nothing is tracked).
        seed: The run's seed (the curriculum's draws for tasks outside the band).
    """

    def __init__(self, settings: DifficultySettings | None, seed: int) -> None:
        self.settings = settings
        self.seed = seed
        self.rates: dict[str, PassRate] = {}
        self._taken = 0
        self._taken_in_band = 0

    def take(
        self, tasks: Sequence[Task], cursor: int, n: int, chosen: set[int]
    ) -> tuple[list[int], int]:
        """``n`` task indices walking the task order from ``cursor`` (a task in ``chosen`` is
        passed over until every task is; under a ``band``, one outside it is passed over unless
        drawn to explore, until a whole round of the order found too few); the new cursor.
        ``chosen`` gets the indices taken."""
        out: list[int] = []
        passed = 0
        while len(out) < n:
            index = cursor % len(tasks)
            cursor += 1
            if index in chosen and len(chosen) < len(tasks):
                continue
            in_band = self._in_band(tasks[index].id)
            if not in_band and passed < len(tasks) and not self._explore(cursor - 1):
                passed += 1
                continue
            chosen.add(index)
            out.append(index)
            self._taken += 1
            self._taken_in_band += in_band
        return out, cursor

    def _in_band(self, task_id: str) -> bool:
        if self.settings is None or self.settings.band is None:
            return True
        low, high = self.settings.band
        seen = self.rates.get(task_id)
        return seen is None or low <= seen.rate <= high

    def _explore(self, position: int) -> bool:
        """Whether the task at cursor ``position`` is taken although outside the band: a draw
        of its own, so a resumed run draws the same."""
        assert self.settings is not None  # only asked under a band
        draw = random.Random(self.seed * 1_000_003 + position).random()
        return draw < self.settings.explore

    def update(self, trajs: Sequence[Trajectory]) -> None:
        """Fold each group of ``trajs`` (scored) into its task's pass rate."""
        if self.settings is None:
            return
        alpha = self.settings.pass_rate_alpha
        for group in by_group(trajs).values():
            passed = [
                is_success(t.outcome.status, episode_reward(t), self.settings.pass_reward)
                for t in group
            ]
            share = sum(passed) / len(passed)
            task_id = group[0].task.id
            seen = self.rates.get(task_id)
            if seen is None:
                self.rates[task_id] = PassRate(task_id=task_id, rate=share, groups=1)
            else:
                seen.rate = (1 - alpha) * seen.rate + alpha * share
                seen.groups += 1

    def refill(self, trajs: list[Trajectory], groups_per_step: int, roll: RollGroups) -> Filtered:
        """Drop the groups of ``trajs`` that scored alike and extend ``trajs`` with ``roll``'s
        new groups until ``groups_per_step`` groups with a spread are in hand or a cap is
        reached (nothing dropped when ``refill`` is off)."""
        if self.settings is None or not self.settings.refill:
            return Filtered()
        dropped = alike_groups(trajs)
        kept = len(by_group(trajs)) - len(dropped)
        rounds = extra = 0
        cap = self.settings.max_extra_groups
        while kept < groups_per_step and rounds < self.settings.max_refills:
            wanted = groups_per_step - kept
            if cap is not None:
                wanted = min(wanted, cap - extra)
            if wanted <= 0:
                break
            rounds += 1
            new = roll(rounds, wanted)
            trajs.extend(new)
            extra += wanted
            alike = alike_groups(new)
            dropped |= alike
            kept += len(by_group(new)) - len(alike)
        return Filtered(
            dropped=dropped,
            metrics={
                "dropped_groups": float(len(dropped)),
                "refill_rounds": float(rounds),
                "refill_groups": float(extra),
                "refill_capped": float(kept < groups_per_step),
            },
        )

    def picked_metrics(self) -> dict[str, float]:
        """Under a ``band``, the share of the tasks taken since the last call that were in it
        (nothing when none was taken); the count starts again."""
        taken, in_band = self._taken, self._taken_in_band
        self._taken = self._taken_in_band = 0
        if self.settings is None or self.settings.band is None or not taken:
            return {}
        return {"band_tasks": in_band / taken}

    def metrics(self) -> dict[str, float]:
        """How many tasks have a pass rate, and their mean (nothing when off)."""
        if self.settings is None:
            return {}
        rates = [r.rate for r in self.rates.values()]
        return {
            "tracked_tasks": float(len(rates)),
            "pass_rate_mean": sum(rates) / len(rates) if rates else 0.0,
        }

    def state(self) -> list[dict[str, Any]]:
        """The pass rates, for a checkpoint's cursor."""
        return [r.model_dump() for r in self.rates.values()]

    def load_state(self, state: Sequence[dict[str, Any]]) -> None:
        self.rates = {r.task_id: r for r in map(PassRate.model_validate, state)}
