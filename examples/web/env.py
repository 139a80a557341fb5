"""The web job's environment: twelve MiniWoB++ tasks as one mixed task set, observed as page
trees, every episode keeping its opening and last screen (PNG data URLs in the trajectory's
metadata) so that the report can show a held-out episode as it looked."""

from __future__ import annotations

from functools import partial

from trajforge.envs import EnvEntry, get_env
from trajforge.envs.browser import BrowserEnv, benchmark

# Tasks a 135M model can learn from page-tree text in a few turns, each with a scripted expert
# (trajforge.envs.browser.experts): single clicks, and forms of two or three actions.
TASKS = (
    "click-button",
    "click-link",
    "click-dialog",
    "click-tab",
    "focus-text",
    "enter-text",
    "click-option",
    "click-checkboxes",
    "choose-list",
    "enter-password",
    "login-user",
    "click-button-sequence",
)
NAME = "miniwob:" + ",".join(TASKS)


def web_env() -> EnvEntry:
    """``miniwob:<the twelve tasks>`` with the screens recorded."""
    entry = get_env(NAME)
    return EnvEntry(
        NAME,
        partial(BrowserEnv, benchmark(NAME), record_screens=True),
        entry.tasks,
        entry.expert,
        entry.description,
        source=entry.source,
    )
