"""RAE (SPIRAL's role-conditioned advantages) against values worked out by hand."""

from __future__ import annotations

import pytest
import torch

from trajforge.algos import AdvantageInput, AlgosInputError
from trajforge.algos.rae import rae_advantages, role_baseline_advantages


def test_each_role_has_its_own_moving_baseline() -> None:
    rewards = torch.tensor([1.0, -1.0, 1.0, 0.0])
    roles = ["ttt:x", "ttt:o", "ttt:x", "ttt:o"]
    adv, after = role_baseline_advantages(rewards, roles, {"ttt:x": 0.5}, alpha=0.5)
    # x: b = .5*.5 + .5*1 = .75, A = .25; then b = .5*.75 + .5*1 = .875, A = .125
    # o: b = .5*0 + .5*-1 = -.5, A = -.5; then b = .5*-.5 + .5*0 = -.25, A = .25
    assert adv.tolist() == pytest.approx([0.25, -0.5, 0.125, 0.25])
    assert after == pytest.approx({"ttt:x": 0.875, "ttt:o": -0.25})


def test_a_role_that_always_wins_stops_being_credited_for_it() -> None:
    baselines: dict[str, float] = {}
    for _ in range(200):
        adv, baselines = role_baseline_advantages(
            torch.tensor([1.0, -1.0]), ["g:first", "g:second"], baselines, alpha=0.9
        )
    assert adv.abs().max() < 1e-6  # the first seat's wins are its role's luck, not its play


def test_bad_input_is_named() -> None:
    with pytest.raises(AlgosInputError, match="roles: 1 roles"):
        role_baseline_advantages(torch.tensor([1.0, 0.0]), ["a"], {})
    with pytest.raises(AlgosInputError, match="alpha"):
        role_baseline_advantages(torch.tensor([1.0]), ["a"], {}, alpha=1.0)


def test_every_token_of_a_trajectory_gets_its_advantage() -> None:
    inp = AdvantageInput(
        rewards=torch.tensor([1.0, -1.0]),
        group_ids=["t:x", "t:o"],
        turn_rewards=torch.zeros(2, 2),
        turn_mask=torch.tensor([[True, True], [True, False]]),
        state_keys=[[None, None], [None]],
        token_turn_index=torch.tensor([[-1, 0, 0, -1, 1], [-1, 0, -1, -1, -1]]),
    )
    out, after = rae_advantages(inp, ["x", "o"], {}, alpha=0.0)
    # alpha 0: the baseline is the latest return, so every advantage is 0.
    assert after == {"x": 1.0, "o": -1.0} and out.token_advantages.abs().sum() == 0
    out, _ = rae_advantages(inp, ["x", "o"], {"x": 0.0, "o": 0.0}, alpha=0.5)
    expected = torch.tensor([[0.0, 0.5, 0.5, 0.0, 0.5], [0.0, -0.5, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(out.token_advantages.double(), expected.double())
    turns = torch.tensor([[0.5, 0.5], [-0.5, 0.0]])
    torch.testing.assert_close(out.turn_advantages.double(), turns.double())
