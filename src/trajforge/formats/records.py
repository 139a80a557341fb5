"""Trajectory file formats by name: one JSON record per line, read whole or not at all.

``FORMATS`` holds each format's reader (record -> ``Trajectory``) and writer. Reading a file
streams it; the first bad record stops everything with ``file:line: field: what is wrong``, so a
caller stores all of a file or nothing. Writing is atomic (``write_jsonl_lines``). A record that
carries no id gets one derived from its content, so importing the same file again finds the
same trajectories (``--skip-existing``); the OpenAI, Responses, ShareGPT and TRL writers put the
ids in their records, so a file exported and imported again finds them too.
"""

from __future__ import annotations

import base64
import gc
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajforge.errors import DataError
from trajforge.formats.adp import from_adp, to_adp
from trajforge.formats.atif import read_atif_file, to_atif
from trajforge.formats.inspect_log import read_inspect_log
from trajforge.formats.jsonl import (
    iter_jsonl_lines,
    json_error,
    new_file_mode,
    parse_trajectory_line,
    write_jsonl_lines,
)
from trajforge.formats.openai_chat import from_openai_chat, to_openai_chat
from trajforge.formats.otel import read_otlp_file
from trajforge.formats.otel_export import to_otlp
from trajforge.formats.responses import from_responses, to_responses
from trajforge.formats.sharegpt import from_sharegpt, to_sharegpt
from trajforge.formats.trl import from_prompt_completion, to_preference, to_prompt_completion
from trajforge.formats.trl_vision import from_vision_language, to_vision_language
from trajforge.registry import Registry
from trajforge.schema import Trajectory

RecordReader = Callable[[dict[str, Any], str], Trajectory]
"""``read(record, record_id) -> Trajectory``; ``DataError`` names the bad field."""


@dataclass(frozen=True)
class RecordFormat:
    """A trajectory file format: how one record reads and writes. A pair format writes one
    record per preference pair (two trajectories of one task) and reads none."""

    name: str
    summary: str
    read: RecordReader | None
    write: Callable[[Trajectory], dict[str, Any]] | None
    write_pair: Callable[[Trajectory, Trajectory], dict[str, Any]] | None = None
    read_file: Callable[[Path], Iterator[Trajectory]] | None = None
    """Reads a whole file that is not one record per line (an Inspect log)."""
    links_segments: bool = False
    """Whether a record names the episode and index of a segment (``Trajectory.segment``);
    a format that cannot refuses to write one."""


FORMATS: Registry[RecordFormat] = Registry("format")


def _register(fmt: RecordFormat) -> None:
    FORMATS.add(fmt.name, fmt)


def _with_ids_read(read: Callable[..., Trajectory]) -> RecordReader:
    """``read(record, task_id=..., id=...)`` given the ids the record carries (what
    ``_with_ids`` writes), each the record's derived id where it carries none."""

    def with_ids(record: dict[str, Any], record_id: str) -> Trajectory:
        task_id = str(record.get("task_id") or record_id)
        return read(record, task_id=task_id, id=str(record.get("id") or record_id))

    return with_ids


def _with_ids(
    write: Callable[[Trajectory], dict[str, Any]],
) -> Callable[[Trajectory], dict[str, Any]]:
    """``write`` with the trajectory's and its task's ids in the record, which the readers take
    back: a file exported and imported again names the trajectories already stored. A segment's
    record names its episode and index too (``episode_id``, ``segment_index``)."""

    def with_ids(traj: Trajectory) -> dict[str, Any]:
        link = {}
        if traj.segment is not None:
            link = {"episode_id": traj.segment.episode_id, "segment_index": traj.segment.index}
        return {"id": traj.id, "task_id": traj.task.id, **link, **write(traj)}

    return with_ids


def _read_sharegpt(record: dict[str, Any], record_id: str) -> Trajectory:
    task_id = str(record.get("task_id") or record.get("id") or record_id)
    return from_sharegpt(record, task_id=task_id, id=str(record.get("id") or record_id))


_register(
    RecordFormat(
        "trajforge",
        "trajforge's own schema: every field, token ids included",
        lambda record, _: Trajectory.model_validate(record),
        lambda traj: traj.model_dump(mode="json"),
        links_segments=True,
    )
)
_register(
    RecordFormat(
        "openai",
        "OpenAI chat: {messages, tools} (TRL's conversational format)",
        _with_ids_read(from_openai_chat),
        _with_ids(to_openai_chat),
        links_segments=True,
    )
)
_register(
    RecordFormat(
        "responses",
        "OpenAI Responses API input: {input: [message, function_call, function_call_output "
        "items], tools}",
        _with_ids_read(from_responses),
        _with_ids(to_responses),
        links_segments=True,
    )
)
_register(
    RecordFormat(
        "trl-prompt-completion",
        "TRL conversational prompt/completion: {prompt, completion, tools}",
        _with_ids_read(from_prompt_completion),
        _with_ids(to_prompt_completion),
        links_segments=True,
    )
)
_register(
    RecordFormat(
        "trl-vision",
        "TRL vision-language: {messages (image placeholders), images, tools}",
        _with_ids_read(from_vision_language),
        _with_ids(to_vision_language),
        links_segments=True,
    )
)
_register(
    RecordFormat(
        "trl-preference",
        "TRL conversational preference pairs for DPO: {prompt, chosen, rejected, tools}; "
        "export only, one record per group's best and worst trajectory",
        None,
        None,
        to_preference,
    )
)
_register(
    RecordFormat(
        "adp",
        "Agent Data Protocol standardized trajectories: {schema_version, id, content, details}",
        lambda record, _: from_adp(record),
        to_adp,
    )
)
_register(
    RecordFormat(
        "atif",
        "Harbor's Agent Trajectory Interchange Format (ATIF v1.0-v1.7): {schema_version, "
        "agent, steps}; a file of one document (agent/trajectory.json) or one per line",
        None,
        to_atif,
        read_file=read_atif_file,
    )
)
_register(
    RecordFormat(
        "otel",
        "OpenTelemetry GenAI telemetry as OTLP JSON (spans, and log events with message "
        "content): one trajectory per conversation of a trace; written as chat spans",
        None,
        to_otlp,
        read_file=read_otlp_file,
    )
)
_register(
    RecordFormat(
        "inspect",
        "Inspect AI eval logs (.eval or .json): one trajectory per sample and epoch, with its "
        "scores; import only",
        None,
        None,
        read_file=read_inspect_log,
    )
)
_register(
    RecordFormat(
        "sharegpt",
        "ShareGPT: {conversations: [{from, value}], system, tools}",
        _read_sharegpt,
        _with_ids(to_sharegpt),
        links_segments=True,
    )
)


def record_id(raw: bytes) -> str:
    """A stable id for a record without one: a digest of its bytes."""
    return hashlib.blake2b(raw.strip(), digest_size=16).hexdigest()


def read_records(path: str | os.PathLike[str], fmt: RecordFormat) -> Iterator[Trajectory]:
    """The trajectories of a JSONL (or ``.parquet``) file in format ``fmt``, one at a time.

    Raises:
        DataError: at the first bad record, naming ``file:line`` (or row) and the field.
    """
    path = Path(path)
    if fmt.read_file is not None:
        yield from fmt.read_file(path)
        return
    if fmt.read is None:
        raise DataError(f"format {fmt.name!r} is written, not read ({fmt.summary})")
    if path.suffix == ".parquet":
        yield from _read_parquet(path, fmt.read)
        return
    for lineno, raw in iter_jsonl_lines(path):
        where = f"{path}:{lineno}"
        if fmt.name == "trajforge":
            try:
                yield parse_trajectory_line(raw, where=where)
            except DataError as exc:
                raise DataError(f"{exc}{_not_json_lines(path, lineno)}") from None
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError:
            raise DataError(json_error(raw, where) + _not_json_lines(path, lineno)) from None
        if isinstance(record, list):
            raise DataError(f"{where}: a JSON array; {ONE_RECORD_PER_LINE}")
        if not isinstance(record, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
        try:
            yield fmt.read(record, record_id(raw))
        except DataError as exc:
            raise DataError(f"{where}: {str(exc).removeprefix('record: ')}") from None


ONE_RECORD_PER_LINE = "import reads JSON Lines: each record a JSON object on a line of its own"


def _not_json_lines(path: Path, lineno: int) -> str:
    """Why the first line does not parse when the file is one JSON document over several
    lines (a pretty-printed export), else nothing."""
    if lineno != 1:
        return ""
    try:
        json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return ""
    return f" (the file is one JSON document over several lines; {ONE_RECORD_PER_LINE})"


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
    """Write ``trajectories`` in format ``fmt`` atomically (Parquet for a ``.parquet`` path,
    else JSONL); how many were written."""
    write = fmt.write
    if write is None:
        raise DataError(f"format {fmt.name!r} cannot be written one trajectory at a time")
    trajectories = _linkable(trajectories, fmt)
    if Path(path).suffix == ".parquet":
        return write_parquet(path, (write(t) for t in trajectories))
    if fmt.name == "trajforge":
        lines = (t.model_dump_json().encode() for t in trajectories)
    else:
        lines = (
            json.dumps(write(t), ensure_ascii=False, default=_base64).encode() for t in trajectories
        )
    return write_jsonl_lines(path, lines)


def write_pair_records(
    path: str | os.PathLike[str],
    pairs: Iterable[tuple[Trajectory, Trajectory]],
    fmt: RecordFormat,
) -> int:
    """Write ``(chosen, rejected)`` pairs in pair format ``fmt`` atomically; how many."""
    write_pair = fmt.write_pair
    if write_pair is None:
        raise DataError(f"format {fmt.name!r} writes single trajectories, not pairs")
    rows = (write_pair(*_linkable((chosen, rejected), fmt)) for chosen, rejected in pairs)
    if Path(path).suffix == ".parquet":
        return write_parquet(path, rows)
    return write_jsonl_lines(path, (json.dumps(r, ensure_ascii=False).encode() for r in rows))


def _linkable(trajectories: Iterable[Trajectory], fmt: RecordFormat) -> Iterator[Trajectory]:
    """``trajectories``, or ``DataError`` at the first segment ``fmt`` cannot link to its
    episode."""
    linking = [name for name in FORMATS.names() if FORMATS.get(name).links_segments]
    for traj in trajectories:
        if traj.segment is not None and not fmt.links_segments:
            raise DataError(
                f"trajectory {traj.id} is segment {traj.segment.index} of episode "
                f"{traj.segment.episode_id}, and format {fmt.name!r} cannot link an episode's "
                f"segments; export it as {', '.join(linking)}"
            )
        yield traj


def write_parquet(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> int:
    """Rows as a Parquet file (what ``datasets.load_dataset("parquet")`` reads), atomically.
    Tool parameter schemas differ from tool to tool, so ``tools`` is stored as JSON text."""
    import pyarrow as pa  # lazy: pyarrow takes 0.3 s; only Parquet files need it
    import pyarrow.parquet as pq  # lazy: as above

    records = [_flat_tools(row) for row in rows]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        try:
            table = pa.Table.from_pylist(records)
        except pa.ArrowInvalid as exc:
            # Arrow needs one type per column: text content beside a list of parts is not one.
            raise DataError(
                f"{path}: the records do not fit one Parquet column type ({exc}); message "
                "content mixing text and image parts is written as Parquet by trl-vision, or "
                "as JSON lines"
            ) from None
        pq.write_table(table, tmp)
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(records)


def _base64(value: Any) -> str:
    """Bytes (an image column's) in a JSON line: base64 text."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _flat_tools(row: dict[str, Any]) -> dict[str, Any]:
    if "tools" in row and not isinstance(row["tools"], str):
        return {**row, "tools": json.dumps(row["tools"], ensure_ascii=False)}
    return row


def _read_parquet(path: Path, read: RecordReader) -> Iterator[Trajectory]:
    import pyarrow.parquet as pq  # lazy: pyarrow takes 0.3 s; only Parquet files need it

    try:
        rows = pq.read_table(path).to_pylist()
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable Parquet file: {exc}") from None
    for index, row in enumerate(rows):
        if isinstance(row.get("tools"), str):
            row["tools"] = json.loads(row["tools"])
        try:
            yield read(row, f"{path.name}-{index}")
        except DataError as exc:
            raise DataError(f"{path}: row {index}: {str(exc).removeprefix('record: ')}") from None
