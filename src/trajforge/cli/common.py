"""Shared CLI pieces: the console, store-path resolution, JSON output."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

DEFAULT_STORE = Path("runs") / "trajforge.db"

StoreOption = Annotated[
    Path | None,
    typer.Option(
        "--store",
        help="SQLite store path (default: $TRAJFORGE_STORE, else ./runs/trajforge.db).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def resolve_store_path(store: Path | None) -> Path:
    if store is not None:
        return store
    env = os.environ.get("TRAJFORGE_STORE")
    return Path(env) if env else DEFAULT_STORE


def print_json(data: Any) -> None:
    """JSON on stdout, bypassing Rich so that it stays machine-readable."""
    typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
