"""The ``--memory``, ``--memory-k``, ``--memory-update`` and ``--memory-embed`` options of
``rollout``, ``eval`` and ``collect``: the memory a run reads, checked before it runs and stored
with it so that ``--resume`` reads the same one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict

from trajforge.cli.common import err_console
from trajforge.cli.option_groups import option_group
from trajforge.errors import ConfigError
from trajforge.memory import DEFAULT_K, Memory, read_memory
from trajforge.policy import check_embedder_name

MEMORY_OPTION = "--memory"
EMBED_OPTION = "--memory-embed"
_MEMORY_META = "memory"
"""The run metadata key of the memory a run reads."""

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
MemoryEmbedOption = Annotated[
    str | None,
    typer.Option(
        EMBED_OPTION,
        metavar="MODEL",
        help="Retrieve --memory items by the cosine similarity of this model's embeddings "
        "instead of BM25: embedded, tiny, or a model folder (an encoder's embeds best, e.g. a "
        "sentence-transformers folder).",
    ),
]


class MemoryPlan(BaseModel):
    """The memory a run reads, stored with it so that ``--resume`` reads it again."""

    model_config = ConfigDict(extra="forbid")

    path: str
    k: int = DEFAULT_K
    update: bool = False
    embed: str | None = None
    """The embedding model retrieval uses (``--memory-embed``); ``None``: BM25."""

    def open(self, env: str) -> Memory:
        """The memory for ``env`` (its items embedded now where ``embed`` names a model),
        saying how many items of other envs it leaves out."""
        memory = Memory.open(Path(self.path), env, self.k, self.embed)
        if warning := memory.ignored_warning():
            err_console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True)
        return memory


@dataclass(frozen=True)
class MemoryOptions:
    """The values of ``--memory``, ``--memory-k``, ``--memory-update`` and ``--memory-embed``
    (``memory_options`` gives them to a command as one)."""

    memory: Path | None = None
    memory_k: int = DEFAULT_K
    memory_update: bool = False
    memory_embed: str | None = None

    def plan(self, ray: bool, user: str | None) -> dict[str, Any]:
        """The run metadata that records the memory ``--memory`` asks for (empty: none), which
        ``stored_memory`` reads back; its file is read whole before anything runs, bad values
        are one line each. ``--memory-embed`` is checked by name here and loaded by
        ``MemoryPlan.open``."""
        embed = self.memory_embed
        if self.memory is None:
            if self.memory_update:
                raise ConfigError("--memory-update: give --memory FILE.jsonl (the memory to grow)")
            if embed is not None:
                raise ConfigError(
                    f"{EMBED_OPTION}: give --memory FILE.jsonl (the memory to search)"
                )
            return {}
        if self.memory_k < 1:
            raise ConfigError(f"--memory-k: must be at least 1, got {self.memory_k}")
        if ray:
            raise ConfigError(f"{MEMORY_OPTION}: a memory is read in this process; drop --ray")
        if user is not None:
            # The simulated user is bound to the env itself, which the memory wraps.
            raise ConfigError(f"{MEMORY_OPTION}: not with --user (a policy as the simulated user)")
        if embed is not None:
            try:
                check_embedder_name(embed)
            except ConfigError as exc:
                raise ConfigError(f"{EMBED_OPTION}: {exc}") from None
            # A folder by its absolute path, so that --resume finds it from any folder.
            if Path(embed).expanduser().is_dir():
                embed = str(Path(embed).expanduser().absolute())
        read_memory(self.memory)
        path = str(self.memory.absolute())
        plan = MemoryPlan(path=path, k=self.memory_k, update=self.memory_update, embed=embed)
        return {_MEMORY_META: plan.model_dump(mode="json")}


NO_MEMORY = MemoryOptions()

memory_options = option_group(
    "memory",
    MemoryOptions,
    {
        "memory": (MemoryOption, None),
        "memory_k": (MemoryKOption, DEFAULT_K),
        "memory_update": (MemoryUpdateOption, False),
        "memory_embed": (MemoryEmbedOption, None),
    },
)
"""Give a command the memory options where its ``memory`` parameter stands."""


def stored_memory(meta: dict[str, Any], env: str) -> tuple[Memory | None, bool]:
    """The memory a run reads, by its stored plan (so ``--resume`` reads the same one), opened
    for ``env`` (None: none), and whether the run grows it."""
    found = meta.get(_MEMORY_META)
    if not found:
        return None, False
    plan = MemoryPlan.model_validate(found)
    return plan.open(env), plan.update
