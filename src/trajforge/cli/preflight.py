"""What a command checks before it loads a model or creates a store, so that a mistake costs one
line and leaves nothing behind: the port a server command listens on (a busy port names itself
and ``--port 0``, instead of a model loaded, a store created and uvicorn's ``address already in
use``), and the server an ``openai:<url>#<model>`` policy names (nothing answering there is one
line, not a run of episodes that all failed)."""

from __future__ import annotations

import errno
import socket
from urllib.parse import urlsplit

from trajforge.errors import ConfigError
from trajforge.policy import OPENAI_PREFIX, parse_openai_spec

REACH_TIMEOUT_S = 5.0


def claim_port(host: str, port: int, option: str = "--port") -> int:
    """The port to listen on at ``host``: ``port`` if it is free there, any free one for 0.

    Raises:
        ConfigError: the port is in use, or ``host`` is no address of this machine.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As uvicorn binds: a port left in TIME_WAIT by a server that just stopped is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except socket.gaierror as exc:
            raise ConfigError(f"--host {host}: not an address of this machine ({exc})") from None
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"{option} {port}: port {port} on {host} is already in use (another server "
                    f"is listening there); choose another, or {option} 0 for any free port"
                ) from None
            if exc.errno == errno.EACCES:
                raise ConfigError(
                    f"{option} {port}: not allowed to listen on port {port} (ports below 1024 "
                    f"need root); choose another, or {option} 0 for any free port"
                ) from None
            raise ConfigError(f"--host {host}: cannot listen there ({exc.strerror})") from None
        return int(sock.getsockname()[1])


def check_reachable(policy: str | None, option: str) -> None:
    """Refuse an ``openai:<url>#<model>`` policy whose server accepts no connection; any other
    policy (and any answer at all, even an HTTP error) passes.

    Raises:
        ConfigError: naming ``option``, the URL and why nothing answered there.
    """
    if policy is None or not policy.startswith(OPENAI_PREFIX):
        return
    base_url, _ = parse_openai_spec(policy)
    url = urlsplit(base_url)
    if url.hostname is None:
        raise ConfigError(f"{option}: {base_url!r} is not a URL such as http://127.0.0.1:8000/v1")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if isinstance(exc, TimeoutError):
            why = f"no answer in {REACH_TIMEOUT_S:g} s"
        raise ConfigError(
            f"{option}: no server answers at {base_url} ({why}); start it, or check the URL"
        ) from None
