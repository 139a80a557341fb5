"""Every loss and aggregation against values worked out by hand.

Shared case: two sequences of four positions, five loss tokens (position 0 is a prompt token;
the last position of row 1 is padding). Off-mask entries hold nan on purpose.

    row 0: logprobs (-1.0, -0.5, -2.0), old (-1.1, -0.2, -2.0), advantages (1, 1, -0.5)
           log-ratios (0.1, -0.3, 0.0) -> rho = (e^0.1, e^-0.3, 1) = (1.105171, 0.740818, 1)
    row 1: logprobs (-0.3, -1.2), old (-0.3, -0.9), advantages (-1, -1)
           log-ratios (0.0, -0.3) -> rho = (1, 0.740818)
"""

from __future__ import annotations

import math

import pytest
import torch

from trajforge.algos import (
    LOSSES,
    aggregate,
    dro,
    entropy_from_logits,
    importance_sampling,
    policy_loss,
    truncated_is_weights,
)
from trajforge.errors import ConfigError

NAN = float("nan")
R_UP = math.exp(0.1)  # 1.1051709
R_DOWN = math.exp(-0.3)  # 0.7408182


def case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    logprobs = torch.tensor(
        [[NAN, -1.0, -0.5, -2.0], [NAN, -0.3, -1.2, NAN]], dtype=torch.float64
    ).requires_grad_()
    old = torch.tensor([[NAN, -1.1, -0.2, -2.0], [NAN, -0.3, -0.9, NAN]], dtype=torch.float64)
    adv = torch.tensor([[NAN, 1.0, 1.0, -0.5], [NAN, -1.0, -1.0, NAN]], dtype=torch.float64)
    mask = torch.tensor([[False, True, True, True], [False, True, True, False]])
    return logprobs, old, adv, mask


def grad_of(loss: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    loss.backward()
    assert logprobs.grad is not None
    return logprobs.grad


def test_ppo_clip_asymmetric_token_mean() -> None:
    lp, old, adv, mask = case()
    # eps_low 0.2, eps_high 0.05:
    #   r0t1: A=1,  rho 1.105 > 1.05 -> clipped high, L = -1.05
    #   r0t2: A=1,  rho 0.741        -> min(0.741, 0.8) = 0.741, L = -0.741 (no clip: A > 0)
    #   r0t3: A=-.5, rho 1           -> L = 0.5
    #   r1t1: A=-1, rho 1            -> L = 1.0
    #   r1t2: A=-1, rho 0.741 < 0.8  -> min(-0.741, -0.8) = -0.8, clipped low, L = 0.8
    loss, metrics = policy_loss("ppo_clip", lp, old, adv, mask, eps_low=0.2, eps_high=0.05)
    assert loss.item() == pytest.approx((-1.05 - R_DOWN + 0.5 + 1.0 + 0.8) / 5, abs=1e-9)
    assert metrics["clip_frac_high"] == pytest.approx(1 / 5)
    assert metrics["clip_frac_low"] == pytest.approx(1 / 5)
    assert metrics["clip_frac"] == pytest.approx(2 / 5)
    # Unclipped tokens: dL/dlogprob = -rho * A / 5; clipped tokens: 0.
    want = torch.tensor(
        [[0.0, 0.0, -R_DOWN / 5, 0.5 / 5], [0.0, 1.0 / 5, 0.0, 0.0]], dtype=torch.float64
    )
    torch.testing.assert_close(grad_of(loss, lp), want, atol=1e-12, rtol=0)
    # approx_kl: mean of (rho - 1 - log rho) over the five tokens.
    k3 = [R_UP - 1 - 0.1, R_DOWN - 1 + 0.3, 0.0, 0.0, R_DOWN - 1 + 0.3]
    assert metrics["approx_kl"] == pytest.approx(sum(k3) / 5, abs=1e-9)
    advs = [1.0, 1.0, -0.5, -1.0, -1.0]
    mean = sum(advs) / 5
    assert metrics["adv_mean"] == pytest.approx(mean)
    assert metrics["adv_std"] == pytest.approx(math.sqrt(sum((a - mean) ** 2 for a in advs) / 5))
    assert metrics["loss_tokens"] == 5


def test_aggregations() -> None:
    per_token = torch.tensor([[NAN, -1.05, -R_DOWN, 0.5], [NAN, 1.0, 0.8, NAN]])
    mask = torch.tensor([[False, True, True, True], [False, True, True, False]])
    row0, row1 = -1.05 - R_DOWN + 0.5, 1.0 + 0.8
    assert aggregate(per_token, mask, "token-mean").item() == pytest.approx((row0 + row1) / 5)
    assert aggregate(per_token, mask, "seq-mean-token-mean").item() == pytest.approx(
        (row0 / 3 + row1 / 2) / 2
    )
    # Dr. GRPO: a constant normaliser, here max_length 4 for 2 sequences.
    assert aggregate(per_token, mask, "seq-mean-token-sum-norm", max_length=4).item() == (
        pytest.approx((row0 + row1) / (4 * 2))
    )
    # Gradient accumulation: totals over the whole optimiser batch.
    assert aggregate(per_token, mask, "token-mean", total_tokens=10).item() == pytest.approx(
        (row0 + row1) / 10
    )
    assert aggregate(per_token, mask, "seq-mean-token-mean", total_sequences=4).item() == (
        pytest.approx((row0 / 3 + row1 / 2) / 4)
    )
    # A row with no loss token does not count as a sequence in seq-mean-token-mean.
    empty = torch.tensor([[False] * 4, [False, True, True, False]])
    assert aggregate(per_token, empty, "seq-mean-token-mean").item() == pytest.approx(row1 / 2)


def test_dr_grpo_aggregation_needs_max_length() -> None:
    lp, old, adv, mask = case()
    with pytest.raises(ConfigError, match="max_length"):
        policy_loss("ppo_clip", lp, old, adv, mask, aggregation="seq-mean-token-sum-norm")
    with pytest.raises(ConfigError, match="aggregation: unknown"):
        policy_loss("ppo_clip", lp, old, adv, mask, aggregation="sum")


def test_gspo_sequence_ratio() -> None:
    lp, old, adv, mask = case()
    # Row 0: log s = (0.1 - 0.3 + 0) / 3; row 1: log s = (0 - 0.3) / 2 = -0.15.
    s0, s1 = math.exp(-0.2 / 3), math.exp(-0.15)  # 0.935507, 0.860708
    assert 0.9 < s0 < 1.1 and s1 < 0.9
    # Clip range [0.9, 1.1]: s0 inside; s1 below with A = -1 < 0 -> clipped low on both tokens.
    #   row 0 tokens: -s0*1, -s0*1, +0.5*s0;  row 1 tokens: -min(-s1, -0.9) = 0.9 each.
    loss, metrics = policy_loss(
        "gspo", lp, old, adv, mask, aggregation="seq-mean-token-mean", eps_low=0.1, eps_high=0.1
    )
    row0 = (-s0 - s0 + 0.5 * s0) / 3
    assert loss.item() == pytest.approx((row0 + 0.9) / 2, abs=1e-9)
    assert metrics["clip_frac_low"] == pytest.approx(2 / 5)
    assert metrics["clip_frac_high"] == 0
    # dL/dlogprob_t = (1/2 rows) (1/3 tokens) (-s0 A_t) for row 0; row 1 clipped: 0.
    want = torch.tensor(
        [[0.0, -s0 / 6, -s0 / 6, 0.5 * s0 / 6], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64
    )
    torch.testing.assert_close(grad_of(loss, lp), want, atol=1e-12, rtol=0)


def test_gspo_gradient_is_the_sequence_level_gradient() -> None:
    # With one advantage per sequence, GSPO-token's gradient equals the gradient of the
    # sequence-level objective -min(s_i A_i, clip(s_i) A_i) averaged over sequences.
    gen = torch.Generator().manual_seed(3)
    lp = (-torch.rand(3, 6, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    old = lp.detach() + 0.05 * torch.randn(3, 6, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 1], [1, 0, 1, 0, 1, 0]]).bool()
    seq_adv = torch.tensor([1.5, -0.7, 0.3], dtype=torch.float64)
    adv = seq_adv.unsqueeze(1).expand(3, 6)
    loss, _ = policy_loss(
        "gspo", lp, old, adv, mask, aggregation="seq-mean-token-mean", eps_low=0.2, eps_high=0.2
    )
    g_token = grad_of(loss, lp).clone()

    lp2 = lp.detach().clone().requires_grad_()
    m = mask.double()
    s = torch.exp(((lp2 - old) * m).sum(-1) / m.sum(-1))
    ref_loss = -torch.min(s * seq_adv, s.clamp(0.8, 1.2) * seq_adv).mean()
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, atol=1e-12, rtol=0)
    assert lp2.grad is not None
    torch.testing.assert_close(g_token, lp2.grad * m, atol=1e-12, rtol=0)


def test_cispo_clips_the_weight_not_the_gradient() -> None:
    lp, old, adv, mask = case()
    # eps_high 0.05, no lower bound: weights (1.05, 0.741, 1, 1, 0.741); L = -w A logprob:
    #   r0: -1.05*1*(-1) = 1.05;  -0.741*1*(-0.5) = 0.370;  -1*(-0.5)*(-2) = -1.0
    #   r1: -1*(-1)*(-0.3) = -0.3;  -0.741*(-1)*(-1.2) = -0.889
    loss, metrics = policy_loss("cispo", lp, old, adv, mask, eps_high=0.05)
    total = 1.05 + 0.5 * R_DOWN - 1.0 - 0.3 - 1.2 * R_DOWN
    assert loss.item() == pytest.approx(total / 5, abs=1e-9)
    assert metrics["clip_frac_high"] == pytest.approx(1 / 5)
    assert metrics["clip_frac_low"] == 0
    # Every token keeps a gradient -w A / 5, including the clipped one.
    want = torch.tensor(
        [[0.0, -1.05 / 5, -R_DOWN / 5, 0.5 / 5], [0.0, 1.0 / 5, R_DOWN / 5, 0.0]],
        dtype=torch.float64,
    )
    torch.testing.assert_close(grad_of(loss, lp), want, atol=1e-12, rtol=0)

    lp, old, adv, mask = case()
    loss, metrics = policy_loss("cispo", lp, old, adv, mask, eps_low=0.2, eps_high=0.05)
    # With a lower bound 0.8 both rho = 0.741 weights become 0.8.
    total = 1.05 + 0.5 * 0.8 - 1.0 - 0.3 - 1.2 * 0.8
    assert loss.item() == pytest.approx(total / 5, abs=1e-9)
    assert metrics["clip_frac_low"] == pytest.approx(2 / 5)


def test_reinforce() -> None:
    lp, old, adv, mask = case()
    # L = -A logprob: (1.0, 0.5, -1.0) and (-0.3, -1.2).
    loss, metrics = policy_loss("reinforce", lp, old, adv, mask)
    assert loss.item() == pytest.approx((1.0 + 0.5 - 1.0 - 0.3 - 1.2) / 5, abs=1e-12)
    assert metrics["clip_frac"] == 0
    want = torch.tensor([[0.0, -0.2, -0.2, 0.1], [0.0, 0.2, 0.2, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(grad_of(loss, lp), want, atol=1e-12, rtol=0)


def test_importance_sampling_and_dro_per_token() -> None:
    """Tinker's two losses beyond PPO and CISPO: -rho A, and -(A logprob - beta/2 (logprob -
    old)^2), each token's value by hand (rho = e^0.1 on the first, e^-0.3 on the second)."""
    lp = torch.tensor([[-1.0, -0.5, -2.0]], dtype=torch.float64)
    old = torch.tensor([[-1.1, -0.2, -2.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0, -0.5]], dtype=torch.float64)
    mask = torch.ones_like(lp, dtype=torch.bool)
    out = importance_sampling(lp, old, adv, mask)
    assert out.loss[0].tolist() == pytest.approx([-R_UP, -R_DOWN, 0.5], abs=1e-7)
    assert not out.clipped_low.any() and not out.clipped_high.any()
    # DRO at beta 0.5: -(A lp) + 0.25 (lp - old)^2 = 1.0 + 0.0025, 0.5 + 0.0225, -1.0 + 0.
    out = dro(lp, old, adv, mask, beta=0.5)
    assert out.loss[0].tolist() == pytest.approx([1.0025, 0.5225, -1.0], abs=1e-12)


def test_kl_loss_term_and_entropy_metric() -> None:
    lp, old, adv, mask = case()
    ref = lp.detach() - 0.5  # log r = -0.5 on every token: k3 = e^-0.5 - 1 + 0.5
    k3 = math.exp(-0.5) - 0.5
    logits = torch.zeros(2, 4, 2)
    logits[1, :, 1] = math.log(3.0)  # row 1: p = (1/4, 3/4)
    loss, metrics = policy_loss(
        "reinforce", lp, old, adv, mask, ref_logprobs=ref, kl_coef=0.1, logits=logits
    )
    assert loss.item() == pytest.approx((1.0 + 0.5 - 1.0 - 0.3 - 1.2) / 5 + 0.1 * k3, abs=1e-12)
    assert metrics["kl_ref"] == pytest.approx(k3)
    h1 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert metrics["entropy"] == pytest.approx((3 * math.log(2) + 2 * h1) / 5, abs=1e-6)


def test_entropy_from_logits() -> None:
    logits = torch.tensor([[0.0, 0.0], [0.0, math.log(3.0)], [100.0, 0.0]])
    h = entropy_from_logits(logits)
    h1 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(h, torch.tensor([math.log(2), h1, 0.0]), atol=1e-6, rtol=0)


def test_unknown_loss_and_option_are_config_errors() -> None:
    lp, old, adv, mask = case()
    with pytest.raises(ConfigError, match="unknown loss 'ppo'"):
        policy_loss("ppo", lp, old, adv, mask)
    with pytest.raises(ConfigError, match="unknown option 'eps_high'"):
        policy_loss("reinforce", lp, old, adv, mask, eps_high=0.3)
    with pytest.raises(ConfigError, match="advantages: shape"):
        policy_loss("reinforce", lp, old, adv[:, :3], mask)
    assert set(LOSSES) == {"ppo_clip", "gspo", "cispo", "reinforce"}


def test_truncated_is_weights_are_the_capped_ratio_on_the_mask_and_one_off_it() -> None:
    lp = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])
    rollout = torch.tensor([[-1.1, -1.0, -2.0, -0.2]])
    mask = torch.tensor([[1, 1, 1, 0]])
    w = truncated_is_weights(lp, rollout, mask, cap=2.0)
    expected = [math.exp(0.1), math.exp(-1.0), 2.0, 1.0]  # exp(1.5) capped; off the mask: 1
    assert w[0].tolist() == pytest.approx(expected)
    with pytest.raises(ConfigError, match="cap 0"):
        truncated_is_weights(lp, rollout, mask, cap=0)
