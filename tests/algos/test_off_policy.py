"""Off-policy corrections (``trajforge.algos.off_policy``) against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from trajforge.algos import (
    RolloutCorrection,
    correction_weights,
    icepop_weights,
    mismatch_metrics,
    sequence_mis_weights,
    within_staleness,
)
from trajforge.errors import ConfigError

LOG2 = math.log(2.0)
NAN = float("nan")

# Row 0: ratios 1, 2, 1/4 on the mask, padding after; row 1: ratios 8, 1.
TRAIN = torch.tensor([[0.0, LOG2, -2 * LOG2, NAN], [3 * LOG2, 0.0, 0.0, 0.0]])
ROLLOUT = torch.zeros(2, 4)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)


def test_icepop_leaves_out_tokens_whose_ratio_leaves_the_band() -> None:
    w = icepop_weights(TRAIN, ROLLOUT, MASK, 0.5, 5.0)
    assert w.tolist() == [[1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]]


def test_sequence_mis_leaves_out_whole_sequences_whose_ratio_leaves_the_band() -> None:
    # Row 0's ratio is 1 * 2 * 1/4 = 1/2 (in [0.5, 2]); row 1's is 8 (out).
    w = sequence_mis_weights(TRAIN, ROLLOUT, MASK, 0.5, 2.0)
    assert w.tolist() == [[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]]
    assert sequence_mis_weights(TRAIN, ROLLOUT, MASK, 0.6, 2.0)[0, :3].tolist() == [0.0] * 3


def test_token_tis_caps_the_ratio_and_none_corrects_nothing() -> None:
    w = correction_weights(RolloutCorrection.TOKEN_TIS, TRAIN, ROLLOUT, MASK, cap=2.0)
    assert w is not None
    assert torch.allclose(w, torch.tensor([[1.0, 2.0, 0.25, 1.0], [2.0, 1.0, 1.0, 1.0]]))
    assert correction_weights(RolloutCorrection.NONE, TRAIN, ROLLOUT, MASK) is None
    assert correction_weights(RolloutCorrection.TOKEN_TIS, TRAIN, ROLLOUT, MASK) is None


def test_the_masking_corrections_take_their_default_band() -> None:
    icepop = correction_weights(RolloutCorrection.ICEPOP, TRAIN, ROLLOUT, MASK)
    assert icepop is not None and icepop[1, 0] == 0.0  # ratio 8 > 5
    seq = correction_weights(RolloutCorrection.SEQ_MIS, TRAIN, ROLLOUT, MASK)
    assert seq is not None and seq[0, 0] == 1.0 and seq[1, 0] == 0.0


def test_a_band_that_leaves_out_one_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"icepop: band \[1.5, 5\] must hold 1"):
        icepop_weights(TRAIN, ROLLOUT, MASK, 1.5, 5.0)


def test_mismatch_metrics_over_the_mask() -> None:
    got = mismatch_metrics(TRAIN, ROLLOUT, MASK)
    logs = [0.0, LOG2, -2 * LOG2, 3 * LOG2, 0.0]
    assert got["abs_log_ratio"] == pytest.approx(sum(abs(x) for x in logs) / 5)
    assert got["kl"] == pytest.approx(sum(math.exp(x) - 1 - x for x in logs) / 5)
    assert got["log_ratio_max"] == pytest.approx(3 * LOG2)
    # Each row's first masked token begins its turn: ratios 1 and 8.
    assert got["kl_turn_start"] == pytest.approx((0.0 + 8 - 1 - 3 * LOG2) / 2)
    same = mismatch_metrics(ROLLOUT, ROLLOUT, MASK)
    assert same == {"abs_log_ratio": 0.0, "kl": 0.0, "log_ratio_max": 0.0, "kl_turn_start": 0.0}


def test_each_turn_of_a_row_has_its_first_token_counted() -> None:
    # Two turns in one row (an observation between): the first tokens have ratios 2 and 4.
    train = torch.tensor([[0.0, LOG2, 0.0, 0.0, 2 * LOG2, 0.0]])
    mask = torch.tensor([[False, True, True, False, True, True]])
    got = mismatch_metrics(train, torch.zeros(1, 6), mask)
    assert got["kl_turn_start"] == pytest.approx((1 - LOG2 + 3 - 2 * LOG2) / 2)


def test_within_staleness_keeps_tokens_up_to_the_bound() -> None:
    lag = torch.tensor([[0, 1, 2, 3]])
    mask = torch.tensor([[True, True, True, False]])
    assert within_staleness(lag, mask, 1).tolist() == [[True, True, False, False]]
    with pytest.raises(ConfigError, match="staleness bound -1"):
        within_staleness(lag, mask, -1)
