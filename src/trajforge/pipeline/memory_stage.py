"""Experience memory in an experiment: a ``memory`` stage distils the trajectories of earlier
stages into a memory file, as ``trajforge memory build`` does (the same ``build_memory``), and
an ``eval`` stage reads a memory (a memory stage's file, or any memory file) as ``--memory``
does, growing its own copy with ``memory_update`` so that what it was given never changes."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from trajforge.errors import ConfigError
from trajforge.memory import MEMORY_KEY, Memory, build_memory, stored_episodes
from trajforge.pipeline.config import EvalStage, MemoryStage
from trajforge.schema import Trajectory
from trajforge.store import TrajectoryStore

MEMORY_FILE = "memory.jsonl"
"""A memory stage's output, and an updating eval's copy, in the stage's folder."""


def shown_path(path: Path, run_dir: Path) -> str:
    """``path`` as a record keeps it: inside the run folder relative to it (a moved run
    folder still finds it), else as given."""
    return str(path.relative_to(run_dir)) if path.is_relative_to(run_dir) else str(path)


def memory_stage(
    store_path: Path, stage: MemoryStage, runs: Sequence[str], out: Path, run_dir: Path
) -> dict[str, Any]:
    """Distil every episode of ``runs`` into the memory file ``out``; the record says where it
    is (``path``, relative to ``run_dir``) and how many items it holds."""
    with TrajectoryStore(store_path) as db:
        trajectories = stored_episodes(db, runs)
    if not trajectories:
        raise ConfigError(
            f"memory stage {stage.name!r}: the runs it reads ({', '.join(runs)}) hold no "
            "trajectories"
        )
    built = asyncio.run(build_memory(trajectories, stage.distiller, out))
    text = (
        f"{built.items} memory items distilled from {built.trajectories} trajectories of "
        f"{len(runs)} run(s) ({built.from_successes} from successes, {built.from_failures} "
        "from failures)" + (f"; no item for {built.skipped}" if built.skipped else "")
    )
    return {
        "runs": list(runs),
        "path": shown_path(out, run_dir),
        **dataclasses.asdict(built),
        "text": text,
    }


def eval_memory(source: Path, stage: EvalStage, env: str, folder: Path, console: Console) -> Memory:
    """The memory eval ``stage`` reads from ``source`` for ``env``: with ``memory_update``, a
    copy in the stage's ``folder`` that the eval grows. Items of other envs are warned about
    and left out."""
    if stage.memory_update:
        copy = folder / MEMORY_FILE
        # A resumed attempt keeps its copy: the episodes it already stored have grown it.
        if not copy.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, copy)
        source = copy
    memory = Memory.open(source, env, stage.memory_k, stage.memory_embed)
    if warning := memory.ignored_warning():
        console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True)
    return memory


def memory_figures(
    trajectories: Sequence[Trajectory], memory: Memory, items_before: int, run_dir: Path
) -> tuple[dict[str, Any], str]:
    """An eval's memory record (the file, k, items retrieved per episode on average, items
    learnt while it ran) and the clause its summary line adds."""
    counts = [len((t.metadata.get(MEMORY_KEY) or {}).get("items", [])) for t in trajectories]
    mean = sum(counts) / len(counts) if counts else 0.0
    learnt = len(memory.items) - items_before
    record = {
        "path": shown_path(memory.path, run_dir),
        "k": memory.k,
        "items": len(memory.items),
        "retrieved_mean": round(mean, 3),
        "learnt": learnt,
    }
    text = f"memory: {mean:.2f} items retrieved per episode"
    if learnt:
        text += f", {learnt} learnt"
    return record, text
