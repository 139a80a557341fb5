"""Tinker's policy-gradient losses are ``trajforge.algos``' losses, summed over a datum's tokens,
with the values and gradients of the formulas in the Tinker SDK's documentation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trajforge.tinker.losses import datum_loss, loss_fn

OLD = np.array([-1.0, -0.5, -2.0, -0.1], dtype=np.float32)
NEW = [-0.5, -0.5, -2.5, -0.9]
ADV = np.array([1.0, -1.0, 2.0, -0.5], dtype=np.float32)


def _loss(name: str, **config: float) -> tuple[float, list[float]]:
    loss, full = loss_fn(name, config)
    lp = torch.tensor(NEW, requires_grad=True)
    inputs = {"target_tokens": np.zeros(4, np.int64), "logprobs": OLD, "advantages": ADV}
    value = datum_loss(loss, lp, inputs, full)
    value.backward()
    assert lp.grad is not None
    return float(value.detach()), lp.grad.tolist()


def _ratio() -> torch.Tensor:
    return torch.exp(torch.tensor(NEW) - torch.tensor(OLD))


def test_ppo_is_the_clipped_surrogate_summed() -> None:
    value, grad = _loss("ppo", clip_low_threshold=0.8, clip_high_threshold=1.2)
    ratio, adv = _ratio(), torch.tensor(ADV)
    expected = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv).sum()
    assert value == pytest.approx(float(expected), rel=1e-6)
    # Token 0 (ratio e^0.5 > 1.2, A > 0) and token 3 (ratio e^-0.8 < 0.8, A < 0) are clipped.
    live = [False, True, True, False]
    want = [float(-r * a) if on else 0.0 for r, a, on in zip(ratio, adv, live, strict=True)]
    assert grad == pytest.approx(want, rel=1e-5)


def test_cispo_weights_every_token_by_the_clipped_ratio() -> None:
    value, grad = _loss("cispo")
    weight, adv = _ratio().clamp(0.8, 1.2), torch.tensor(ADV)
    assert value == pytest.approx(float(-(weight * torch.tensor(NEW) * adv).sum()), rel=1e-6)
    assert grad == pytest.approx((-weight * adv).tolist(), rel=1e-5)


def test_importance_sampling_and_dro() -> None:
    value, _ = _loss("importance_sampling")
    assert value == pytest.approx(float(-(_ratio() * torch.tensor(ADV)).sum()), rel=1e-6)
    value, grad = _loss("dro", beta=0.1)
    lp, old, adv = torch.tensor(NEW), torch.tensor(OLD), torch.tensor(ADV)
    assert value == pytest.approx(float(-(lp * adv - 0.05 * (lp - old) ** 2).sum()), rel=1e-6)
    assert grad == pytest.approx((-(adv - 0.1 * (lp - old))).tolist(), rel=1e-5)
