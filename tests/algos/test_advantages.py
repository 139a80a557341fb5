"""Every estimator against values worked out by hand on the batch of ``conftest.py``.

Layout of that batch (``t`` = turn, ``r`` = turn reward, ``R`` = outcome):

    traj 0 (group a): R = 1.0, turns t0 (r 0.1, 2 tokens), t1 (r 0.0, 2 tokens)
    traj 1 (group b): R = 0.0, turn  t0 (r 0.0, 3 tokens)
    traj 2 (group a): R = 0.0, turns t0 (0.0, 1 tok), t1 (0.2, 1 tok), t2 (0.0, 3 tok)
    traj 3 (group a): R = 0.5, turns t0 (0.0, 1 token), t1 (0.0, 2 tokens)
    traj 4 (group b): R = 0.0, turn  t0 (r 0.0, 2 tokens)

Expected numbers are written out; where a mean/std of several numbers is needed it is taken
with the standard library's ``statistics`` on the literal values, not with the code under test.
"""

from __future__ import annotations

import statistics

import pytest
import torch

from trajforge.algos import (
    ESTIMATORS,
    AdvantageInput,
    AdvantageOutput,
    AlgosInputError,
    compute_advantages,
)
from trajforge.errors import ConfigError

EPS = 1e-6


def expected_tokens(batch: AdvantageInput, turn_values: list[list[float]]) -> torch.Tensor:
    """Spread hand-written per-turn values over the tokens of ``batch``."""
    out = torch.zeros(batch.token_turn_index.shape, dtype=torch.float64)
    for b, row in enumerate(batch.token_turn_index.tolist()):
        for t, k in enumerate(row):
            if k >= 0:
                out[b, t] = turn_values[b][k]
    return out


def check(
    batch: AdvantageInput, estimator: str, turn_values: list[list[float]], **kw: object
) -> AdvantageOutput:
    out = compute_advantages(estimator, batch, **kw)
    want = expected_tokens(batch, turn_values)
    torch.testing.assert_close(out.token_advantages.double(), want, atol=1e-6, rtol=0)
    assert bool((out.token_advantages[batch.token_turn_index == -1] == 0).all())
    assert bool((out.turn_advantages[~batch.turn_mask] == 0).all())
    return out


def test_grpo(batch: AdvantageInput) -> None:
    # group a: R = (1, 0, 0.5), mean 0.5, sample std 0.5; group b: all 0 -> 0.
    hi, lo = 0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS)
    out = check(batch, "grpo", [[hi, hi], [0.0], [lo, lo, lo], [0.0, 0.0], [0.0]])
    assert out.metrics["groups"] == 2
    assert out.metrics["zero_adv_groups"] == 1
    assert out.metrics["zero_adv_group_frac"] == 0.5
    token_values = [hi] * 4 + [0.0] * 3 + [lo] * 5 + [0.0] * 3 + [0.0] * 2
    assert out.metrics["adv_mean"] == pytest.approx(statistics.fmean(token_values), abs=1e-9)
    assert out.metrics["adv_std"] == pytest.approx(statistics.pstdev(token_values), abs=1e-9)


def test_grpo_without_std(batch: AdvantageInput) -> None:
    check(batch, "grpo", [[0.5, 0.5], [0.0], [-0.5] * 3, [0.0, 0.0], [0.0]], scale_by_std=False)


def test_dr_grpo(batch: AdvantageInput) -> None:
    check(batch, "dr_grpo", [[0.5, 0.5], [0.0], [-0.5] * 3, [0.0, 0.0], [0.0]])


def test_rloo(batch: AdvantageInput) -> None:
    # traj 0: 1 - (0 + 0.5)/2; traj 2: 0 - (1 + 0.5)/2; traj 3: 0.5 - (1 + 0)/2.
    check(batch, "rloo", [[0.75, 0.75], [0.0], [-0.75] * 3, [0.0, 0.0], [0.0]])


def test_rloo_group_of_one_gets_zero() -> None:
    inp = AdvantageInput(
        rewards=torch.tensor([0.7, 1.0, 0.0]),
        group_ids=["solo", "pair", "pair"],
        turn_rewards=torch.zeros(3, 1),
        turn_mask=torch.ones(3, 1, dtype=torch.bool),
        state_keys=[[None], [None], [None]],
        token_turn_index=torch.tensor([[0, 0], [0, -1], [-1, 0]]),
    )
    out = compute_advantages("rloo", inp)
    torch.testing.assert_close(out.turn_advantages, torch.tensor([[0.0], [1.0], [-1.0]]))
    assert out.metrics["zero_adv_groups"] == 1


def test_turn_returns(batch: AdvantageInput) -> None:
    # gamma 0.5, outcome added to the last turn:
    #   traj 0: r' = (0.1, 1.0)       -> G = (0.1 + 0.5*1.0, 1.0)  = (0.6, 1.0)
    #   traj 2: r' = (0, 0.2, 0)      -> G = (0.5*0.2, 0.2, 0)     = (0.1, 0.2, 0.0)
    #   traj 3: r' = (0, 0.5)         -> G = (0.25, 0.5)
    #   group b: every G = 0          -> advantage 0
    group_a = [0.6, 1.0, 0.1, 0.2, 0.0, 0.25, 0.5]
    mu, sd = statistics.fmean(group_a), statistics.stdev(group_a)

    def z(g: float) -> float:
        return (g - mu) / (sd + EPS)

    want = [[z(0.6), z(1.0)], [0.0], [z(0.1), z(0.2), z(0.0)], [z(0.25), z(0.5)], [0.0]]
    out = check(batch, "turn_returns", want, gamma=0.5)
    assert out.metrics["zero_adv_groups"] == 1
    no_std = [[g - mu for g in row] for row in [[0.6, 1.0], [], [0.1, 0.2, 0.0], [0.25, 0.5]]]
    no_std[1] = [0.0]
    check(batch, "turn_returns", [*no_std, [0.0]], gamma=0.5, scale_by_std=False)


def test_turn_returns_undiscounted(batch: AdvantageInput) -> None:
    # gamma 1: traj 0 G = (1.1, 1.0); traj 2 G = (0.2, 0.2, 0.0); traj 3 G = (0.5, 0.5).
    group_a = [1.1, 1.0, 0.2, 0.2, 0.0, 0.5, 0.5]
    mu, sd = statistics.fmean(group_a), statistics.stdev(group_a)
    want = [
        [(g - mu) / (sd + EPS) for g in row] for row in [[1.1, 1.0], [0.2, 0.2, 0.0], [0.5, 0.5]]
    ]
    check(batch, "turn_returns", [want[0], [0.0], want[1], want[2], [0.0]])


def test_reinforce_pp(batch: AdvantageInput) -> None:
    # Same returns as test_turn_returns (gamma 0.5); group b's returns are 0. Whitening runs over
    # every assistant token of the batch, each carrying its turn's return.
    returns = [[0.6, 1.0], [0.0], [0.1, 0.2, 0.0], [0.25, 0.5], [0.0]]
    tokens_per_turn = [[2, 2], [3], [1, 1, 3], [1, 2], [2]]
    token_values = [
        g
        for row_g, row_n in zip(returns, tokens_per_turn, strict=True)
        for g, n in zip(row_g, row_n, strict=True)
        for _ in range(n)
    ]
    assert len(token_values) == 17
    mu, sd = statistics.fmean(token_values), statistics.pstdev(token_values)
    want = [[(g - mu) / (sd + EPS) for g in row] for row in returns]
    out = check(batch, "reinforce_pp", want, gamma=0.5)
    # Whitening makes equal-reward group b non-zero: no group is zero-advantage here.
    assert out.metrics["zero_adv_groups"] == 0
    assert out.metrics["adv_mean"] == pytest.approx(0.0, abs=1e-9)


def test_gigpo_two_trajectories_share_a_state(batch: AdvantageInput) -> None:
    # gamma 0.5, omega 1, F_norm = 1.
    # Episode returns R = outcome + turn rewards: group a (1.1, 0.2, 0.5), mean 0.6
    #   -> A^E = (0.5, -0.4, -0.1); group b (0, 0) -> 0.
    # Step returns as in test_turn_returns. Anchor-state groups inside group a:
    #   "s0": traj0 t0 0.6, traj2 t0 0.1, traj3 t0 0.25 (mean 0.95/3)
    #   "s1": traj0 t1 1.0, traj2 t2 0.0 (mean 0.5) -- reached at different turn indices
    #   "s2": traj2 t1 alone -> A^S = 0; traj3 t1 has no state -> A^S = 0
    # Group b's "s0" is a different anchor (another group) and its returns are equal -> 0.
    m0 = 0.95 / 3
    want = [
        [0.5 + (0.6 - m0), 0.5 + (1.0 - 0.5)],
        [0.0],
        [-0.4 + (0.1 - m0), -0.4 + 0.0, -0.4 + (0.0 - 0.5)],
        [-0.1 + (0.25 - m0), -0.1 + 0.0],
        [0.0],
    ]
    out = check(batch, "gigpo", want, gamma=0.5)
    assert out.turn_advantages[0].tolist() == pytest.approx([0.783333, 1.0, 0.0], abs=1e-6)
    assert out.metrics["anchor_groups"] == 3  # a/s0, a/s1, b/s0
    assert out.metrics["anchor_step_frac"] == pytest.approx(7 / 9)
    assert out.metrics["zero_adv_groups"] == 1


def test_gigpo_with_std_and_weight(batch: AdvantageInput) -> None:
    episode = [1.1, 0.2, 0.5]
    e_mu, e_sd = statistics.fmean(episode), statistics.stdev(episode)
    s0 = [0.6, 0.1, 0.25]
    s0_mu, s0_sd = statistics.fmean(s0), statistics.stdev(s0)
    s1_sd = statistics.stdev([1.0, 0.0])

    def ep(r: float) -> float:
        return (r - e_mu) / (e_sd + EPS)

    def a_s0(g: float) -> float:
        return 0.5 * (g - s0_mu) / (s0_sd + EPS)

    want = [
        [ep(1.1) + a_s0(0.6), ep(1.1) + 0.5 * 0.5 / (s1_sd + EPS)],
        [0.0],
        [ep(0.2) + a_s0(0.1), ep(0.2), ep(0.2) - 0.5 * 0.5 / (s1_sd + EPS)],
        [ep(0.5) + a_s0(0.25), ep(0.5)],
        [0.0],
    ]
    check(batch, "gigpo", want, gamma=0.5, omega=0.5, scale_by_std=True)


def test_gigpo_same_state_twice_in_one_trajectory() -> None:
    # One trajectory loops back to state "x": both its steps join one anchor group (the
    # paper's G^S ranges over every step of every trajectory of the group).
    inp = AdvantageInput(
        rewards=torch.tensor([1.0, 0.0]),
        group_ids=["g", "g"],
        turn_rewards=torch.zeros(2, 2),
        turn_mask=torch.tensor([[True, True], [True, False]]),
        state_keys=[["x", "x"], ["y"]],
        token_turn_index=torch.tensor([[0, 1], [0, -1]]),
    )
    out = compute_advantages("gigpo", inp, gamma=1.0)
    # A^E = (0.5, -0.5); anchor "x" holds returns (1, 1): equal -> A^S = 0; "y" alone.
    torch.testing.assert_close(out.turn_advantages, torch.tensor([[0.5, 0.5], [-0.5, 0.0]]))
    assert out.metrics["anchor_groups"] == 1


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_all_equal_rewards_give_zero_and_are_counted(estimator: str) -> None:
    long_run: list[str | None] = ["s", "t"]
    short_run: list[str | None] = ["s"]
    states = [long_run] * 3 + [short_run] * 3
    inp = AdvantageInput(
        rewards=torch.tensor([0.3, 0.3, 0.3, 1.0, 1.0, 1.0]),
        group_ids=["a", "a", "a", "b", "b", "b"],
        turn_rewards=torch.zeros(6, 2),
        turn_mask=torch.tensor([[True, True]] * 3 + [[True, False]] * 3),
        state_keys=states,
        token_turn_index=torch.tensor([[0, 1, 1]] * 3 + [[0, 0, -1]] * 3),
    )
    options = {"gamma": 1.0} if estimator in ("reinforce_pp", "turn_returns", "gigpo") else {}
    out = compute_advantages(estimator, inp, **options)
    assert bool(torch.isfinite(out.token_advantages).all())
    if estimator == "reinforce_pp":
        # Batch whitening compares across groups: group b's return (1.0) is above the mean.
        assert out.metrics["zero_adv_groups"] == 0
        return
    assert bool((out.token_advantages == 0).all())
    assert out.metrics["zero_adv_groups"] == 2
    assert out.metrics["zero_adv_group_frac"] == 1.0


def test_float_rewards_that_do_not_average_exactly_still_give_zero() -> None:
    # mean(0.1, 0.1, 0.1) in floating point is not 0.1; the advantage must still be exactly 0.
    inp = AdvantageInput(
        rewards=torch.tensor([0.1, 0.1, 0.1], dtype=torch.float64),
        group_ids=["g"] * 3,
        turn_rewards=torch.zeros(3, 1, dtype=torch.float64),
        turn_mask=torch.ones(3, 1, dtype=torch.bool),
        state_keys=[[None]] * 3,
        token_turn_index=torch.zeros(3, 2, dtype=torch.long),
    )
    for name in ("grpo", "dr_grpo", "rloo", "turn_returns"):
        assert bool((compute_advantages(name, inp).token_advantages == 0).all()), name


def test_unknown_estimator_and_option_are_config_errors(batch: AdvantageInput) -> None:
    with pytest.raises(ConfigError, match="unknown estimator 'ppo'"):
        compute_advantages("ppo", batch)
    with pytest.raises(ConfigError, match="unknown option 'gamma'"):
        compute_advantages("grpo", batch, gamma=0.9)


def test_inconsistent_input_is_rejected() -> None:
    with pytest.raises(AlgosInputError, match="group_ids"):
        AdvantageInput(
            rewards=torch.zeros(2),
            group_ids=["a"],
            turn_rewards=torch.zeros(2, 1),
            turn_mask=torch.ones(2, 1, dtype=torch.bool),
            state_keys=[[], []],
            token_turn_index=torch.zeros(2, 1, dtype=torch.long),
        )
    with pytest.raises(AlgosInputError, match="turn_mask marks absent"):
        AdvantageInput(
            rewards=torch.zeros(1),
            group_ids=["a"],
            turn_rewards=torch.zeros(1, 2),
            turn_mask=torch.tensor([[True, False]]),
            state_keys=[[]],
            token_turn_index=torch.tensor([[0, 1]]),
        )
    with pytest.raises(AlgosInputError, match="values must lie"):
        AdvantageInput(
            rewards=torch.zeros(1),
            group_ids=["a"],
            turn_rewards=torch.zeros(1, 1),
            turn_mask=torch.ones(1, 1, dtype=torch.bool),
            state_keys=[[]],
            token_turn_index=torch.tensor([[2]]),
        )


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_batch_without_any_turn(estimator: str) -> None:
    inp = AdvantageInput(
        rewards=torch.tensor([1.0, 0.0]),
        group_ids=["a", "a"],
        turn_rewards=torch.zeros(2, 0),
        turn_mask=torch.zeros(2, 0, dtype=torch.bool),
        state_keys=[[], []],
        token_turn_index=torch.full((2, 3), -1, dtype=torch.long),
    )
    out = compute_advantages(estimator, inp)
    assert out.token_advantages.shape == (2, 3)
    assert bool((out.token_advantages == 0).all())
    assert out.metrics["zero_adv_groups"] == 1


def test_advantages_are_weighted_by_sign() -> None:
    from trajforge.algos.advantages import weight_by_sign

    adv = torch.tensor([[1.5, -2.0, 0.0], [-0.5, 0.25, -1.0]])
    assert torch.equal(
        weight_by_sign(adv, negative=0.1),
        torch.tensor([[1.5, -0.2, 0.0], [-0.05, 0.25, -0.1]]),
    )
    assert torch.equal(
        weight_by_sign(adv, positive=0.5),
        torch.tensor([[0.75, -2.0, 0.0], [-0.5, 0.125, -1.0]]),
    )
    assert torch.equal(weight_by_sign(adv), adv)
    assert torch.equal(weight_by_sign(adv, negative=0.0), adv.clamp(min=0))
