"""``openenv:TARGET``: an OpenEnv environment as a trajforge environment source.

``TARGET`` is where the server is:

- a URL (``http://127.0.0.1:8000``, ``https://...``, ``ws://...``): a server already running;
- ``package.module:attr`` or ``path/file.py:attr``: trajforge starts the server itself, once
  per process, on a free port of 127.0.0.1 (``attr`` an ASGI app built with OpenEnv's
  ``create_app``, or an ``Environment`` class), and stops it when the process ends.

``openenv:`` offers the action as a tool; ``openenv-text:`` takes the assistant's text as the
action (``OpenEnvEnv``). An OpenEnv environment draws its episodes from a reset seed, so its
tasks are seeds: ``task.data["seed"]``, train and test from ranges that never meet.
"""

from __future__ import annotations

import asyncio

import httpx

from trajforge.envs.openenv.env import ActionMode, OpenEnvEnv, ServerInfo
from trajforge.envs.openenv.process import OpenEnvProcess, OpenEnvServerError
from trajforge.envs.registry import EnvEntry, EnvSource, TasksFn
from trajforge.envs.taskset import TRAIN
from trajforge.errors import ConfigError
from trajforge.registry import absolute_ref, is_ref
from trajforge.schema import Task

PREFIXES: dict[str, ActionMode] = {"openenv:": ActionMode.TOOL, "openenv-text:": ActionMode.TEXT}
URL_SCHEMES = ("http://", "https://", "ws://", "wss://")
STARTUP_TIMEOUT_S = 60.0
MAX_SESSIONS = 8
HTTP_TIMEOUT_S = 30.0
# Test seeds start here, so a train seed never names a test episode.
TEST_SEED_BASE = 1_000_000
SEEDS_PER_SPLIT_SEED = 10_000


class OpenEnvServer:
    """Where an OpenEnv server is: a URL, or a process trajforge starts on first use.

    Args:
        target: The URL or ``module:attr`` / ``file.py:attr``.
        startup_timeout_s: Seconds a started server has to answer.
        max_sessions: Concurrent sessions an ``Environment`` class is served with.
    """

    def __init__(
        self,
        target: str,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.target = target
        self.process: OpenEnvProcess | None = None
        if target.startswith(URL_SCHEMES):
            self._url = target.rstrip("/").replace("ws://", "http://", 1)
            self._url = self._url.replace("wss://", "https://", 1)
        elif is_ref(target):
            ref = absolute_ref(target)
            self.process = OpenEnvProcess(ref, startup_timeout_s, max_sessions)
            self._url = ""
        else:
            raise ConfigError(
                f"env 'openenv:{target}': give a server URL (http://127.0.0.1:8000) or the "
                "code to start one (package.module:app or file.py:EnvironmentClass)"
            )
        self._info: ServerInfo | None = None

    async def url(self) -> str:
        """The server's base URL, starting it first when trajforge runs it."""
        if self.process is not None:
            return await asyncio.to_thread(self.process.start)
        return self._url

    async def info(self) -> ServerInfo:
        """The server's name, description and action schema (asked once)."""
        if self._info is None:
            url = await self.url()
            try:
                async with httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT_S) as http:
                    schema = (await http.get("/schema")).raise_for_status().json()
                    metadata = (await http.get("/metadata")).raise_for_status().json()
            except (httpx.HTTPError, ValueError) as exc:
                raise OpenEnvServerError(
                    f"OpenEnv server at {url}: cannot read its /schema and /metadata ({exc})"
                ) from None
            self._info = ServerInfo(
                name=str(metadata.get("name") or self.target),
                description=str(metadata.get("description") or ""),
                action_schema=dict(schema["action"]),
            )
        return self._info

    def stop(self) -> None:
        """Stop the server if trajforge started it."""
        if self.process is not None:
            self.process.stop()


def seeded_tasks(name: str) -> TasksFn:
    """Tasks that are reset seeds: ``n`` of them from ``seed``'s block of its split's range."""

    def tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
        base = (0 if split == TRAIN else TEST_SEED_BASE) + seed * SEEDS_PER_SPLIT_SEED
        return [
            Task(id=f"{split}-{base + i}", prompt="", env=name, data={"seed": base + i})
            for i in range(n)
        ]

    return tasks


class OpenEnvEntry(EnvEntry):
    """An OpenEnv environment's entry, holding its server (``server.stop()`` ends one that
    trajforge started; the end of the process does too)."""

    def __init__(self, name: str, server: OpenEnvServer, mode: ActionMode) -> None:
        def make() -> OpenEnvEnv:
            return OpenEnvEnv(server.url, server.info, mode, name)

        super().__init__(
            name,
            make,
            seeded_tasks(name),
            description=f"OpenEnv environment at {server.target} (actions as {mode.value})",
            source=EnvSource.OPENENV,
        )
        self.server = server


def entry(
    name: str, startup_timeout_s: float = STARTUP_TIMEOUT_S, max_sessions: int = MAX_SESSIONS
) -> OpenEnvEntry:
    """The ``EnvEntry`` of ``openenv:TARGET`` or ``openenv-text:TARGET``.

    Raises:
        ConfigError: ``name`` has neither prefix, or its target is neither a URL nor code.
    """
    prefix = next((p for p in PREFIXES if name.startswith(p)), None)
    if prefix is None:
        raise ConfigError(f"env {name!r}: an OpenEnv env starts with {' or '.join(PREFIXES)}")
    server = OpenEnvServer(name.removeprefix(prefix), startup_timeout_s, max_sessions)
    return OpenEnvEntry(name, server, PREFIXES[prefix])
