"""The ASGI app that serves what an ``openenv:`` reference names (``launch`` runs it).

An OpenEnv ``Environment`` subclass is served by OpenEnv's own FastAPI app, typed by the
``Action`` and ``Observation`` classes its ``step`` annotates; anything else callable is taken
as the ASGI app itself (what an environment's ``server/app.py`` builds with ``create_app``).
"""

from __future__ import annotations

import typing
from typing import Any

from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation

from trajforge.errors import ConfigError


def environment_app(cls: type[Environment], ref: str, max_sessions: int) -> Any:
    """The OpenEnv app serving ``cls``, typed by the annotations of its ``step``.

    Raises:
        ConfigError: ``step`` does not annotate its action and its return as OpenEnv's
            ``Action`` and ``Observation`` subclasses.
    """
    hints = typing.get_type_hints(cls.step)
    action, observation = hints.get("action"), hints.get("return")
    if not (isinstance(action, type) and issubclass(action, Action)):
        raise ConfigError(f"openenv {ref!r}: {cls.__name__}.step must annotate action: an Action")
    if not (isinstance(observation, type) and issubclass(observation, Observation)):
        raise ConfigError(f"openenv {ref!r}: {cls.__name__}.step must return an Observation")
    # An environment that does not say it isolates its sessions is served one at a time.
    sessions = max_sessions if cls.SUPPORTS_CONCURRENT_SESSIONS else 1
    return create_fastapi_app(cls, action, observation, max_concurrent_envs=sessions)


def app_for(target: Any, ref: str, max_sessions: int) -> Any:
    """``target`` if it is an ASGI app, else the app serving the ``Environment`` class it is."""
    if isinstance(target, type) and issubclass(target, Environment):
        return environment_app(target, ref, max_sessions)
    if not callable(target):
        raise ConfigError(
            f"openenv {ref!r}: names a {type(target).__name__}, neither an ASGI app nor an "
            "OpenEnv Environment class"
        )
    return target
