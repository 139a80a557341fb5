"""``trajforge memory build``: memory items distilled from stored trajectories (the options
that read a memory during a run are in ``cli.memory_options``)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from trajforge.cli.common import (
    JsonOption,
    StoreOption,
    console,
    existing_store_path,
    print_json,
)
from trajforge.errors import StoreError
from trajforge.memory import RULES, build_memory, stored_episodes
from trajforge.store import TrajectoryStore


def build_command(
    out: Annotated[Path, typer.Option("--out", help="The memory file to write (JSONL).")],
    run: Annotated[
        list[str] | None,
        typer.Option("--run", help="Distil this run's trajectories (repeatable; default: all)."),
    ] = None,
    env: Annotated[str | None, typer.Option("--env", help="Only trajectories of this env.")] = None,
    distiller: Annotated[
        str,
        typer.Option(
            "--distiller",
            help="rules (templates: what worked, what failed and how) or a policy that writes "
            "each item: embedded, tiny, a model folder, openai:<url>#<model>.",
        ),
    ] = RULES,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Distil memory items (title, when it applies, the lesson, the trajectory ids it came
    from) from stored trajectories, successes and failures alike."""
    path = existing_store_path(store)
    with TrajectoryStore(path) as db:
        runs = [db.resolve_run_id(r) for r in run] if run else [None]
        trajectories = stored_episodes(db, runs, env)
    if not trajectories:
        raise StoreError(f"memory build: no trajectories in {path} match --run and --env")
    built = asyncio.run(build_memory(trajectories, distiller, out))
    if as_json:
        print_json({"out": str(out), **dataclasses.asdict(built)})
        return
    console.print(built.text(out))


def register(app: typer.Typer) -> None:
    """Add ``trajforge memory build``."""
    group = typer.Typer(help="Experience memory: lessons distilled from trajectories.")
    group.command("build")(build_command)
    app.add_typer(group, name="memory")
