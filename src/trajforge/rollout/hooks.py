"""A rollout in progress (``RolloutRun``) and the hooks called around it.

The engine only runs episodes; everything else a run does hangs off hooks, as Agent Lightning's
``on_rollout_start``/``on_rollout_end`` do: ``StoreHook`` keeps the run's bookkeeping in a
``TrajectoryStore`` (its spec as the run's metadata, resume, every trajectory written as it
ends, the simulated user's side beside it) and ``RolloutProgress`` shows a progress bar.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trajforge.rollout.episode import EpisodeKey
from trajforge.rollout.seeding import new_run_id
from trajforge.rollout.spec import RolloutError, RolloutSpec, TaskSample
from trajforge.rollout.stats import RolloutStats
from trajforge.schema import Task, Trajectory

if TYPE_CHECKING:
    from trajforge.store import TrajectoryStore

StoreKey = tuple[str, int]
"""``(task.id, sample_index)``: an episode of a run, as the store knows it."""


@dataclass
class RolloutRun:
    """A rollout in progress: its spec (``run_id`` filled in), the episodes it asks for in
    task x sample order, those still to run, and its running figures."""

    spec: RolloutSpec
    run_id: str
    model: str
    keys: list[EpisodeKey]
    todo: list[EpisodeKey]
    stats: RolloutStats

    @classmethod
    def plan(cls, spec: RolloutSpec, tasks: Sequence[Task], model: str) -> RolloutRun:
        """Every task x sample of ``spec`` over ``tasks``, all still to run."""
        seen: dict[str, int] = {}
        for i, task in enumerate(tasks):
            if task.id in seen:
                raise RolloutError(f"tasks[{i}].id: {task.id!r} repeats tasks[{seen[task.id]}].id")
            seen[task.id] = i
        run_id = spec.run_id or new_run_id()
        keys = [EpisodeKey(i, task, s) for i, task in enumerate(tasks) for s in range(spec.n)]
        return cls(
            spec=spec.model_copy(update={"run_id": run_id}),
            run_id=run_id,
            model=model,
            keys=keys,
            todo=list(keys),
            stats=RolloutStats(total=len(keys)),
        )

    def skip(self, done: Collection[StoreKey]) -> None:
        """Leave out the episodes ``done`` names (those a resumed run has already)."""
        self.todo = [k for k in self.todo if k.store_key not in done]
        self.stats.total = len(self.todo)

    def sample_shortfall(self) -> str | None:
        """One line when the environment's split holds fewer tasks than the spec's sample asks
        for (all of them run), else ``None``."""
        sample = self.spec.tasks
        if not isinstance(sample, TaskSample):
            return None
        have = len({k.task.id for k in self.keys})
        if have >= sample.count:
            return None
        return (
            f"asked for {sample.count} tasks; the {sample.split} split of {self.spec.env} "
            f"has {have}, so {have} run"
        )

    @property
    def resumed(self) -> int:
        """Episodes of the run that were done before this rollout started."""
        return len(self.keys) - len(self.todo)


class RolloutHook:
    """Callbacks around a rollout; each does nothing unless a subclass overrides it.

    Hooks are called in the order given, after the store's own, so a resumed run's ``todo``
    is final by the time a caller's ``on_rollout_start`` sees it.
    """

    def on_rollout_start(self, run: RolloutRun) -> None:
        """Before the first episode starts; may ``run.skip`` episodes."""

    def on_episode_end(self, run: RolloutRun, trajectory: Trajectory) -> None:
        """An episode has ended (``run.stats`` counts it already)."""

    def on_linked_trajectory(self, run: RolloutRun, trajectory: Trajectory) -> None:
        """A trajectory recorded beside an episode's own (the simulated user's side, under
        its own run id), just before that episode's ``on_episode_end``; not in ``run.stats``."""

    def on_rollout_end(self, run: RolloutRun) -> None:
        """The rollout is over: every episode ended, or it was stopped (an error, Ctrl-C)."""


class StoreHook(RolloutHook):
    """A run's bookkeeping in ``store``: its spec as the run's metadata (unless the run has
    metadata already), resume (the (task, sample) pairs the store holds are skipped), and each
    trajectory written as its episode ends."""

    def __init__(self, store: TrajectoryStore) -> None:
        self.store = store

    def on_rollout_start(self, run: RolloutRun) -> None:
        if self.store.get_run(run.run_id) is None:
            meta = {"spec": run.spec.model_dump(mode="json"), "model": run.model}
            self.store.set_run(run.run_id, meta)
        run.skip(self.store.completed_keys(run.run_id))

    def on_episode_end(self, run: RolloutRun, trajectory: Trajectory) -> None:
        self.store.add(trajectory)

    def on_linked_trajectory(self, run: RolloutRun, trajectory: Trajectory) -> None:
        self.store.add(trajectory)

    def stored(self, run: RolloutRun, wanted: Collection[StoreKey]) -> dict[StoreKey, Trajectory]:
        """The run's stored trajectories of the ``wanted`` episodes."""
        found: dict[StoreKey, Trajectory] = {}
        for traj in self.store.query(run=run.run_id):
            # A trajectory linked to an episode (beside it under the run's id) has no sample.
            if traj.sample_index is None:
                continue
            key = (traj.task.id, traj.sample_index)
            if key in wanted:
                found[key] = traj
        return found
