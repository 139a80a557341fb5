"""Trajectories as JSON Lines: one trajectory per line, streamed in and written atomically.

Every bad record raises ``DataError`` naming ``file:line``, the field path and what is wrong, on
one line, so a user can open the file at the right place.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trajforge.errors import DataError
from trajforge.schema import Trajectory

# Model validators prefix their message with the field they are about ("messages[3].role: ...").
_FIELD_PREFIX = re.compile(r"^([A-Za-z_]\w*(?:\[\d+\]|\.[A-Za-z_]\w*)*): ")
_MAX_INPUT_REPR = 60
_UTF8_BOM = b"\xef\xbb\xbf"


def read_trajectories(path: str | os.PathLike[str]) -> Iterator[Trajectory]:
    """Yield the trajectories of a JSONL file one at a time; blank lines are skipped.

    Raises:
        DataError: on the first bad record, naming file, line and field.
    """
    for lineno, raw in iter_jsonl_lines(path):
        yield parse_trajectory_line(raw, where=f"{path}:{lineno}")


def load_trajectories(path: str | os.PathLike[str]) -> list[Trajectory]:
    """All trajectories of a JSONL file, or ``DataError`` if any record is bad (nothing partial)."""
    return list(read_trajectories(path))


def write_trajectories(path: str | os.PathLike[str], trajs: Iterable[Trajectory]) -> int:
    """Write trajectories as JSONL atomically and return how many were written."""
    return write_jsonl_lines(path, (t.model_dump_json().encode() for t in trajs))


def read_json_objects(path: Path, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each line of a JSONL file of ``what`` (e.g. ``task``) as a JSON object, with its line
    number; blank lines are skipped. A file that cannot be read, or a line that is not a JSON
    object, raises ``DataError`` naming ``file:line``."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DataError(f"{path}: cannot read {what} file: {exc.strerror or exc}") from None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(record, dict):
            raise DataError(f"{where}: a {what} must be a JSON object, got {type(record).__name__}")
        yield lineno, record


def iter_jsonl_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """``(line number, line)`` of every non-blank line; ``DataError`` if the file is unreadable."""
    path = Path(path)
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with handle:
        for lineno, raw in enumerate(handle, start=1):
            # Editors on Windows start a UTF-8 file with a byte-order mark; JSON has no place for it.
            line = raw.removeprefix(_UTF8_BOM) if lineno == 1 else raw
            if line.strip():
                yield lineno, line


def write_jsonl_lines(path: str | os.PathLike[str], lines: Iterable[bytes]) -> int:
    """Write JSON lines atomically and return how many were written.

    The lines go to a temporary file in the destination folder that replaces ``path`` only once
    complete, so readers never see a half-written file and a failure leaves the old file intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    count = 0
    try:
        with os.fdopen(fd, "wb") as out:
            for line in lines:
                out.write(line)
                out.write(b"\n")
                count += 1
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp_name, new_file_mode())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return count


def new_file_mode() -> int:
    """The mode ``open`` gives a new file under the process's umask (0644 under 022): what an
    atomically written file (``mkstemp`` makes it 0600) is given before it replaces the old."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def parse_trajectory_line(raw: bytes | str, *, where: str) -> Trajectory:
    """Validate one JSON record as a ``Trajectory``; ``where`` (``file:line``) prefixes errors."""
    try:
        return Trajectory.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if any(err["type"] == "json_invalid" for err in errors):
            raise DataError(json_error(raw, where)) from None
        raise DataError(format_validation_error(exc, where)) from None


def format_validation_error(exc: ValidationError, where: str) -> str:
    """One line: ``where: field.path: what is wrong`` for the first error, counting the rest."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    field, message = _field_and_message(first["loc"], first["msg"])
    got = ""
    if first["type"] not in ("value_error", "assertion_error", "missing") and _is_scalar(
        first.get("input")
    ):
        got = f" (got {_short_repr(first['input'])})"
    more = (
        f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
        if len(errors) > 1
        else ""
    )
    return f"{where}: {field}: {message}{got}{more}"


def _field_and_message(loc: tuple[int | str, ...], msg: str) -> tuple[str, str]:
    parts = [str(p) for p in loc]
    message = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    match = _FIELD_PREFIX.match(message)
    if match:
        parts.extend(re.sub(r"\[(\d+)\]", r".\1", match.group(1)).split("."))
        message = message[match.end() :]
    field = ".".join(parts) if parts else "(record)"
    return field, " ".join(message.split())


def json_error(raw: bytes | str, where: str) -> str:
    """``where:column: invalid JSON: why`` for a line that does not parse."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    try:
        # Without its line end: a line cut short fails at its end, not at column 1 of the next.
        json.loads(text.rstrip("\r\n"))
    except json.JSONDecodeError as err:
        return f"{where}:{err.colno}: invalid JSON: {err.msg}"
    return f"{where}: invalid JSON"


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_INPUT_REPR else text[: _MAX_INPUT_REPR - 3] + "..."
