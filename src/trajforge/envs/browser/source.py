"""Browser benchmarks in the env registry: ``miniwob:TASK[,TASK...]`` and
``browsergym:TASK[,TASK...]`` (see ``trajforge.envs.registry``)."""

from __future__ import annotations

from functools import partial

from trajforge.envs.browser.benchmark import Benchmark
from trajforge.envs.browser.bgym import PREFIX as BROWSERGYM_PREFIX
from trajforge.envs.browser.bgym import BrowserGym
from trajforge.envs.browser.env import BrowserEnv
from trajforge.envs.browser.experts import expert, expert_refusal
from trajforge.envs.browser.miniwob import PREFIX as MINIWOB_PREFIX
from trajforge.envs.browser.miniwob import MiniWoB
from trajforge.envs.registry import EnvEntry, EnvSource
from trajforge.errors import ConfigError

PREFIXES = (MINIWOB_PREFIX, BROWSERGYM_PREFIX)


def benchmark(name: str) -> Benchmark:
    """The benchmark a ``miniwob:...`` or ``browsergym:...`` name names.

    Raises:
        ConfigError: another prefix, no task named, or a task the benchmark does not have.
    """
    prefix = next((p for p in PREFIXES if name.startswith(p)), None)
    if prefix is None:
        raise ConfigError(f"env {name!r}: a browser env is {' or '.join(PREFIXES)}TASK")
    tasks = tuple(t.strip() for t in name.removeprefix(prefix).split(",") if t.strip())
    if not tasks:
        raise ConfigError(f"env {name!r}: name a task after {prefix!r}, e.g. {prefix}click-test")
    return MiniWoB(tasks) if prefix == MINIWOB_PREFIX else BrowserGym(tasks)


def entry(name: str) -> EnvEntry:
    """The registry entry of browser env ``name`` (episodes on the process's browser pool); a
    MiniWoB++ env has the scripted expert when each of its tasks has one."""
    bench = benchmark(name)
    family = "MiniWoB++" if isinstance(bench, MiniWoB) else "BrowserGym"
    refusal = expert_refusal(bench.names) if isinstance(bench, MiniWoB) else None
    return EnvEntry(
        name,
        partial(BrowserEnv, bench),
        bench.tasks,
        expert if isinstance(bench, MiniWoB) else None,
        description=f"{family} tasks on headless Chromium: {name.split(':', 1)[1]}",
        source=EnvSource.BROWSER,
        expert_refusal=refusal,
    )
