"""Episodes lost to the infrastructure taken out of their groups before the advantages:
``drop_from_groups`` against hand-worked masks, and GRPO's baseline over the rest."""

from __future__ import annotations

import math

import pytest
import torch

from trajforge.algos import AdvantageInput, AlgosInputError, compute_advantages, drop_from_groups


def one_turn_batch(rewards: list[float], groups: list[str]) -> AdvantageInput:
    b = len(rewards)
    return AdvantageInput(
        rewards=torch.tensor(rewards, dtype=torch.float64),
        group_ids=groups,
        turn_rewards=torch.zeros((b, 1)),
        turn_mask=torch.ones((b, 1), dtype=torch.bool),
        state_keys=[[None]] * b,
        token_turn_index=torch.zeros((b, 1), dtype=torch.long),
    )


def flags(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.bool)


def test_dropped_rows_leave_their_group_and_a_group_left_with_one_is_skipped() -> None:
    groups = ["a", "a", "a", "a", "b", "b", "c", "c", "d", "e", "e"]
    dropped = flags(0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 1)
    keep, skipped = drop_from_groups(groups, dropped)
    # a keeps three; b is left with one and skipped; c and the lone d lost nothing and stay;
    # e lost both.
    assert keep.tolist() == [True, True, True, False, False, False, True, True, True, False, False]
    assert skipped == 2
    keep3, skipped3 = drop_from_groups(groups, dropped, min_size=3)
    assert keep3.tolist() == [True, True, True] + [False] * 3 + [True] * 3 + [False] * 2
    assert skipped3 == 2


def test_nothing_dropped_keeps_everything() -> None:
    keep, skipped = drop_from_groups(["a", "a", "b"], flags(0, 0, 0))
    assert keep.tolist() == [True, True, True] and skipped == 0


def test_flags_must_match_the_group_ids() -> None:
    with pytest.raises(AlgosInputError, match="dropped: 2 flags for 3 group ids"):
        drop_from_groups(["a", "a", "b"], flags(0, 1))


def test_the_baseline_is_the_rest_of_the_group_not_a_zero_reward() -> None:
    # Group a: rewards 1, 0, 1 and one episode lost to a crashed server (scored 0 as a failure).
    groups = ["a", "a", "a", "a", "b", "b"]
    rewards = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    lost = flags(0, 0, 0, 1, 0, 0)
    keep, skipped = drop_from_groups(groups, lost)
    assert skipped == 0
    rows = [i for i in range(6) if keep[i]]
    dropped = compute_advantages(
        "grpo", one_turn_batch([rewards[i] for i in rows], [groups[i] for i in rows])
    )
    # Mean of (1, 0, 1) is 2/3, its sample std sqrt(1/3): (1 - 2/3) / sqrt(1/3) = 0.57735.
    third = math.sqrt(1 / 3)
    want_a = [(1 / 3) / (third + 1e-6), (-2 / 3) / (third + 1e-6), (1 / 3) / (third + 1e-6)]
    # Group b lost nothing: the same as without any drop, +-1/sqrt(2).
    half = math.sqrt(0.5)
    want_b = [0.5 / (half + 1e-6), -0.5 / (half + 1e-6)]
    got = dropped.turn_advantages[:, 0].tolist()
    assert got == pytest.approx(want_a + want_b, abs=1e-9)
    # Scored 0 instead (``infra_failures: zero``), the crash moves every advantage of group a.
    zero = compute_advantages("grpo", one_turn_batch(rewards, groups)).turn_advantages[:, 0]
    unit = 0.5 / (math.sqrt(1 / 3) + 1e-6)  # mean 1/2, sample std of (1, 0, 1, 0) sqrt(1/3)
    assert zero[:4].tolist() == pytest.approx([unit, -unit, unit, -unit], abs=1e-9)
    assert zero[:3].tolist() != pytest.approx(got[:3], abs=1e-3)
