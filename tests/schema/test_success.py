"""The one definition of success."""

from __future__ import annotations

import pytest

from trajforge.schema import OutcomeStatus, is_success


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
