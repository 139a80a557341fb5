"""``python -m trajforge.envs.openenv.launch REF --port P``: serve an OpenEnv environment.

``REF`` (``package.module:attr`` or ``path/file.py:attr``) names either the ASGI app an
environment's ``server/app.py`` builds with OpenEnv's ``create_app``, or an OpenEnv
``Environment`` subclass (``apps``). Only 127.0.0.1 is listened on. ``OpenEnvProcess`` runs
this in a subprocess. The user's module is imported before openenv-core, so what it prints and
how it fails reach the stderr tail at once, not after openenv-core's seconds of imports.
"""

from __future__ import annotations

import argparse

import uvicorn

from trajforge.registry import load_ref

HOST = "127.0.0.1"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m trajforge.envs.openenv.launch")
    parser.add_argument("ref", help="module:attr or file.py:attr (an app or Environment class)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-sessions", type=int, default=8)
    args = parser.parse_args(argv)
    target = load_ref(args.ref, "openenv")
    # lazy: openenv-core loads gradio (seconds); the user's module is imported first, above
    from trajforge.envs.openenv.apps import app_for

    app = app_for(target, args.ref, args.max_sessions)
    uvicorn.run(app, host=HOST, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
