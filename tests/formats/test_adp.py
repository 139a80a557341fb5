"""ADP records keep the user's own ``details`` through a round trip, and any 1.x version reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajforge.errors import DataError
from trajforge.formats.adp import ADP_VERSION, from_adp, to_adp
from trajforge.formats.records import FORMATS, read_records, write_records

RECORD = {
    "schema_version": "1.2.0",
    "id": "adp-7",
    "content": [
        {"class_": "text_observation", "content": "Say hi.", "source": "user"},
        {"class_": "message_action", "content": "hi"},
    ],
    "details": {"dataset": "mine", "annotator": {"name": "ada", "score": 4}},
}


def test_an_imported_records_details_survive_export(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(RECORD) + "\n")
    (traj,) = read_records(source, FORMATS.get("adp"))
    out = tmp_path / "out.jsonl"
    write_records(out, [traj], FORMATS.get("adp"))
    written = json.loads(out.read_text())
    assert {k: v for k, v in written["details"].items() if k != "trajforge"} == RECORD["details"]
    assert written["details"]["trajforge"]["task"]["prompt"] == "Say hi."
    (again,) = read_records(out, FORMATS.get("adp"))
    assert to_adp(again)["details"] == written["details"]  # and again, unchanged


def test_a_newer_minor_version_reads_and_a_newer_major_is_refused() -> None:
    newer = {**RECORD, "schema_version": "1.9.0", "content": [
        {**RECORD["content"][0], "added_in_1_9": True}, RECORD["content"][1]]}  # fmt: skip
    assert [m.content for m in from_adp(newer).messages] == ["Say hi.", "hi"]
    assert from_adp({**RECORD, "schema_version": "1.0.0"}).id == "adp-7"
    with pytest.raises(DataError, match=r"schema_version: '2.0.0' is ADP 2.x; .* reads ADP 1.x"):
        from_adp({**RECORD, "schema_version": "2.0.0"})
    with pytest.raises(DataError, match=r"schema_version: 'v1' is not a version such as"):
        from_adp({**RECORD, "schema_version": "v1"})
    assert to_adp(from_adp(RECORD))["schema_version"] == ADP_VERSION
