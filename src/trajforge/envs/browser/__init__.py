"""Browser environments on the system Chromium: MiniWoB++ (``miniwob:TASK``) and BrowserGym
(``browsergym:TASK``) tasks, observed as page trees with element ids (and optionally
screenshots), acted on with the GUI actions, on a pool of reused headless browsers."""

from trajforge.envs.browser.benchmark import Benchmark, Episode, EpisodeStatus
from trajforge.envs.browser.bgym import BrowserGym
from trajforge.envs.browser.chromium import BrowserStartError, reap_leftovers
from trajforge.envs.browser.env import BrowserEnv
from trajforge.envs.browser.miniwob import MiniWoB, task_names
from trajforge.envs.browser.pool import BrowserFailedError, BrowserPool, shared_pool
from trajforge.envs.browser.session import PageSession, Viewport
from trajforge.envs.browser.source import benchmark, entry

__all__ = [
    "Benchmark",
    "BrowserEnv",
    "BrowserFailedError",
    "BrowserGym",
    "BrowserPool",
    "BrowserStartError",
    "Episode",
    "EpisodeStatus",
    "MiniWoB",
    "PageSession",
    "Viewport",
    "benchmark",
    "entry",
    "reap_leftovers",
    "shared_pool",
    "task_names",
]
