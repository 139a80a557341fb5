"""A Rich progress bar of a rollout, as a hook: episodes done, tokens/s, mean reward, errors
(plain progress lines where the console is not a terminal)."""

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

from trajforge.progress_lines import ProgressLines, draws_live
from trajforge.rollout.hooks import RolloutHook, RolloutRun
from trajforge.rollout.stats import RolloutStats
from trajforge.schema import Trajectory


class RolloutProgress(RolloutHook):
    """Shows the episodes a rollout still has to run, on ``console`` (default: stderr): a bar
    on a terminal, else a line at the first and last episode and at most one per 10 s.

    Args:
        console: Where the bar is drawn.
        transient: Remove the bar when the rollout ends.
    """

    def __init__(self, console: Console | None = None, transient: bool = False) -> None:
        self._console = console or Console(stderr=True)
        self._lines: ProgressLines | None = None
        self._progress = Progress(
            TextColumn("[bold]rollout"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[figures]}"),
            TimeElapsedColumn(),
            console=self._console,
            transient=transient,
        )
        self._task: TaskID | None = None

    def on_rollout_start(self, run: RolloutRun) -> None:
        if not draws_live(self._console):
            self._lines = ProgressLines(self._console, "rollout", run.stats.total, "episodes")
        else:
            self._task = self._progress.add_task("rollout", total=run.stats.total, figures="")
            self._progress.start()
        self._show(run.stats)

    def on_episode_end(self, run: RolloutRun, trajectory: Trajectory) -> None:
        self._show(run.stats)

    def on_rollout_end(self, run: RolloutRun) -> None:
        if self._lines is None:
            self._progress.stop()

    def _show(self, stats: RolloutStats) -> None:
        reward = stats.mean_reward
        shown = "-" if reward is None else f"{reward:.3f}"
        if self._lines is not None:
            self._lines.update(
                stats.done,
                f"{stats.tokens_per_s:.1f} tok/s, reward {shown}, errors {stats.errors}",
            )
        elif self._task is not None:
            figures = f"{stats.tokens_per_s:7.1f} tok/s  reward {shown}  errors {stats.errors}"
            self._progress.update(self._task, completed=stats.done, figures=figures)
