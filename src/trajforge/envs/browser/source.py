"""Browser benchmarks in the env registry: ``miniwob:TASK[,TASK...]`` and
``browsergym:TASK[,TASK...]``, and their ``-screenshot`` variants (see
``trajforge.envs.registry``)."""

from __future__ import annotations

from functools import partial
from typing import Any

from trajforge.envs.browser.benchmark import Benchmark
from trajforge.envs.browser.bgym import PREFIX as BROWSERGYM_PREFIX
from trajforge.envs.browser.bgym import BrowserGym
from trajforge.envs.browser.env import BrowserEnv
from trajforge.envs.browser.experts import expert, expert_refusal
from trajforge.envs.browser.miniwob import PREFIX as MINIWOB_PREFIX
from trajforge.envs.browser.miniwob import MiniWoB
from trajforge.envs.gui.actions import ACTIONS
from trajforge.envs.registry import EnvEntry, EnvSource
from trajforge.errors import ConfigError

PREFIXES = (MINIWOB_PREFIX, BROWSERGYM_PREFIX)
SCREENSHOT_VARIANT = "-screenshot"
"""``miniwob-screenshot:TASK``: observations carry a screenshot part, and every GUI action is
offered (coordinates too), for agents that look at the page."""


def _parts(name: str) -> tuple[str, bool, tuple[str, ...]]:
    """A browser env name's prefix, whether it is the screenshot variant, and its tasks."""
    family, _, tasks = name.partition(":")
    screenshot = family.endswith(SCREENSHOT_VARIANT)
    prefix = family.removesuffix(SCREENSHOT_VARIANT) + ":"
    if prefix not in PREFIXES:
        kinds = " or ".join(f"{p}TASK" for p in PREFIXES)
        raise ConfigError(
            f"env {name!r}: a browser env is {kinds} (screenshots: miniwob-screenshot:TASK)"
        )
    named = tuple(t.strip() for t in tasks.split(",") if t.strip())
    if not named:
        raise ConfigError(
            f"env {name!r}: name a task after {family + ':'!r}, e.g. {prefix}click-test"
        )
    return prefix, screenshot, named


def benchmark(name: str) -> Benchmark:
    """The benchmark a ``miniwob:...`` or ``browsergym:...`` name (or its screenshot variant)
    names.

    Raises:
        ConfigError: another prefix, no task named, or a task the benchmark does not have.
    """
    prefix, _, tasks = _parts(name)
    return MiniWoB(tasks) if prefix == MINIWOB_PREFIX else BrowserGym(tasks)


def entry(name: str) -> EnvEntry:
    """The registry entry of browser env ``name`` (episodes on the process's browser pool); a
    MiniWoB++ env has the scripted expert when each of its tasks has one."""
    _, screenshot, _ = _parts(name)
    bench = benchmark(name)
    family = "MiniWoB++" if isinstance(bench, MiniWoB) else "BrowserGym"
    refusal = expert_refusal(bench.names) if isinstance(bench, MiniWoB) else None
    options: dict[str, Any] = {"screenshot": True, "actions": tuple(ACTIONS)} if screenshot else {}
    return EnvEntry(
        name,
        partial(BrowserEnv, bench, **options),
        bench.tasks,
        expert if isinstance(bench, MiniWoB) else None,
        description=f"{family} tasks on headless Chromium: {name.split(':', 1)[1]}"
        + (" (with screenshots)" if screenshot else ""),
        source=EnvSource.BROWSER,
        expert_refusal=refusal,
    )
