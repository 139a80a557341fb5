"""Run the gateway's app with uvicorn: in the foreground (``trajforge serve``) or on a thread
for the length of a ``with`` block (``collect`` and tests), always on a local address."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import uvicorn
from fastapi import FastAPI

from trajforge.errors import TrajforgeError
from trajforge.serve.app import create_app
from trajforge.serve.gateway import ChatGateway

START_TIMEOUT_S = 30.0


def _server(app: FastAPI, host: str, port: int, graceful_s: int | None = None) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=graceful_s,
    )
    return uvicorn.Server(config)


def serve_forever(gateway: ChatGateway, host: str, port: int) -> None:
    """Serve until Ctrl-C or SIGTERM, which stop it cleanly (uvicorn finishes the calls in
    flight, then raises the signal again; here that is the normal end)."""
    serve_app_forever(create_app(gateway), host, port)


def serve_app_forever(app: FastAPI, host: str, port: int, graceful_s: int | None = None) -> None:
    """Serve ``app`` until Ctrl-C or SIGTERM (see ``serve_forever``); requests still running
    ``graceful_s`` seconds later (open event streams) are cancelled (None: wait for them)."""
    with contextlib.suppress(KeyboardInterrupt):
        _server(app, host, port, graceful_s).run()


def serving(
    gateway: ChatGateway, host: str = "127.0.0.1", port: int = 0
) -> AbstractContextManager[str]:
    """Serve ``gateway`` on a thread while the block runs; yields its base URL."""
    return serving_app(create_app(gateway), host, port)


@contextmanager
def serving_app(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve ``app`` on a thread while the block runs (uvicorn leaves signals to the main
    thread there); yields the base URL (``http://host:port``; port 0 picks a free one)."""
    server = _server(app, host, port)
    thread = threading.Thread(target=server.run, name="trajforge-gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise TrajforgeError(f"the gateway did not start on {host}:{port}")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()
    try:
        yield f"http://{bound[0]}:{bound[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
