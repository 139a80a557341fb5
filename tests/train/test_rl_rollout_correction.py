"""Truncated importance sampling of the rollouts (``rollout_is_cap``): weights of 1 when the
rollouts sample from the trained weights, the capped ratio to the sampler when they do not,
nothing when switched off."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from train_helpers import small_rl_config, token_id_rubric

from trajforge.policy.hf import HFPolicy
from trajforge.train.rl import RLTrainer
from trajforge.train.rl.runners import LocalRollouts

IS_KEYS = {"rollout_is_weight_mean", "rollout_is_capped_frac"}


def _history(tmp_path: Path, *, stale: bool, **overrides: Any) -> list[dict[str, Any]]:
    """Two steps at a large learning rate; ``stale``: the rollouts sample from a copy of the
    initial weights that never follows the updates, so step 2 samples from other weights than
    the ones it trains (as a bf16 copy does, by rounding)."""
    cfg = small_rl_config(
        tmp_path,
        steps=2,
        optim={"lr": 5e-2},
        filter_zero_advantage=False,
        # The frozen copy's version stays behind: its tokens are kept in the loss.
        max_staleness=5,
        **overrides,
    )
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    if stale:
        frozen = copy.deepcopy(trainer.parts.unwrapped_model())
        trainer.runner = LocalRollouts(HFPolicy(frozen, trainer.parts.tokenizer))
        trainer.weights.refresh = lambda version: None  # type: ignore[method-assign]
    return trainer.train().history


def test_rollouts_from_the_trained_weights_get_weights_of_one(tmp_path: Path) -> None:
    for h in _history(tmp_path, stale=False):
        assert h["rollout_is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
        assert h["rollout_is_capped_frac"] == 0.0


def test_rollouts_from_other_weights_are_reweighted_and_capped(tmp_path: Path) -> None:
    """A cap of 1 caps every token the trained policy likes more than the sampler did."""
    first, second = _history(tmp_path, stale=True, rollout_is_cap=1.0)
    assert first["rollout_is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
    assert second["rollout_logprob_gap"] > 1e-3
    assert second["rollout_is_weight_mean"] < 1.0
    assert 0.0 < second["rollout_is_capped_frac"] < 1.0


def test_the_switch_turns_the_correction_off(tmp_path: Path) -> None:
    for h in _history(tmp_path, stale=True, rollout_is_cap=None):
        assert not IS_KEYS & h.keys()
        assert "rollout_logprob_gap" in h


@pytest.mark.parametrize(
    ("kind", "figure"), [("icepop", "rollout_masked_frac"), ("seq_mis", "rollout_seq_masked_frac")]
)
def test_the_masking_corrections_leave_out_what_the_sampler_drew_unlike(
    tmp_path: Path, kind: str, figure: str
) -> None:
    """A narrow band leaves out tokens (sequences) of the stale sampler's step 2 and none of
    step 1's, whose sampler is the trained weights; the mismatch shows in ``rollout_kl``."""
    first, second = _history(
        tmp_path, stale=True, rollout_correction=kind, rollout_is_band=[0.999, 1.001]
    )
    assert first[figure] == 0.0 and first["rollout_kl"] == pytest.approx(0.0, abs=1e-6)
    assert second[figure] > 0.0 and second["rollout_kl"] > 1e-6
    assert not IS_KEYS & second.keys()
