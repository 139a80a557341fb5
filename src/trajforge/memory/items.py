"""Memory items and the memory file: one JSON object a line, each item a lesson distilled from
stored trajectories with the ids it came from (its provenance).

A file that is not a memory file is refused whole, naming the first bad line; items of
another env are set aside by ``for_env`` (the caller warns), never retrieved.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from trajforge.configfile import validated
from trajforge.errors import ConfigError


class MemoryKind(StrEnum):
    """Whether an item was learnt from a success or from a failure."""

    SUCCESS = "success"
    FAILURE = "failure"


class MemoryItem(BaseModel):
    """One lesson: what it is about, when it applies, the lesson, and where it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    env: str = Field(min_length=1)
    title: str = Field(min_length=1)
    applies_when: str = Field(min_length=1)
    lesson: str = Field(min_length=1)
    kind: MemoryKind
    sources: list[str] = Field(min_length=1)
    """The ids of the trajectories the item was distilled from."""
    distiller: str = "rules"
    """What distilled it: ``rules`` (the templates) or the policy's name."""

    def text(self) -> str:
        """What retrieval matches a task against."""
        return f"{self.title}\n{self.applies_when}\n{self.lesson}"


def _item(path: Path, lineno: int, line: str) -> MemoryItem:
    where = f"{path}:{lineno}"
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not a memory item (invalid JSON: {exc.msg})") from None
    return validated(MemoryItem, data, where, "item")


def read_memory(path: Path) -> list[MemoryItem]:
    """Every item of the memory file at ``path`` (blank lines skipped); the first bad line,
    or an id given twice, refuses the whole file as ``path:line: what is wrong``."""
    if not path.is_file():
        raise ConfigError(f"{path}: no memory file (build one with `trajforge memory build`)")
    items: list[MemoryItem] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            item = _item(path, lineno, line)
            if item.id in seen:
                raise ConfigError(
                    f"{path}:{lineno}: id {item.id!r} repeats the item of line {seen[item.id]}"
                )
            seen[item.id] = lineno
            items.append(item)
    return items


def item_line(item: MemoryItem) -> str:
    """``item`` as one line of a memory file."""
    return json.dumps(item.model_dump(mode="json"), ensure_ascii=False) + "\n"


def write_memory(path: Path, items: Iterable[MemoryItem]) -> int:
    """Write ``items`` as the memory file at ``path`` (replacing it); returns how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [item_line(i) for i in items]
    path.write_text("".join(lines), encoding="utf-8")
    return len(lines)


def for_env(items: Sequence[MemoryItem], env: str) -> tuple[list[MemoryItem], list[MemoryItem]]:
    """The items of ``env``, and those of other envs (to warn about, never to use)."""
    mine = [i for i in items if i.env == env]
    return mine, [i for i in items if i.env != env]
