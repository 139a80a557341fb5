"""A hand-built batch shared by the estimator tests (values worked out in test_advantages.py)."""

from __future__ import annotations

import pytest
import torch

from trajforge.algos import AdvantageInput

# Masked-out turn rewards hold junk on purpose: estimators must ignore them.
JUNK = 9.0


@pytest.fixture
def batch() -> AdvantageInput:
    """Five trajectories in two interleaved groups, with 1-3 turns and 8 context tokens.

    group "a": trajectories 0, 2, 3 with outcomes 1.0, 0.0, 0.5
    group "b": trajectories 1, 4 with outcomes 0.0, 0.0 (all equal: zero advantage)
    """
    return AdvantageInput(
        rewards=torch.tensor([1.0, 0.0, 0.0, 0.5, 0.0]),
        group_ids=["a", "b", "a", "a", "b"],
        turn_rewards=torch.tensor(
            [
                [0.1, 0.0, JUNK],
                [0.0, JUNK, JUNK],
                [0.0, 0.2, 0.0],
                [0.0, 0.0, JUNK],
                [0.0, JUNK, JUNK],
            ]
        ),
        turn_mask=torch.tensor(
            [
                [True, True, False],
                [True, False, False],
                [True, True, True],
                [True, True, False],
                [True, False, False],
            ]
        ),
        state_keys=[["s0", "s1"], ["s0"], ["s0", "s2", "s1"], ["s0", None], ["s0"]],
        token_turn_index=torch.tensor(
            [
                [-1, -1, 0, 0, -1, 1, 1, -1],
                [-1, 0, 0, 0, -1, -1, -1, -1],
                [-1, 0, -1, 1, -1, 2, 2, 2],
                [-1, -1, 0, -1, 1, 1, -1, -1],
                [-1, -1, -1, 0, 0, -1, -1, -1],
            ]
        ),
    )
