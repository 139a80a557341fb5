"""The web job's environment: twelve MiniWoB++ tasks as one mixed task set, observed as page
trees, every episode keeping its opening and last screen (PNG data URLs in the trajectory's
metadata) so that the report can show a held-out episode as it looked."""

from __future__ import annotations

from collections.abc import Sequence
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
# Two of them, for the job's smoke test: a click and a form.
SMOKE_TASKS = ("click-button", "enter-text")


def recorded(tasks: Sequence[str]) -> EnvEntry:
    """``miniwob:<tasks>`` with the screens recorded."""
    name = "miniwob:" + ",".join(tasks)
    entry = get_env(name)
    return EnvEntry(
        name,
        partial(BrowserEnv, benchmark(name), record_screens=True),
        entry.tasks,
        entry.expert,
        entry.description,
        source=entry.source,
    )


def web_env() -> EnvEntry:
    """The web job's twelve tasks."""
    return recorded(TASKS)


def smoke_env() -> EnvEntry:
    """Two of them, for a smoke run of the job's stages."""
    return recorded(SMOKE_TASKS)
