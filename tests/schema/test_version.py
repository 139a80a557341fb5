"""The published JSON Schema may only change together with a version bump.

When this test fails because you changed the schema on purpose: bump ``SCHEMA_VERSION`` (see
``trajforge/schema/version.py`` for which part) and record the new hash in
``schema_snapshot.json`` next to this file.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from trajforge.schema import SCHEMA_VERSION, json_schema

SNAPSHOT = Path(__file__).with_name("schema_snapshot.json")


def _schema_hash() -> str:
    schema = json_schema()
    schema.pop("$id")
    schema.pop("version")
    return hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()


def test_schema_version_is_semver() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", SCHEMA_VERSION)


def test_schema_changes_come_with_a_version_bump() -> None:
    snapshot = json.loads(SNAPSHOT.read_text())
    current = _schema_hash()
    if current != snapshot["sha256"]:
        assert snapshot["version"] != SCHEMA_VERSION, (
            f"the trajectory JSON Schema changed but SCHEMA_VERSION is still {SCHEMA_VERSION}; "
            "bump it and update tests/schema/schema_snapshot.json"
        )
        raise AssertionError(
            f"schema_snapshot.json records version {snapshot['version']}; update it to "
            f'{{"version": "{SCHEMA_VERSION}", "sha256": "{current}"}}'
        )
    assert snapshot["version"] == SCHEMA_VERSION
