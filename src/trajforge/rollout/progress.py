"""Running figures of a rollout and a Rich progress display of them."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trajforge.schema import OutcomeStatus, Trajectory


@dataclass
class RolloutStats:
    """Counts and sums over the trajectories a run has finished so far."""

    total: int
    done: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    reward_sum: float = 0.0
    rewarded: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    turns: int = 0
    tool_calls: int = 0
    started: float = field(default_factory=time.monotonic)

    def add(self, traj: Trajectory) -> None:
        self.done += 1
        self.statuses[traj.outcome.status.value] += 1
        if traj.outcome.reward is not None:
            self.reward_sum += traj.outcome.reward
            self.rewarded += 1
        self.completion_tokens += traj.usage.completion_tokens
        self.prompt_tokens += traj.usage.prompt_tokens
        self.turns += traj.usage.turns
        self.tool_calls += traj.usage.tool_calls

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def tokens_per_s(self) -> float:
        elapsed = self.elapsed_s
        return self.completion_tokens / elapsed if elapsed > 0 else 0.0

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None

    @property
    def errors(self) -> int:
        return self.statuses[OutcomeStatus.ERROR.value]

    def as_dict(self) -> dict[str, Any]:
        return {
            "episodes": self.done,
            "requested": self.total,
            "statuses": {s.value: self.statuses[s.value] for s in OutcomeStatus},
            "mean_reward": self.mean_reward,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens": self.prompt_tokens,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "wall_time_s": round(self.elapsed_s, 3),
            "tokens_per_s": round(self.tokens_per_s, 2),
        }

    def table(self, title: str = "rollout") -> Table:
        """A summary table of the run."""
        table = Table(title=title)
        table.add_column("metric")
        table.add_column("value", justify="right")
        reward = self.mean_reward
        rows = [
            ("episodes", f"{self.done}/{self.total}"),
            *((f"status {s.value}", str(self.statuses[s.value])) for s in OutcomeStatus),
            ("mean reward", "-" if reward is None else f"{reward:.3f}"),
            ("turns", str(self.turns)),
            ("tool calls", str(self.tool_calls)),
            ("completion tokens", str(self.completion_tokens)),
            ("tokens/s", f"{self.tokens_per_s:.1f}"),
            ("wall time", f"{self.elapsed_s:.1f} s"),
        ]
        for name, value in rows:
            table.add_row(name, value)
        return table


class RolloutProgress:
    """A Rich progress bar showing episodes done, tokens/s, mean reward and errors."""

    def __init__(
        self, stats: RolloutStats, console: Console | None = None, transient: bool = False
    ) -> None:
        self.stats = stats
        self._progress = Progress(
            TextColumn("[bold]rollout"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[figures]}"),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
            transient=transient,
        )
        self._task = self._progress.add_task("rollout", total=stats.total, figures="")

    def __enter__(self) -> RolloutProgress:
        self._progress.start()
        self._progress.update(self._task, completed=self.stats.done, figures=self._figures())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()

    def _figures(self) -> str:
        reward = self.stats.mean_reward
        shown = "-" if reward is None else f"{reward:.3f}"
        return f"{self.stats.tokens_per_s:7.1f} tok/s  reward {shown}  errors {self.stats.errors}"

    def update(self) -> None:
        self._progress.update(self._task, completed=self.stats.done, figures=self._figures())
