"""``python -m trajforge.envs.openenv.launch REF --port P``: serve an OpenEnv environment.

``REF`` (``package.module:attr`` or ``path/file.py:attr``) names either the ASGI app an
environment's ``server/app.py`` builds with OpenEnv's ``create_app``, or an OpenEnv
``Environment`` subclass, served here with the action and observation classes its ``step``
annotates. Only 127.0.0.1 is listened on. ``OpenEnvProcess`` runs this in a subprocess.
"""

from __future__ import annotations

import argparse
import typing
from typing import Any

import uvicorn
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation

from trajforge.errors import ConfigError
from trajforge.registry import load_ref

HOST = "127.0.0.1"


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


def load_app(ref: str, max_sessions: int) -> Any:
    """The ASGI app ``ref`` names, or one built around the ``Environment`` class it names."""
    target = load_ref(ref, "openenv")
    if isinstance(target, type) and issubclass(target, Environment):
        return environment_app(target, ref, max_sessions)
    if not callable(target):
        raise ConfigError(
            f"openenv {ref!r}: names a {type(target).__name__}, neither an ASGI app nor an "
            "OpenEnv Environment class"
        )
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {__spec__.name if __spec__ else 'launch'}")
    parser.add_argument("ref", help="module:attr or file.py:attr (an app or Environment class)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-sessions", type=int, default=8)
    args = parser.parse_args(argv)
    app = load_app(args.ref, args.max_sessions)
    uvicorn.run(app, host=HOST, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
