"""One environment as the registry gives it, whatever its source: an ``EnvEntry``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

from trajforge.envs.base import Env
from trajforge.envs.multiseat.base import MultiSeatEnv, Opponent
from trajforge.envs.taskset import TEST, TRAIN
from trajforge.errors import ConfigError
from trajforge.schema import ExpertFn, Message, Task, ToolSpec

TasksFn = Callable[[int, int, str], list[Task]]


class EnvSource(StrEnum):
    """Where an environment comes from."""

    BUILTIN = "built-in"
    TAU2 = "tau2"
    CODE = "code"
    ENV_FILE = "env file"
    HARBOR = "harbor"
    OPENENV = "openenv"
    BROWSER = "browser"
    TASK_FILE = "task file"


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
        source: Where the environment comes from.
        answer_free_verifier: Whether the verifier judges without the task's answer key (a
            goal reached, unit tests run), so that best-of-N may choose by it; False unless
            the env says so.
        game: Makes a fresh multi-seat game (games only).
        opponents: The game's scripted seats by name (games only).
        stored_name: The name its trajectories carry, whichever command stores them: the
            env's own ``name`` (a ``ToolEnv``'s ``name=``, an env file's ``name:``), not the
            ``file.py:factory`` it was found by (default: ``name``).
        expert_refusal: One line refusing the ``expert`` policy before any episode runs
            (some of its tasks have no scripted expert); ``None``: the expert may run.
    """

    def __init__(
        self,
        name: str,
        factory: Callable[..., Env],
        tasks: TasksFn | None = None,
        expert: ExpertFn | None = None,
        description: str = "",
        scripted_user: ExpertFn | None = None,
        source: EnvSource = EnvSource.CODE,
        answer_free_verifier: bool = False,
        game: Callable[[], MultiSeatEnv] | None = None,
        opponents: Mapping[str, Opponent] | None = None,
        stored_name: str | None = None,
        expert_refusal: str | None = None,
    ) -> None:
        self.name = name
        self.expert_refusal = expert_refusal
        self.stored_name = stored_name or name
        self.answer_free_verifier = answer_free_verifier
        self.game = game
        self.opponents = dict(opponents or {})
        self.source = source
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
        return f"EnvEntry({self.name!r}, {self.source.value})"
