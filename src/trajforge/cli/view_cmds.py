"""``trajforge view [RUN_DIR | --store PATH]``: browse a store's trajectories in a web browser."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from trajforge.cli.common import StoreOption, err_console, resolve_store_path
from trajforge.cli.preflight import claim_port
from trajforge.errors import ConfigError, DataError, StoreError
from trajforge.pipeline import STORE_FILE
from trajforge.report import REPORT_FILE, RESULTS_FILE

DEFAULT_PORT = 8765


def _locate(target: Path | None, store: Path | None) -> tuple[Path, Path | None]:
    """The store to open and the run folder whose curves to show (if the target is one)."""
    if target is not None and store is not None:
        raise ConfigError("view: give a run folder or --store, not both")
    if target is None:
        return resolve_store_path(store), None
    if target.is_dir():
        path = _run_folder_store(target)
        if not path.is_file():
            raise StoreError(f"{target}: no {STORE_FILE} here (is it a trajforge run folder?)")
        return path, target
    if target.is_file():
        return target, None
    raise StoreError(f"{target}: no such run folder or store file")


def _run_folder_store(run_dir: Path) -> Path:
    """The store of a run folder: an experiment's ``store.db``, or the one a standalone
    training run's ``results.json`` names (its RL rollouts, or the trajectories it learned
    from), which may lie elsewhere."""
    path = run_dir / STORE_FILE
    results = run_dir / RESULTS_FILE
    if path.is_file() or not results.is_file():
        return path
    try:
        named = json.loads(results.read_text()).get("store", STORE_FILE)
    except json.JSONDecodeError as exc:
        raise DataError(f"{results}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if named is None:
        raise StoreError(
            f"{run_dir}: this training run kept no trajectories (set store: in its config to "
            f"keep its rollouts); its curves are in {run_dir / REPORT_FILE}"
        )
    return run_dir / named


def view(
    target: Annotated[
        Path | None,
        typer.Argument(
            metavar="[RUN_DIR]",
            help="A run folder (runs/<name>/: its store.db and training curves) or a store file.",
            show_default=False,
        ),
    ] = None,
    store: StoreOption = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port (0: any free one).")
    ] = DEFAULT_PORT,
) -> None:
    """Browse runs and trajectories in a web browser: filters, conversations, tokens and loss
    mask, groups with their advantages, diffs, live updates of a run being written."""
    # lazy: the viewer loads fastapi, uvicorn and jinja2 (0.4 s); other commands never need them
    from trajforge.viewer import serve_viewer

    chosen = claim_port(host, port)
    path, run_dir = _locate(target, store)
    serve_viewer(
        path,
        run_dir,
        host,
        chosen,
        started=lambda: err_console.print(
            f"viewing {path} at http://{host}:{chosen}/ — Ctrl-C stops", soft_wrap=True
        ),
    )


def register(app: typer.Typer) -> None:
    """Add ``view`` to ``app``."""
    app.command("view")(view)
