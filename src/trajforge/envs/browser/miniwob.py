"""MiniWoB++ tasks from the ``miniwob`` package's own HTML, driven through its own JS API.

As the package's ``SeleniumInstance`` does (without its Selenium layer): load the task's page,
seed its generator (``Math.seedrandom``), set the data mode, ``core.startEpisodeReal()``, wait
for ``WOB_TASK_READY``; the instruction is ``core.getUtterance()``; the episode is over when
``WOB_DONE_GLOBAL`` is set, its reward ``WOB_RAW_REWARD_GLOBAL`` (-1 to 1, not scaled by time).
As BrowserGym does, the episode's clock is set far out (a model thinking on a CPU is slow, and
MiniWoB's 10 s would make the reward a measure of the machine), and MiniWoB's own display (last
reward, time left, the instruction repeated) is hidden from the page tree.
"""

from __future__ import annotations

import difflib
import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from trajforge.envs.browser.benchmark import Benchmark, Episode, EpisodeStatus, seeded_tasks
from trajforge.envs.browser.pagestate import recorded
from trajforge.envs.browser.session import PageSession, Viewport
from trajforge.errors import ConfigError
from trajforge.schema import Task

PREFIX = "miniwob:"
# MiniWoB's window; the task itself is drawn in its top-left 160 x 210 pixels.
VIEWPORT = Viewport(160, 210)
EPISODE_MAX_TIME_MS = 1_000_000_000
DATA_MODE = "train"

_HIDE_DISPLAY = (
    "#reward-display, #click-canvas { display: none !important; } #query { visibility: hidden; }"
)

_START_JS = """
([seed, mode, maxTime]) => {
  Math.seedrandom(seed);
  core.setDataMode(mode);
  core.EPISODE_MAX_TIME = maxTime;
  core.startEpisodeReal();
}
"""
_READY_JS = "() => WOB_TASK_READY"
_UTTERANCE_JS = "() => core.getUtterance()"
_STATUS_JS = "() => [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON]"


@cache
def html_dir() -> Path:
    """The ``miniwob`` package's folder of task pages (found without importing the package,
    which registers gymnasium envs)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("miniwob tasks need the miniwob package: pip install 'trajforge[web]'")
    return Path(next(iter(spec.submodule_search_locations))) / "html" / "miniwob"


@cache
def task_names() -> tuple[str, ...]:
    """Every MiniWoB++ task the package ships (``click-button``, ``enter-text``, ...)."""
    return tuple(sorted(page.stem for page in html_dir().glob("*.html")))


def check_task(name: str) -> str:
    """``name`` if the package has that task.

    Raises:
        ConfigError: it has not; the message names the closest tasks.
    """
    if name not in task_names():
        close = difflib.get_close_matches(name, task_names(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"miniwob: no task {name!r} in the miniwob package{hint}")
    return name


def _utterance(response: object) -> str:
    # A task answers a string, or a dict with the string and its fields.
    if isinstance(response, dict):
        return str(response["utterance"])
    return str(response)


@dataclass
class MiniWoB(Benchmark):
    """MiniWoB++ tasks ``names`` (one or more), seeded per episode."""

    names: tuple[str, ...]

    def __post_init__(self) -> None:
        self.names = tuple(check_task(name) for name in self.names)
        self.name = PREFIX + ",".join(self.names)
        self.viewport = VIEWPORT

    def tasks(self, n: int, seed: int, split: str) -> list[Task]:
        return seeded_tasks(self.name, self.names, n, seed, split)

    def start(self, session: PageSession, task: Task) -> Episode:
        name, seed = check_task(task.data["task"]), int(task.data["seed"])
        page = session.page
        page.goto((html_dir() / f"{name}.html").as_uri())
        page.add_style_tag(content=_HIDE_DISPLAY)
        page.evaluate(_START_JS, [seed, DATA_MODE, EPISODE_MAX_TIME_MS])
        page.wait_for_function(_READY_JS)
        return recorded(session, task, MiniWoBEpisode(_utterance(page.evaluate(_UTTERANCE_JS))))


class MiniWoBEpisode(Episode):
    def __init__(self, goal: str) -> None:
        self.goal = goal

    def status(self, session: PageSession) -> EpisodeStatus:
        done, reward, reason = session.page.evaluate(_STATUS_JS)
        return EpisodeStatus(bool(done), float(reward) if done else 0.0, reason)
