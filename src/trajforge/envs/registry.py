"""The environment registry: built-in names and user environments given as ``module:factory``.

A name is one of the built-ins (``calculator``, ``python``, ``sql``, ``search``, ``gridworld``,
``keydoor``, ``keydoor-compact``, ``time``, ``retail``), ``package.module:factory`` (a module on
the Python path or in the current directory), ``path/to/file.py:factory``, ``path/to/env.yaml`` (an env file: MCP
servers, tools, tasks and a verifier, see ``trajforge.envs.mcp.envfile``) or ``tau2-<domain>``: a
tau2-bench domain through the adapter in ``trajforge.envs.tau2_bench`` (the optional ``tau2``
extra; not listed by ``list_envs``).

A built-in is a module with ``make_env(**kwargs) -> Env``, ``generate_tasks(n, seed, split)``
and ``expert(task, messages)``; its description is ``DESCRIPTION`` or its docstring's first line.
An env with a simulated user also has ``scripted_user(task, view)``: the user's scripted replies
(what the ``expert`` policy plays on the user's side).

A user factory is called with the keyword arguments given to ``EnvEntry.make`` and returns either

- an ``Env`` (typically a ``ToolEnv``): the factory is called again for every episode, tasks come
  from the env's ``tasks`` list (split deterministically by id, 10% test, unless the tasks carry
  their own ``split``), and the expert is the env's ``expert`` method; or
- an object with a ``make()`` method returning an ``Env`` and, optionally, ``name``,
  ``description``, ``tasks(n, seed=0, split="train")`` and ``expert(task, messages)``
  (for instance an ``EnvEntry``).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from trajforge.envs.base import Env
from trajforge.envs.taskset import TEST, TRAIN, TaskSet
from trajforge.errors import ConfigError
from trajforge.registry import load_module
from trajforge.schema import ExpertFn, Message, Task, ToolSpec

BUILTIN_MODULES: dict[str, str] = {
    "calculator": "trajforge.envs.builtin.calculator",
    "python": "trajforge.envs.builtin.python_env",
    "sql": "trajforge.envs.builtin.sql_env",
    "search": "trajforge.envs.builtin.search",
    "gridworld": "trajforge.envs.builtin.gridworld",
    "keydoor": "trajforge.envs.builtin.keydoor",
    "keydoor-compact": "trajforge.envs.builtin.keydoor_compact",
    "time": "trajforge.envs.builtin.time_env",
    "retail": "trajforge.envs.builtin.retail",
}
TAU2_PREFIX = "tau2-"
TAU2_ADAPTER = "trajforge.envs.tau2_bench.adapter"
USER_TEST_FRACTION = 0.1
# Imported by name only when an env file is named: it loads the MCP SDK.
ENV_FILE_MODULE = "trajforge.envs.mcp.envfile"
ENV_FILE_SUFFIXES = (".yaml", ".yml")

TasksFn = Callable[[int, int, str], list[Task]]


def _no_expert(task: Task, messages: list[Message]) -> str | None:
    return None


class EnvEntry:
    """A named environment: how to make a fresh env, its tasks and its scripted expert.

    Args:
        name: The registry name.
        factory: ``factory(**kwargs) -> Env``, called once per episode.
        tasks: ``tasks(n, seed, split) -> list[Task]``.
        expert: ``expert(task, messages) -> str | None`` (the next reply, text protocol).
        description: One line for ``trajforge envs``.
        scripted_user: ``(task, view) -> str | None``: the scripted simulated user's next
            reply (envs with a simulated user only).
    """

    def __init__(
        self,
        name: str,
        factory: Callable[..., Env],
        tasks: TasksFn | None = None,
        expert: ExpertFn | None = None,
        description: str = "",
        scripted_user: ExpertFn | None = None,
    ) -> None:
        self.name = name
        self.scripted_user = scripted_user
        self.description = description
        self._factory = factory
        self._tasks = tasks
        self._expert = expert or _no_expert

    def make(self, **kwargs: Any) -> Env:
        """A fresh environment (one per episode)."""
        env = self._factory(**kwargs)
        if not isinstance(env, Env):
            raise ConfigError(
                f"env {self.name!r}: its factory returned {type(env).__name__}, not an Env"
            )
        return env

    def tasks(self, n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
        """``n`` tasks of ``split`` (``train`` or ``test``), deterministic in ``seed``."""
        if split not in (TRAIN, TEST):
            raise ConfigError(f"split: must be {TRAIN!r} or {TEST!r}, got {split!r}")
        if self._tasks is None:
            raise ConfigError(f"env {self.name!r} has no tasks; give it a task file instead")
        return list(self._tasks(n, seed, split))

    def expert(self, task: Task, messages: list[Message]) -> str | None:
        """The scripted expert's next reply (a pure function of the task and the conversation)."""
        return self._expert(task, messages)

    def tool_specs(self) -> list[ToolSpec]:
        """The tools a fresh env offers (asked of its servers, for an env that has some)."""
        env = self.make()

        async def listed() -> list[ToolSpec]:
            try:
                return await env.list_tools()
            finally:
                await env.close()

        return asyncio.run(listed())

    def tool_names(self) -> list[str]:
        """The names of the tools a fresh env offers."""
        return [spec.name for spec in self.tool_specs()]

    def __repr__(self) -> str:
        return f"EnvEntry({self.name!r})"


def _first_line(doc: str | None) -> str:
    return inspect.cleandoc(doc).splitlines()[0] if doc else ""


def _entry_from_module(name: str, module: ModuleType) -> EnvEntry:
    for attr in ("make_env", "generate_tasks", "expert"):
        if not callable(getattr(module, attr, None)):
            raise ConfigError(f"env {name!r}: module {module.__name__} has no function {attr}()")
    description = getattr(module, "DESCRIPTION", None) or _first_line(module.__doc__)
    scripted_user = getattr(module, "scripted_user", None)
    return EnvEntry(
        name, module.make_env, module.generate_tasks, module.expert, description, scripted_user
    )


def _tasks_from_list(name: str, declared: list[Task]) -> TasksFn:

    def tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
        if not declared:
            raise ConfigError(f"env {name!r} declares no tasks (pass tasks=[...] to its ToolEnv)")
        if any(t.split is not None for t in declared):
            chosen = TaskSet([t for t in declared if t.split == split], name=name)
        else:
            train, test = TaskSet(declared, name=name).split(USER_TEST_FRACTION, seed=0)
            chosen = train if split == TRAIN else test
        return list(chosen.shuffled(seed).take(n))

    return tasks


def _entry_from_object(name: str, factory: Callable[..., Any], module: ModuleType) -> EnvEntry:
    made = factory()
    fallback = _first_line(factory.__doc__) or _first_line(module.__doc__)
    if isinstance(made, Env):
        description = getattr(made, "description", "") or fallback
        declared = list(getattr(made, "tasks", None) or [])
        tasks = _tasks_from_list(name, declared)
        user = getattr(made, "user_script", None)
        return EnvEntry(name, factory, tasks, made.expert, description, user)
    if callable(getattr(made, "make", None)):
        return EnvEntry(
            getattr(made, "name", None) or name,
            made.make,
            getattr(made, "tasks", None),
            getattr(made, "expert", None),
            getattr(made, "description", "") or fallback,
            getattr(made, "scripted_user", None),
        )
    raise ConfigError(
        f"env {name!r}: the factory returned {type(made).__name__}; it must return an Env "
        "or an object with a make() method"
    )


@cache
def get_env(name: str) -> EnvEntry:
    """The registry entry for a built-in name, ``module:factory`` or ``path/file.py:factory``."""
    if name in BUILTIN_MODULES:
        try:
            module = importlib.import_module(BUILTIN_MODULES[name])
        except ImportError as exc:
            raise ConfigError(f"env {name!r}: cannot load {BUILTIN_MODULES[name]}: {exc}") from exc
        return _entry_from_module(name, module)
    if name.endswith(ENV_FILE_SUFFIXES):
        factory = importlib.import_module(ENV_FILE_MODULE).EnvFileFactory(Path(name))
        tasks = _tasks_from_list(name, factory.tasks)
        return EnvEntry(name, factory, tasks, None, factory.description)
    if name.startswith(TAU2_PREFIX):
        try:
            adapter = importlib.import_module(TAU2_ADAPTER)
        except ImportError as exc:
            raise ConfigError(
                f"env {name!r} needs tau2-bench: pip install 'trajforge[tau2]' ({exc})"
            ) from exc
        entry: EnvEntry = adapter.entry(name.removeprefix(TAU2_PREFIX))
        return entry
    if ":" not in name:
        known = ", ".join(BUILTIN_MODULES)
        raise ConfigError(
            f"unknown env {name!r}; built-ins are {known}, or give module:factory, "
            "file.py:factory or env.yaml"
        )
    target, _, attr = name.rpartition(":")
    module = load_module(name, target, "env")
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"env {name!r}: {target} has no callable {attr!r}")
    return _entry_from_object(name, factory, module)


def list_envs() -> list[EnvEntry]:
    """Every built-in environment, in registry order."""
    return [get_env(name) for name in BUILTIN_MODULES]


def builtin_names() -> list[str]:
    return list(BUILTIN_MODULES)
