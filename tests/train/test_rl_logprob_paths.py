"""An RL step on the fast logprob path equals the reference path: loss, gradient norm, weights.

Two trainers start from the same tiny model and seed, so they sample the same rollouts; the
fast one runs the micro-batch's common prefix (the calculator's system prompt) once and keeps
the first epoch's forward as the old logprobs of the second; the reference one runs every row
whole and makes a separate old-logprob pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import small_rl_config, token_id_rubric

from trajforge.train import shared_prefix
from trajforge.train.rl import RLTrainer

LR = 1e-3
# AdamW's epsilon at 1 makes an update lr * m / (sqrt(v) + 1) follow the gradient linearly (a
# gradient difference d moves a weight by at most lr * d per step; at the default 1e-8 a
# near-zero gradient's update is its sign, which amplifies any rounding).
OPTIM = {"lr": LR, "eps": 1.0}
# fp32 keeps 24 bits (u = 6e-8). The paths add the same terms in another order (the prefix's
# matmuls on one row, attention over cached keys), which a log-softmax over 49152 entries turns
# into about sqrt(49152) * u = 1.3e-5 relative on a token's logprob; the loss and the gradient
# norm are averages of such terms.
RTOL = 1e-4
# Weights: two steps of at most lr * RTOL * |g| <= lr * RTOL (the gradient norm is clipped to
# 1), plus the rounding of a weight of size <= 4 (4 * u).
WEIGHT_ATOL = 2 * LR * RTOL + 4 * 6e-8


def _step(tmp_path: Path, *, reference_path: bool) -> tuple[dict[str, float], dict[str, Any], int]:
    cfg = small_rl_config(
        tmp_path,
        samples_per_group=4,
        max_turns=2,
        epochs_per_step=2,
        optim=OPTIM,
        reference_path=reference_path,
    )
    trainer = RLTrainer(cfg, rubric=token_id_rubric())
    passes: list[int] = []
    trainer.parts.logprob_model.register_forward_hook(lambda *_: passes.append(1))
    metrics = trainer.run_step(1)
    weights = {n: p.detach().clone() for n, p in trainer.parts.model.named_parameters()}
    assert metrics["trained_trajectories"] == 8 and metrics["loss_tokens"] > 0
    return metrics, weights, len(passes)


def _same(fast: tuple[dict[str, float], dict[str, Any], int], ref: tuple[Any, ...]) -> bool:
    (m, w, _), (rm, rw, _) = fast, ref
    return (
        m["loss_tokens"] == rm["loss_tokens"]
        and abs(m["loss"] - rm["loss"]) <= RTOL * max(abs(rm["loss"]), 1e-3)
        and abs(m["grad_norm"] - rm["grad_norm"]) <= RTOL * rm["grad_norm"]
        and all(torch.allclose(w[n], rw[n], rtol=0, atol=WEIGHT_ATOL) for n in rw)
    )


def test_the_fast_rl_step_equals_the_reference_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _step(tmp_path / "reference", reference_path=True)
    fast = _step(tmp_path / "fast", reference_path=False)
    assert reference[0]["grad_norm"] > 0 and abs(reference[0]["loss"]) > 0
    assert _same(fast, reference)
    # The old logprobs come from the first epoch's forward: two passes per micro-batch, where
    # the reference path makes three (a separate no-grad pass first).
    assert fast[2] * 3 == reference[2] * 2
    # Control: a fault (the shared prefix one token too long) fails the comparison.
    real = shared_prefix.shared_prefix_length
    monkeypatch.setattr(shared_prefix, "shared_prefix_length", lambda *a: real(*a) + 1)
    assert not _same(_step(tmp_path / "faulty", reference_path=False), reference)
