from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from trajforge.errors import DataError
from trajforge.judge.meta_eval import agreement, meta_evaluate, read_labels
from trajforge.schema import Trajectory

Make = Callable[..., Trajectory]


def test_agreement_matches_hand_computed_counts() -> None:
    # tp=3, fp=1, fn=2, tn=4
    pairs = [(True, True)] * 3 + [(True, False)] + [(False, True)] * 2 + [(False, False)] * 4
    r = agreement(pairs)
    assert (r.true_positive, r.false_positive, r.false_negative, r.true_negative) == (3, 1, 2, 4)
    assert r.precision == pytest.approx(3 / 4)
    assert r.recall == pytest.approx(3 / 5)
    assert r.f1 == pytest.approx(2 * 0.75 * 0.6 / 1.35)
    assert r.accuracy == pytest.approx(0.7)
    # p_e = 0.4*0.5 + 0.6*0.5 = 0.5; kappa = (0.7 - 0.5) / 0.5
    assert r.kappa == pytest.approx(0.4)


def test_read_labels_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text('{"trajectory_id": "a", "label": 1}\n{"trajectory_id": "b", "label": "yes"}\n')
    with pytest.raises(DataError, match=r"labels.jsonl:2: field 'label'"):
        read_labels(path)
    path.write_text('{"trajectory_id": "a", "label": true, "env": "sql"}\n')
    assert read_labels(path)[0].env == "sql"


def test_meta_evaluate_per_env_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    rows = [("a", 1, "calc"), ("b", 0, "calc"), ("c", 1, "sql"), ("d", 1, "sql")]
    path.write_text(
        "\n".join(json.dumps({"trajectory_id": t, "label": lab, "env": e}) for t, lab, e in rows)
    )
    predictions = {"a": (1.0, "calc"), "b": (0.9, "calc"), "c": (None, "sql")}
    report = meta_evaluate("judge", predictions, read_labels(path))
    assert report.missing == ["d"]
    assert report.overall.n == 3
    assert report.per_env["calc"].precision == 0.5
    assert report.per_env["sql"].recall == 0.0
