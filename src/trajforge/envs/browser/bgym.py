"""BrowserGym tasks (``browsergym:miniwob.click-test``): BrowserGym's own task classes set up
and judge the episode on our pooled page (its ``setup(page)`` and ``validate(page, chat)``),
with its reward; the page tree and the actions are the browser env's own, so every benchmark
looks alike to a policy.

A task id's first part names BrowserGym's package (``miniwob`` -> ``browsergym.miniwob``),
whose ``ALL_MINIWOB_TASKS`` lists its task classes. MiniWoB++ tasks are given the
``miniwob`` package's pages as their base URL (what BrowserGym reads from ``MINIWOB_URL``).
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from typing import Any

from trajforge.envs.browser.benchmark import Benchmark, Episode, EpisodeStatus, seeded_tasks
from trajforge.envs.browser.miniwob import html_dir
from trajforge.envs.browser.session import PageSession, Viewport
from trajforge.errors import ConfigError
from trajforge.schema import Task

PREFIX = "browsergym:"
MINIWOB_FAMILY = "miniwob."


def _task_class(task_id: str) -> type[Any]:
    """BrowserGym's class for ``task_id``, from its family's list of tasks."""
    family = task_id.split(".", 1)[0]
    try:
        module = importlib.import_module(f"browsergym.{family}")
    except ImportError as exc:
        raise ConfigError(
            f"browsergym: task {task_id!r} needs browsergym-{family} "
            f"(pip install 'trajforge[web]'): {exc}"
        ) from exc
    listed = getattr(module, f"ALL_{family.upper()}_TASKS", None)
    if listed is None:
        raise ConfigError(
            f"browsergym: browsergym.{family} lists no tasks (ALL_{family.upper()}_TASKS); "
            "tasks of families that need their own servers are not supported"
        )
    classes = {cls.get_task_id(): cls for cls in listed}
    if task_id not in classes:
        close = difflib.get_close_matches(task_id, list(classes), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"browsergym: no task {task_id!r} in browsergym.{family}{hint}")
    return classes[task_id]


class BrowserGymEpisode(Episode):
    def __init__(self, task: Any, goal: str) -> None:
        self.task = task
        self.goal = goal

    def status(self, session: PageSession) -> EpisodeStatus:
        reward, done, _message, info = self.task.validate(session.page, [])
        return EpisodeStatus(bool(done), float(reward), info.get("REWARD_REASON"))


@dataclass
class BrowserGym(Benchmark):
    """BrowserGym tasks ``ids`` (``miniwob.click-test``, ...), seeded per episode."""

    ids: tuple[str, ...]

    def __post_init__(self) -> None:
        self._classes = {task_id: _task_class(task_id) for task_id in self.ids}
        self.name = PREFIX + ",".join(self.ids)
        viewports = {(v["width"], v["height"]) for v in map(self._viewport, self.ids)}
        if len(viewports) > 1:
            raise ConfigError(f"browsergym: {self.name} mixes tasks of different page sizes")
        self.viewport = Viewport(*viewports.pop())

    def _make(self, task_id: str, seed: int) -> Any:
        cls = self._classes[task_id]
        if task_id.startswith(MINIWOB_FAMILY):
            return cls(seed=seed, base_url=html_dir().as_uri() + "/")
        return cls(seed=seed)

    def _viewport(self, task_id: str) -> dict[str, int]:
        viewport: dict[str, int] = self._make(task_id, 0).viewport
        return viewport

    def tasks(self, n: int, seed: int, split: str) -> list[Task]:
        return seeded_tasks(self.name, self.ids, n, seed, split)

    def start(self, session: PageSession, task: Task) -> Episode:
        bg_task = self._make(task.data["task"], int(task.data["seed"]))
        goal, _info = bg_task.setup(session.page)
        return BrowserGymEpisode(bg_task, str(goal))
