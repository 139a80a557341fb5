"""KL estimators k1/k2/k3 and the reward penalty, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from trajforge.algos import apply_kl_penalty, kl_estimate
from trajforge.errors import ConfigError

# Two tokens: log r = ref - logprob = -0.5 and +1.0.
LOGPROBS = torch.tensor([[-1.0, -2.0]])
REF = torch.tensor([[-1.5, -1.0]])


@pytest.mark.parametrize(
    ("kind", "want"),
    [
        ("k1", [0.5, -1.0]),
        ("k2", [0.125, 0.5]),
        ("k3", [math.exp(-0.5) - 1 + 0.5, math.e - 1 - 1.0]),
    ],
)
def test_estimators(kind: str, want: list[float]) -> None:
    got = kl_estimate(kind, LOGPROBS, REF)
    torch.testing.assert_close(got, torch.tensor([want]), atol=1e-6, rtol=0)


def test_k3_gradient() -> None:
    # d/dlogprob (e^(ref-lp) - 1 - (ref-lp)) = 1 - e^(ref-lp)
    lp = LOGPROBS.clone().requires_grad_()
    kl_estimate("k3", lp, REF).sum().backward()
    assert lp.grad is not None
    torch.testing.assert_close(
        lp.grad, torch.tensor([[1 - math.exp(-0.5), 1 - math.e]]), atol=1e-6, rtol=0
    )


def test_estimators_are_zero_when_policies_agree() -> None:
    for kind in ("k1", "k2", "k3"):
        assert bool((kl_estimate(kind, LOGPROBS, LOGPROBS) == 0).all())


def test_penalty() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    kl = torch.tensor([[0.2, float("inf"), 0.4]])
    mask = torch.tensor([[True, False, True]])
    out = apply_kl_penalty(rewards, kl, 0.5, mask)
    torch.testing.assert_close(out, torch.tensor([[-0.1, 0.0, 0.8]]))
    torch.testing.assert_close(
        apply_kl_penalty(rewards, torch.tensor([[0.2, 0.2, 0.2]]), 1.0),
        torch.tensor([[-0.2, -0.2, 0.8]]),
    )


def test_unknown_kind() -> None:
    with pytest.raises(ConfigError, match="kl_kind: unknown 'k4'"):
        kl_estimate("k4", LOGPROBS, REF)
