"""``trajforge memory build`` (items distilled from stored trajectories) and the ``--memory``,
``--memory-k`` and ``--memory-update`` options of ``rollout``, ``eval`` and ``collect``."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict

from trajforge.cli.common import (
    JsonOption,
    StoreOption,
    console,
    err_console,
    print_json,
    resolve_store_path,
)
from trajforge.errors import ConfigError, StoreError
from trajforge.memory_bank.distil import RULES, build_memory, stored_episodes
from trajforge.memory_bank.items import read_memory
from trajforge.memory_bank.live import DEFAULT_K, Memory
from trajforge.store import TrajectoryStore

MEMORY_OPTION = "--memory"

MemoryOption = Annotated[
    Path | None,
    typer.Option(
        MEMORY_OPTION,
        metavar="FILE.jsonl",
        help="Put the top --memory-k items of this memory (trajforge memory build) for each "
        "task into its prompt, by BM25; what was retrieved is in each trajectory's metadata.",
    ),
]
MemoryKOption = Annotated[
    int, typer.Option("--memory-k", help="Memory items retrieved per task (with --memory).")
]
MemoryUpdateOption = Annotated[
    bool,
    typer.Option(
        "--memory-update",
        help="Grow the --memory file during the run: each finished episode adds an item.",
    ),
]


class MemoryPlan(BaseModel):
    """The memory a run reads, stored with it so that ``--resume`` reads it again."""

    model_config = ConfigDict(extra="forbid")

    path: str
    k: int = DEFAULT_K
    update: bool = False

    def open(self, env: str) -> Memory:
        """The memory for ``env``, saying how many items of other envs it leaves out."""
        memory = Memory.load(Path(self.path), env, self.k)
        if warning := memory.ignored_warning():
            err_console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True)
        return memory


def plan_memory(
    path: Path | None, k: int, update: bool, ray: bool, user: str | None
) -> MemoryPlan | None:
    """The memory ``--memory`` asks for (None: none), its file read whole before anything
    runs; bad values are one line each."""
    if path is None:
        if update:
            raise ConfigError("--memory-update: give --memory FILE.jsonl (the memory to grow)")
        return None
    if k < 1:
        raise ConfigError(f"--memory-k: must be at least 1, got {k}")
    if ray:
        raise ConfigError(f"{MEMORY_OPTION}: a memory is read in this process; drop --ray")
    if user is not None:
        # The simulated user is bound to the env itself, which the memory wraps.
        raise ConfigError(f"{MEMORY_OPTION}: not with --user (a policy as the simulated user)")
    read_memory(path)
    return MemoryPlan(path=str(path.absolute()), k=k, update=update)


def memory_meta(meta: dict[str, Any]) -> MemoryPlan | None:
    """The memory a stored run read (None: none)."""
    found = meta.get("memory")
    return MemoryPlan.model_validate(found) if found else None


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
    path = resolve_store_path(store)
    if not path.exists():
        raise StoreError(f"no store at {path} (pass --store or set TRAJFORGE_STORE)")
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
