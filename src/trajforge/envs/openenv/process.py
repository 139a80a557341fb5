"""An OpenEnv server started from Python code as a subprocess on 127.0.0.1.

The server runs ``python -m trajforge.envs.openenv.launch REF --port P`` as a
``ServerProcess``: in a process group of its own, its output in a temporary file. ``start``
waits until ``/health`` answers; a server that exits first or does not answer within the
start-up timeout is killed with its whole group, and the error carries the tail of its stderr.
``stop`` ends the group (SIGTERM, then SIGKILL); it runs at interpreter exit too, so no server
outlives its user.
"""

from __future__ import annotations

import sys

from trajforge.errors import InfraError
from trajforge.server_process import ServerProcess

LAUNCHER = "trajforge.envs.openenv.launch"


class OpenEnvServerError(InfraError):
    """An OpenEnv server did not start, stopped answering or broke its connection."""


class OpenEnvProcess(ServerProcess):
    """One OpenEnv server started from ``ref`` (``module:attr`` or ``file.py:attr``).

    Args:
        ref: What the launcher serves: an ASGI app or an OpenEnv ``Environment`` class.
        startup_timeout_s: Seconds the server has to answer ``/health``.
        max_sessions: Concurrent WebSocket sessions an ``Environment`` class is served with.
    """

    def __init__(self, ref: str, startup_timeout_s: float, max_sessions: int) -> None:
        self.ref = ref
        self.max_sessions = max_sessions
        super().__init__(
            f"OpenEnv server {ref!r}",
            self._command,
            startup_timeout_s=startup_timeout_s,
            error=OpenEnvServerError,
        )

    def _command(self, port: int) -> list[str]:
        # ``python -m`` puts the current directory on the path, so a module the user names
        # from there imports in the server as it would here.
        command = [sys.executable, "-m", LAUNCHER, self.ref, "--port", str(port)]
        return [*command, "--max-sessions", str(self.max_sessions)]
