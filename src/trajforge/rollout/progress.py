"""A Rich progress bar of a rollout, as a hook: episodes done, tokens/s, mean reward, errors."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from trajforge.rollout.hooks import RolloutHook, RolloutRun
from trajforge.rollout.stats import RolloutStats
from trajforge.schema import Trajectory


class RolloutProgress(RolloutHook):
    """Shows the episodes a rollout still has to run, on ``console`` (default: stderr).

    Args:
        console: Where the bar is drawn.
        transient: Remove the bar when the rollout ends.
    """

    def __init__(self, console: Console | None = None, transient: bool = False) -> None:
        self._progress = Progress(
            TextColumn("[bold]rollout"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[figures]}"),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
            transient=transient,
        )
        self._task: TaskID | None = None

    def on_rollout_start(self, run: RolloutRun) -> None:
        self._task = self._progress.add_task("rollout", total=run.stats.total, figures="")
        self._progress.start()
        self._show(run.stats)

    def on_episode_end(self, run: RolloutRun, trajectory: Trajectory) -> None:
        self._show(run.stats)

    def on_rollout_end(self, run: RolloutRun) -> None:
        self._progress.stop()

    def _show(self, stats: RolloutStats) -> None:
        if self._task is None:
            return
        reward = stats.mean_reward
        shown = "-" if reward is None else f"{reward:.3f}"
        figures = f"{stats.tokens_per_s:7.1f} tok/s  reward {shown}  errors {stats.errors}"
        self._progress.update(self._task, completed=stats.done, figures=figures)
