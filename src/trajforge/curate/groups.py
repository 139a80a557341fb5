"""Group-level curation: best-of-group and preference pairs (highest vs lowest in a group)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from trajforge.curate.filters import trajectory_value
from trajforge.schema import Trajectory


class PreferencePair(BaseModel):
    """Two trajectories on the same task: ``chosen`` scored ``margin`` above ``rejected``."""

    model_config = ConfigDict(extra="forbid")

    chosen: Trajectory
    rejected: Trajectory
    margin: float

    @property
    def task_id(self) -> str:
        return self.chosen.task.id


def group_key(traj: Trajectory) -> str:
    """The group a trajectory belongs to: its ``group_id``, else its task id."""
    return traj.group_id or f"task:{traj.task.id}"


def by_group(trajs: Iterable[Trajectory]) -> dict[str, list[Trajectory]]:
    groups: dict[str, list[Trajectory]] = {}
    for t in trajs:
        groups.setdefault(group_key(t), []).append(t)
    return groups


def best_of_group(trajs: Iterable[Trajectory], *, score: str | None = None) -> list[Trajectory]:
    """The highest-valued trajectory of each group (first on ties); unscored ones are skipped."""
    best = []
    for members in by_group(trajs).values():
        scored = [(v, t) for t in members if (v := trajectory_value(t, score)) is not None]
        if scored:
            best.append(max(scored, key=lambda vt: vt[0])[1])
    return best


def preference_pairs(
    trajs: Iterable[Trajectory], *, score: str | None = None, min_margin: float = 0.0
) -> list[PreferencePair]:
    """One pair per group: the highest vs the lowest valued trajectory, if they differ by at
    least ``min_margin`` (and by more than zero) and share a task."""
    pairs = []
    for members in by_group(trajs).values():
        scored = [(v, t) for t in members if (v := trajectory_value(t, score)) is not None]
        if len(scored) < 2:
            continue
        hi_v, hi = max(scored, key=lambda vt: vt[0])
        lo_v, lo = min(scored, key=lambda vt: vt[0])
        margin = hi_v - lo_v
        if margin <= 0 or margin < min_margin or hi.task.id != lo.task.id:
            continue
        pairs.append(PreferencePair(chosen=hi, rejected=lo, margin=margin))
    return pairs


def why_no_pairs(trajs: Sequence[Trajectory], *, score: str | None = None) -> str:
    """Why ``preference_pairs`` finds no pair among ``trajs``: what a user reads after an
    export of 0 pairs."""
    if not trajs:
        return "no trajectory matches the filters"
    groups = by_group(trajs)
    values = [
        [v for t in members if (v := trajectory_value(t, score)) is not None]
        for members in groups.values()
    ]
    comparable = [vs for vs in values if len(vs) >= 2]
    what = f"score {score!r}" if score else "reward"
    if not comparable:
        return (
            f"no group of {len(groups)} holds two trajectories with a {what} (a pair is a group's "
            f"best and worst: sample several per task, e.g. rollout --n 4, and score them)"
        )
    return (
        f"in each of the {len(comparable)} groups with two or more trajectories with a {what}, "
        f"they all have the same {what}"
    )
