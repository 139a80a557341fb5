"""The one definition of success."""

from __future__ import annotations

import sqlite3

import pytest

from trajforge.schema import SUCCESS_THRESHOLD, OutcomeStatus, is_success, success_sql


@pytest.mark.parametrize(
    ("status", "reward", "expected"),
    [
        (OutcomeStatus.OK, 1.0, True),
        ("ok", 1.0, True),  # store rows carry the status as text
        (OutcomeStatus.OK, 0.99, False),
        (OutcomeStatus.OK, None, False),
        (OutcomeStatus.TRUNCATED, 1.0, False),  # rewarded but cut off
        (OutcomeStatus.ERROR, None, False),
    ],
)
def test_success_needs_an_ok_end_and_a_full_reward(
    status: OutcomeStatus | str, reward: float | None, expected: bool
) -> None:
    assert is_success(status, reward) is expected


def test_success_at_another_threshold() -> None:
    assert is_success("ok", 0.5, threshold=0.5)
    assert not is_success("truncated", 0.5, threshold=0.5)


THRESHOLDS = (SUCCESS_THRESHOLD, 0.5, 0.0, -1.0, 1e-9)
EDGES = [
    (status.value, reward)
    for status in OutcomeStatus
    for reward in (None, -1.0, 0.0, 1e-9, 0.25, 0.5 - 1e-12, 0.5, 0.75, 0.999, 1.0, 1.5)
]


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_the_sql_predicate_answers_as_is_success_on_every_edge(threshold: float) -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE episodes (i INTEGER PRIMARY KEY, status TEXT NOT NULL, reward REAL)")
    db.executemany("INSERT INTO episodes (status, reward) VALUES (?, ?)", EDGES)
    clause, params = success_sql("status", "reward", threshold)
    rows = db.execute(f"SELECT i, {clause} FROM episodes ORDER BY i", params).fetchall()
    from_sql = [bool(flag) for _, flag in rows]
    from_python = [is_success(status, reward, threshold) for status, reward in EDGES]
    assert from_sql == from_python
    assert any(from_python) and not all(from_python)  # the edges fall on both sides
    counted = db.execute(f"SELECT count(*) FROM episodes WHERE {clause}", params).fetchone()[0]
    assert counted == sum(from_python)


def test_every_status_but_ok_fails_in_sql_too() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (status TEXT, reward REAL)")
    db.executemany("INSERT INTO t VALUES (?, 1.0)", [(s.value,) for s in OutcomeStatus])
    clause, params = success_sql("t.status", "t.reward")
    ok = db.execute(f"SELECT t.status FROM t WHERE {clause}", params).fetchall()
    assert ok == [(OutcomeStatus.OK.value,)]
