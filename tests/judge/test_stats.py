from __future__ import annotations

import math

import pytest

from trajforge.judge.stats import mean_ci95, mean_pass_at_k, pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 0, 1, 0.0),
        (5, 5, 3, 1.0),
        (5, 2, 1, 2 / 5),  # pass@1 is the success fraction
        (4, 1, 2, 1 - 3 / 6),  # 1 - C(3,2)/C(4,2)
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (6, 4, 3, 1.0),  # fewer than k failures: every k-subset has a success
    ],
)
def test_pass_at_k_matches_hand_computed_binomials(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError, match="k=5 exceeds"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(4, 5, 1)


def test_mean_pass_at_k_averages_over_tasks() -> None:
    results = [("a", True), ("a", False), ("b", False), ("b", False)]
    assert mean_pass_at_k(results, 1) == pytest.approx(0.25)
    assert mean_pass_at_k(results, 2) == pytest.approx(0.5)


def test_mean_ci95_uses_student_t() -> None:
    ci = mean_ci95([1.0, 0.0, 1.0, 0.0])
    # sd = sqrt(1/3), se = sd / 2, t(3) = 3.182
    half = 3.182 * math.sqrt(1 / 3) / 2
    assert ci.mean == 0.5
    assert ci.low == pytest.approx(0.5 - half)
    assert ci.high == pytest.approx(0.5 + half)
    assert mean_ci95([0.7]).half_width == 0.0
