"""The exactness label: optional (rows from before schema 1.2 read as exact), and a trajectory
that is not exact says why."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trajforge.schema import Exactness, ExactnessKind, Trajectory
from trajforge.schema.synthetic import synthetic_trajectory


def test_a_row_without_the_label_reads_as_exact() -> None:
    row = synthetic_trajectory(0).model_dump(mode="json")
    row.pop("exactness")
    row["schema_version"] = "1.1.0"
    assert Trajectory.model_validate(row).exactness.is_exact


def test_a_label_that_is_not_exact_needs_a_reason_and_only_a_split_names_its_origin() -> None:
    with pytest.raises(ValidationError, match="a split trajectory needs a reason"):
        Exactness(kind=ExactnessKind.SPLIT)
    with pytest.raises(ValidationError, match="only a split trajectory breaks off"):
        Exactness(kind=ExactnessKind.RE_RENDERED, reason="text", split_from="t1")
    label = Exactness(kind=ExactnessKind.SPLIT, reason="edited", split_from="t1")
    row = synthetic_trajectory(0).model_copy(update={"exactness": label}).model_dump(mode="json")
    assert row["exactness"] == {
        "kind": "split",
        "reason": "edited",
        "split_from": "t1",
        "rendered_prefix": None,
    }
    assert Trajectory.model_validate(row).exactness == label
