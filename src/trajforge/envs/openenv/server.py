"""Any trajforge environment as an OpenEnv server (``trajforge openenv serve ENV``).

``TrajforgeEnvironment`` is an OpenEnv ``Environment`` over one trajforge env of an
``EnvEntry``: ``reset(seed, episode_id, split)`` makes a fresh env and resets it on the
entry's task for that seed and split (``entry.tasks(1, seed, split)``), ``step`` hands it the
assistant's turn, ``state`` says the task, the steps, whether the episode ended and its last
reward. Each WebSocket session of OpenEnv's server gets an instance of its own, so sessions
never share an episode. The env is async and lives on the server's event loop (OpenEnv awaits
``reset_async``/``step_async`` there); the sync ``reset``/``step`` drive it on a loop of the
instance's own, for a caller that uses the class directly.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from functools import partial

import uvicorn
from fastapi import FastAPI
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from trajforge.envs.base import Env
from trajforge.envs.openenv.models import (
    AssistantAction,
    ChatMessage,
    ChatObservation,
    EpisodeState,
)
from trajforge.envs.registry import EnvEntry
from trajforge.envs.taskset import TEST, TRAIN
from trajforge.errors import ConfigError
from trajforge.schema import Message, Role, Task, ToolCall

HOST = "127.0.0.1"
CLOSE_WAIT_S = 10.0
# Closes started from the server's own loop thread run as tasks; held here until they end.
_CLOSING: set[asyncio.Task[None]] = set()


class EpisodeOrderError(RuntimeError):
    """``step`` came before ``reset`` (OpenEnv's server sends the message to the client)."""


class TrajforgeEnvironment(Environment[AssistantAction, ChatObservation, EpisodeState]):
    """One trajforge env of ``entry`` behind OpenEnv's reset/step/state."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, entry: EnvEntry) -> None:
        super().__init__()
        self.entry = entry
        self.env: Env | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._own_loop: asyncio.AbstractEventLoop | None = None
        self._state = EpisodeState()

    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, split: str = TRAIN
    ) -> ChatObservation:
        await self._close_env()
        task = self._task(seed or 0, split)
        self.env, self._loop = self.entry.make(), asyncio.get_running_loop()
        opening = await self.env.reset(task)
        self._state = EpisodeState(episode_id=episode_id or uuid.uuid4().hex, task_id=task.id)
        return ChatObservation(
            messages=[_chat(m) for m in opening],
            tools=[spec.to_openai() for spec in self.env.tools],
            task_id=task.id,
        )

    async def step_async(self, action: AssistantAction) -> ChatObservation:
        if self.env is None:
            raise EpisodeOrderError(f"env {self.entry.name!r}: reset before the first step")
        calls = [ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in action.tool_calls]
        message = Message(role=Role.ASSISTANT, content=action.content, tool_calls=calls)
        result = await self.env.step(message)
        state = self._state
        state.step_count, state.done, state.reward = (
            state.step_count + 1,
            result.done,
            result.reward,
        )
        return ChatObservation(
            messages=[_chat(m) for m in result.observations],
            task_id=state.task_id or "",
            info=json.loads(json.dumps(result.info, default=str)),
            reward=result.reward,
            done=result.done,
        )

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, split: str = TRAIN
    ) -> ChatObservation:
        return self._private_loop().run_until_complete(self.reset_async(seed, episode_id, split))

    def step(self, action: AssistantAction) -> ChatObservation:
        return self._private_loop().run_until_complete(self.step_async(action))

    @property
    def state(self) -> EpisodeState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name=self.entry.name,
            description=self.entry.description or f"trajforge environment {self.entry.name}",
        )

    def close(self) -> None:
        """Close the episode's env on the loop it lives on, from whatever thread OpenEnv asks."""
        env, loop, self.env = self.env, self._loop, None
        if env is not None and loop is not None and not loop.is_closed():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                task = loop.create_task(env.close())
                _CLOSING.add(task)
                task.add_done_callback(_CLOSING.discard)
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(env.close(), loop).result(CLOSE_WAIT_S)
            else:
                loop.run_until_complete(env.close())
        if self._own_loop is not None:
            self._own_loop.close()
            self._own_loop = None

    def _task(self, seed: int, split: str) -> Task:
        """The entry's task for ``seed`` and ``split``; an empty one for an env without tasks
        (its tools can still be driven)."""
        if split not in (TRAIN, TEST):
            raise ConfigError(f"split: must be {TRAIN!r} or {TEST!r}, got {split!r}")
        try:
            tasks = self.entry.tasks(1, seed=seed, split=split)
        except ConfigError:
            tasks = []
        return tasks[0] if tasks else Task(id=f"openenv-{seed}", prompt="")

    async def _close_env(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            await env.close()

    def _private_loop(self) -> asyncio.AbstractEventLoop:
        if self._own_loop is None:
            self._own_loop = asyncio.new_event_loop()
        return self._own_loop


def _chat(message: Message) -> ChatMessage:
    return ChatMessage(
        role=message.role.value,
        content=message.text,
        tool_call_id=message.tool_call_id,
        name=message.name,
    )


def openenv_app(entry: EnvEntry, max_sessions: int) -> FastAPI:
    """OpenEnv's FastAPI app (HTTP reset/step/state/schema, WebSocket sessions) for ``entry``."""
    factory = partial(TrajforgeEnvironment, entry)
    return create_fastapi_app(
        factory, AssistantAction, ChatObservation, max_concurrent_envs=max_sessions
    )


async def serve_openenv(entry: EnvEntry, port: int, max_sessions: int, host: str = HOST) -> None:
    """Serve ``entry`` at ``http://host:port`` (WebSocket at ``/ws``) until Ctrl-C or SIGTERM."""
    app = openenv_app(entry, max_sessions)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    await uvicorn.Server(config).serve()
