from __future__ import annotations

import math

import pytest

from trajforge.judge.stats import (
    difference_ci95,
    mean_ci95,
    mean_pass_at_k,
    mean_pass_hat_k,
    pass_at_k,
    pass_hat_k,
    summarize_reward_totals,
    summarize_rewards,
    summarize_rewards_by,
    wilson_ci95,
)
from trajforge.schema import is_success


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


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 2 / 5),  # pass^1 is the success fraction too
        (4, 3, 2, 3 / 6),  # C(3,2)/C(4,2)
        (10, 7, 5, 21 / 252),  # C(7,5)/C(10,5)
        (4, 1, 2, 0.0),  # fewer than k successes: no k-subset is all successes
        (3, 3, 3, 1.0),
    ],
)
def test_pass_hat_k_matches_hand_computed_binomials(
    n: int, c: int, k: int, expected: float
) -> None:
    assert pass_hat_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    assert pass_hat_k(n, c, k) <= pass_at_k(n, c, k) + 1e-12


def test_pass_hat_k_rejects_impossible_counts_and_averages_over_tasks() -> None:
    with pytest.raises(ValueError, match="0 < k <= n=4"):
        pass_hat_k(4, 1, 5)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_hat_k(4, 5, 1)
    results = [("a", True), ("a", True), ("a", False), ("b", True), ("b", False), ("b", False)]
    assert mean_pass_hat_k(results, 1) == pytest.approx(0.5)
    assert mean_pass_hat_k(results, 2) == pytest.approx((1 / 3 + 0) / 2)
    assert math.isnan(mean_pass_hat_k([], 1))


def test_mean_ci95_uses_student_t() -> None:
    ci = mean_ci95([2.0, 0.0, 2.0, 0.0])  # rewards beyond [0, 1]: nothing bounds the mean
    # sd = sqrt(4/3), se = sd / 2, t(3) = 3.182
    half = 3.182 * math.sqrt(4 / 3) / 2
    assert ci.mean == 1.0
    assert ci.low == pytest.approx(1.0 - half)
    assert ci.high == pytest.approx(1.0 + half)
    assert mean_ci95([0.7]).half_width == 0.0


def test_mean_ci95_of_zeros_and_ones_is_wilsons() -> None:
    # p = 0.5, n = 4, z = 1.96: (0.5 + 0.4802 +- 1.96 sqrt(0.0625 + 0.0600)) / 1.9604
    ci = mean_ci95([1.0, 0.0, 1.0, 0.0])
    assert (ci.mean, ci.low, ci.high) == pytest.approx((0.5, 0.1500, 0.8500), abs=1e-4)
    assert wilson_ci95(8, 8) == pytest.approx((0.6756, 1.0), abs=1e-4)
    assert wilson_ci95(0, 3) == pytest.approx((0.0, 0.5615), abs=1e-4)
    assert mean_ci95([1.0]).low < 1.0 == mean_ci95([1.0]).high  # one success is no certainty


def test_mean_ci95_of_rewards_in_the_unit_interval_stays_in_it() -> None:
    """The interval once printed as [0.633, 1.145]."""
    ci = mean_ci95([1.0, 1.0, 0.6, 1.0, 0.35])
    assert 0.0 <= ci.low < ci.mean < ci.high == 1.0


def test_unscored_episodes_fail_and_stay_out_of_the_mean() -> None:
    summary = summarize_rewards(
        [("ok", 1.0), ("ok", 0.5), ("truncated", None), ("error", None), ("timeout", None)]
    )
    assert (summary.episodes, summary.scored, summary.successes) == (5, 2, 1)
    assert summary.success == pytest.approx(0.2)
    assert summary.reward_mean == pytest.approx(0.75)
    assert summary.reward_ci == (mean_ci95([1.0, 0.5]).low, mean_ci95([1.0, 0.5]).high)
    assert summary.line() == "success 20.0% · mean reward 0.750 · scored 2/5"
    assert summary.reward_text(ci=True).startswith("0.750 [")


def test_nothing_scored_has_no_mean_reward() -> None:
    summary = summarize_rewards([("error", None), ("truncated", None)])
    assert summary.as_dict() == {
        "scored": 0,
        "success": 0.0,
        "reward_mean": None,
        "reward_ci_low": None,
        "reward_ci_high": None,
    }
    assert summary.line() == "success n/a · mean reward - · scored 0/2"  # nothing to judge by
    assert summarize_rewards([]).line() == "success - · mean reward - · scored 0/0"


def test_groups_are_summarised_alike() -> None:
    rows = [("b", "ok", 1.0), ("a", "error", None), ("b", "ok", 0.0), ("a", "ok", 1.0)]
    groups = summarize_rewards_by(rows)
    assert list(groups) == ["a", "b"]
    assert groups["a"] == summarize_rewards([("error", None), ("ok", 1.0)])
    assert (groups["b"].success, groups["b"].reward_mean, groups["b"].scored) == (0.5, 0.5, 2)


def test_summaries_from_sql_totals_match_summaries_from_the_rewards() -> None:
    outcomes = [
        ("ok", 1.0), ("ok", 0.25), ("ok", None), ("ok", 0.5),
        ("error", 1.0), ("truncated", 0.75), ("timeout", None), ("ok", 0.9),
    ]  # fmt: skip
    totals = []
    for status in ("ok", "error", "truncated", "timeout"):
        rewards = [r for s, r in outcomes if s == status and r is not None]
        n = sum(s == status for s, _ in outcomes)
        at = sum(is_success(status, r) for r in rewards)
        low, high = (min(rewards), max(rewards)) if rewards else (None, None)
        totals.append(
            (status, n, len(rewards), sum(rewards), sum(r * r for r in rewards), at, low, high)
        )
    direct, aggregated = summarize_rewards(outcomes), summarize_reward_totals(totals)
    assert (aggregated.episodes, aggregated.scored, aggregated.successes) == (
        direct.episodes, direct.scored, direct.successes
    )  # fmt: skip
    for field in ("mean", "low", "high"):
        assert getattr(aggregated.reward, field) == pytest.approx(getattr(direct.reward, field))
    assert math.isnan(summarize_reward_totals([]).reward.mean)
    binary = [("ok", 3, 3, 2.0, 2.0, 2, 0.0, 1.0)]  # rewards 1, 1, 0: Wilson, as from the rewards
    assert summarize_reward_totals(binary).reward == mean_ci95([1.0, 1.0, 0.0])


def test_a_difference_interval_is_students_t_and_never_cut_at_zero() -> None:
    no_gain = difference_ci95([0.0, 0.0, 0.0])
    assert (no_gain.mean, no_gain.low, no_gain.high) == (0.0, 0.0, 0.0)
    gains = difference_ci95([0.02, 0.04, 0.09])
    # t(2) = 4.303: the half-width 4.303 * sd / sqrt(3) reaches below zero.
    assert gains.mean == pytest.approx(0.05)
    assert gains.low == pytest.approx(0.05 - 4.303 * 0.036056 / 3**0.5, abs=1e-4)
    assert gains.low < 0.0 < gains.high
    assert mean_ci95([0.0, 0.0, 0.0]).high > 0.5  # a proportion of 0 in 3 is Wilson's
