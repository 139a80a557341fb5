"""Trajectory file formats by name: one JSON record per line, read whole or not at all.

``FORMATS`` holds each format's reader (record -> ``Trajectory``) and writer. Reading a file
streams it; the first bad record stops everything with ``file:line: field: what is wrong``, so a
caller stores all of a file or nothing. Writing is atomic (``write_jsonl_lines``). A record that
carries no id gets one derived from its content, so importing the same file again finds the
same trajectories (``--skip-existing``).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajforge.errors import DataError
from trajforge.formats.jsonl import (
    iter_jsonl_lines,
    json_error,
    parse_trajectory_line,
    write_jsonl_lines,
)
from trajforge.formats.openai_chat import from_openai_chat, to_openai_chat
from trajforge.formats.sharegpt import from_sharegpt, to_sharegpt
from trajforge.registry import Registry
from trajforge.schema import Trajectory

RecordReader = Callable[[dict[str, Any], str], Trajectory]
"""``read(record, record_id) -> Trajectory``; ``DataError`` names the bad field."""


@dataclass(frozen=True)
class RecordFormat:
    """A JSONL trajectory format: how one record reads and writes."""

    name: str
    summary: str
    read: RecordReader
    write: Callable[[Trajectory], dict[str, Any]]


FORMATS: Registry[RecordFormat] = Registry("format")


def _register(fmt: RecordFormat) -> None:
    FORMATS.add(fmt.name, fmt)


def _read_openai(record: dict[str, Any], record_id: str) -> Trajectory:
    return from_openai_chat(
        record,
        task_id=str(record.get("task_id") or record_id),
        id=str(record.get("id") or record_id),
    )


def _read_sharegpt(record: dict[str, Any], record_id: str) -> Trajectory:
    task_id = str(record.get("task_id") or record.get("id") or record_id)
    return from_sharegpt(record, task_id=task_id, id=str(record.get("id") or record_id))


_register(
    RecordFormat(
        "trajforge",
        "trajforge's own schema: every field, token ids included",
        lambda record, _: Trajectory.model_validate(record),
        lambda traj: traj.model_dump(mode="json"),
    )
)
_register(
    RecordFormat(
        "openai",
        "OpenAI chat: {messages, tools} (TRL's conversational format)",
        _read_openai,
        to_openai_chat,
    )
)
_register(
    RecordFormat(
        "sharegpt",
        "ShareGPT: {conversations: [{from, value}], system, tools}",
        _read_sharegpt,
        to_sharegpt,
    )
)


def record_id(raw: bytes) -> str:
    """A stable id for a record without one: a digest of its bytes."""
    return hashlib.blake2b(raw.strip(), digest_size=16).hexdigest()


def read_records(path: str | os.PathLike[str], fmt: RecordFormat) -> Iterator[Trajectory]:
    """The trajectories of a JSONL file in format ``fmt``, one at a time.

    Raises:
        DataError: at the first bad record, naming ``file:line`` and the field.
    """
    path = Path(path)
    for lineno, raw in iter_jsonl_lines(path):
        where = f"{path}:{lineno}"
        if fmt.name == "trajforge":
            yield parse_trajectory_line(raw, where=where)
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError:
            raise DataError(json_error(raw, where)) from None
        if not isinstance(record, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
        try:
            yield fmt.read(record, record_id(raw))
        except DataError as exc:
            raise DataError(f"{where}: {str(exc).removeprefix('record: ')}") from None


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk load. Trajectories are acyclic and all
    kept, so its passes over the growing heap find nothing; they halved the import rate
    (``bench/formats.py``). Reference counting still frees everything as usual."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_records(path: str | os.PathLike[str], fmt: RecordFormat) -> list[Trajectory]:
    """Every trajectory of the file, or ``DataError`` at the first bad record (nothing partial)."""
    with paused_gc():
        return list(read_records(path, fmt))


def write_records(
    path: str | os.PathLike[str], trajectories: Iterable[Trajectory], fmt: RecordFormat
) -> int:
    """Write ``trajectories`` in format ``fmt`` atomically; how many were written."""
    if fmt.name == "trajforge":
        lines = (t.model_dump_json().encode() for t in trajectories)
    else:
        lines = (json.dumps(fmt.write(t), ensure_ascii=False).encode() for t in trajectories)
    return write_jsonl_lines(path, lines)
