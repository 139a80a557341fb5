"""What a browser benchmark gives the browser env: its tasks, the viewport its pages are made
for, and per episode the goal and the benchmark's own verdict (done, reward)."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from trajforge.envs.browser.session import PageSession, Viewport
from trajforge.envs.taskset import TEST, TRAIN
from trajforge.schema import Task

# Test seeds lie apart from training seeds, so no seed is ever in both splits.
SPLIT_SEED_BASE = {TRAIN: 0, TEST: 1_000_000_000}
SEEDS_PER_SPLIT = 1_000_000_000


@dataclass(frozen=True)
class EpisodeStatus:
    """The benchmark's verdict so far: ``reward`` is its own, 0 until ``done``."""

    done: bool
    reward: float
    reason: Any = None


class Episode(ABC):
    """One started episode of a benchmark task."""

    goal: str
    reached: dict[str, Any] | None = None
    """The page state the episode reached, when it records one (``pagestate``)."""

    @abstractmethod
    def status(self, session: PageSession) -> EpisodeStatus:
        """Whether the task is over and its reward (read from the page)."""

    def final(self, session: PageSession) -> EpisodeStatus:
        """The verdict when the agent ends the episode (``done``, or a reply without an
        action): by default the benchmark's ``status``."""
        return self.status(session)


class Benchmark(ABC):
    """A family of browser tasks."""

    name: str
    viewport: Viewport

    @abstractmethod
    def tasks(self, n: int, seed: int, split: str) -> list[Task]:
        """``n`` tasks of ``split``, deterministic in ``seed``."""

    @abstractmethod
    def start(self, session: PageSession, task: Task) -> Episode:
        """Open ``task``'s page in ``session`` and start its episode (on the slot's thread)."""


def seeded_tasks(env: str, names: tuple[str, ...], n: int, seed: int, split: str) -> list[Task]:
    """``n`` tasks cycling over ``names``, each with a page seed drawn from ``split``'s range."""
    rng = random.Random(f"{env}/{split}/{seed}")
    seeds = rng.sample(range(SEEDS_PER_SPLIT), n)
    tasks = []
    for i, page_seed in enumerate(seeds):
        name = names[i % len(names)]
        page_seed += SPLIT_SEED_BASE[split]
        tasks.append(
            Task(
                id=f"{name}/{page_seed}",
                prompt=f"{name} (seed {page_seed})",
                env=env,
                data={"task": name, "seed": page_seed},
                split=split,
            )
        )
    return tasks
