"""Which format a trajectory file is in, told from its name and its first record, for ``import``
without ``--format`` and for the hint that a wrong ``--format`` gets. Only an unambiguous file is
named: each format's records have keys that no other format's records have at their top level."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trajforge.errors import DataError
from trajforge.formats.jsonl import iter_jsonl_lines, json_error
from trajforge.formats.records import FORMATS, ONE_RECORD_PER_LINE, RecordFormat

# The top-level keys that mark each format's records, checked in this order (a trajforge record
# has "messages" too, an OpenAI chat record has no "task").
_MARKS: tuple[tuple[str, frozenset[str]], ...] = (
    ("trajforge", frozenset({"task", "messages"})),
    ("adp", frozenset({"content", "schema_version"})),
    ("adp", frozenset({"content", "details"})),
    ("atif", frozenset({"agent", "steps"})),
    ("sharegpt", frozenset({"conversations"})),
    ("trl-prompt-completion", frozenset({"prompt", "completion"})),
    ("trl-vision", frozenset({"messages", "images"})),
    ("openai", frozenset({"messages"})),
    ("responses", frozenset({"input"})),
    ("otel", frozenset({"resourceSpans"})),
    ("otel", frozenset({"resourceLogs"})),
    ("inspect", frozenset({"eval", "samples"})),
)


def readable(fmt: RecordFormat) -> bool:
    """Whether ``import`` can read files of ``fmt``."""
    return fmt.read is not None or fmt.read_file is not None


def writable(fmt: RecordFormat) -> bool:
    """Whether ``export`` can write files of ``fmt``."""
    return fmt.write is not None or fmt.write_pair is not None


def format_of_record(record: Any) -> str | None:
    """The format whose records look like ``record``, or ``None``."""
    if not isinstance(record, Mapping):
        return None
    keys = record.keys()
    return next((name for name, marks in _MARKS if marks <= keys), None)


def detect_format(path: Path) -> RecordFormat:
    """The format of the file at ``path``, told from its name and first record.

    Raises:
        DataError: the file cannot be read, its first record is not JSON, or its records look
            like no format's (the message lists them and says to pass ``--format``).
    """
    if path.suffix == ".eval" and zipfile.is_zipfile(path):
        return FORMATS.get("inspect")
    if path.suffix == ".parquet":
        name = format_of_record(dict.fromkeys(_parquet_columns(path)))
    else:
        first = _first_record(path)
        if isinstance(first, list):
            raise DataError(f"{path}: a JSON array; {ONE_RECORD_PER_LINE}")
        name = format_of_record(first)
    if name is None:
        names = ", ".join(n for n in FORMATS.names() if readable(FORMATS.get(n)))
        raise DataError(
            f"{path}: cannot tell the format from its first record; pass --format ({names})"
        )
    return FORMATS.get(name)


def likely_format(path: Path) -> str | None:
    """The format the file looks like, or ``None`` (unreadable, or like none): a hint."""
    try:
        return detect_format(path).name
    except DataError:
        return None


def _first_record(path: Path) -> Any:
    """The file's first JSON record: the whole file when it is one JSON document (an OTLP
    export, an Inspect log), else its first line."""
    first = next(iter_jsonl_lines(path), None)
    if first is None:
        raise DataError(f"{path}: the file is empty")
    lineno, raw = first
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        pass
    try:
        return json.loads(path.read_bytes())
    except json.JSONDecodeError:
        raise DataError(json_error(raw, f"{path}:{lineno}")) from None


def _parquet_columns(path: Path) -> list[str]:
    import pyarrow.parquet as pq  # lazy: pyarrow takes 0.3 s; only Parquet files need it

    try:
        return list(pq.read_schema(path).names)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable Parquet file: {exc}") from None
