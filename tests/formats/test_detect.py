"""A file's format told from its name and first record, for ``import`` without ``--format``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajforge.errors import DataError
from trajforge.formats.detect import detect_format, likely_format, readable, writable
from trajforge.formats.records import FORMATS, read_records, write_records
from trajforge.schema.synthetic import synthetic_trajectory

WRITTEN_AND_READ = [
    n for n in FORMATS.names() if readable(FORMATS.get(n)) and writable(FORMATS.get(n))
]


def test_readable_and_writable_formats() -> None:
    assert WRITTEN_AND_READ == [
        "adp",
        "atif",
        "openai",
        "otel",
        "responses",
        "sharegpt",
        "trajforge",
        "trl-prompt-completion",
        "trl-vision",
    ]
    assert not readable(FORMATS.get("trl-preference")) and not writable(FORMATS.get("inspect"))


TABULAR = ["openai", "sharegpt", "trl-prompt-completion", "trl-vision"]
"""The formats written as Parquet too (datasets for TRL)."""


@pytest.mark.parametrize(
    ("name", "suffix"),
    [(n, ".jsonl") for n in WRITTEN_AND_READ] + [(n, ".parquet") for n in TABULAR],
)
def test_what_each_format_writes_is_detected_as_it(tmp_path: Path, name: str, suffix: str) -> None:
    path = tmp_path / f"data{suffix}"
    write_records(path, [synthetic_trajectory(0), synthetic_trajectory(1)], FORMATS.get(name))
    assert detect_format(path).name == name
    assert len(list(read_records(path, detect_format(path)))) >= 1


def test_a_whole_json_document_is_read_as_one_record(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"resourceSpans": []}, indent=2))
    assert detect_format(path).name == "otel"


def test_a_file_of_no_format_names_the_formats_and_the_option(tmp_path: Path) -> None:
    path = tmp_path / "qa.jsonl"
    path.write_text('{"question": "q", "answer": "a"}\n')
    with pytest.raises(
        DataError, match=r"qa.jsonl: cannot tell the format .*; pass --format \(adp, "
    ):
        detect_format(path)
    assert likely_format(path) is None


def test_an_empty_or_broken_file_is_refused_naming_where(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match=r"empty\.jsonl: the file is empty"):
        detect_format(empty)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"messages": [1, }\n')
    with pytest.raises(DataError, match=r"broken.jsonl:1:18: invalid JSON: Expecting value"):
        detect_format(broken)


def test_a_byte_order_mark_is_not_json_s_problem(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    record = {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    }
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(record).encode() + b"\n")
    fmt = detect_format(path)
    assert fmt.name == "openai"
    (traj,) = read_records(path, fmt)
    assert traj.messages[0].content == "hi"


@pytest.mark.parametrize(
    ("text", "fmt"),
    [('[\n {"messages": []}\n]\n', None), ('[{"messages": []}]\n', None),
     ('[\n {"messages": []}\n]\n', "openai"), ('[{"messages": []}]\n', "openai")],
)  # fmt: skip
def test_a_json_array_is_told_to_be_json_lines(tmp_path: Path, text: str, fmt: str | None) -> None:
    path = tmp_path / "records.json"
    path.write_text(text)
    with pytest.raises(DataError, match="import reads JSON Lines: each record a JSON object"):
        list(read_records(path, FORMATS.get(fmt) if fmt else detect_format(path)))
