"""Properties: order of trajectories does not matter; masked tokens never get gradient."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trajforge.algos import ESTIMATORS, LOSSES, AdvantageInput, compute_advantages, policy_loss

REWARDS = [0.0, 0.25, 0.5, 1.0]
STATES = [None, "s0", "s1", "s2"]


@st.composite
def batches(draw: st.DrawFn) -> tuple[AdvantageInput, list[int]]:
    """A random batch with 1-4 groups, 0-3 turns per trajectory, 0-8 tokens, and a permutation."""
    b = draw(st.integers(1, 7))
    k = draw(st.integers(1, 3))
    t = draw(st.integers(1, 8))
    groups = draw(st.lists(st.sampled_from("abcd"), min_size=b, max_size=b))
    rewards = draw(st.lists(st.sampled_from(REWARDS), min_size=b, max_size=b))
    turn_rewards, turn_mask, states, index = [], [], [], []
    for _ in range(b):
        n = draw(st.integers(0, k))
        turn_rewards.append(draw(st.lists(st.sampled_from(REWARDS), min_size=k, max_size=k)))
        turn_mask.append([i < n for i in range(k)])
        states.append(draw(st.lists(st.sampled_from(STATES), min_size=n, max_size=n)))
        index.append(draw(st.lists(st.integers(-1, n - 1), min_size=t, max_size=t)))
    inp = AdvantageInput(
        rewards=torch.tensor(rewards),
        group_ids=groups,
        turn_rewards=torch.tensor(turn_rewards),
        turn_mask=torch.tensor(turn_mask),
        state_keys=states,
        token_turn_index=torch.tensor(index, dtype=torch.long),
    )
    perm = draw(st.permutations(list(range(b))))
    return inp, perm


def permuted(inp: AdvantageInput, perm: list[int]) -> AdvantageInput:
    p = torch.tensor(perm, dtype=torch.long)
    return AdvantageInput(
        rewards=inp.rewards[p],
        group_ids=[inp.group_ids[i] for i in perm],
        turn_rewards=inp.turn_rewards[p],
        turn_mask=inp.turn_mask[p],
        state_keys=[inp.state_keys[i] for i in perm],
        token_turn_index=inp.token_turn_index[p],
    )


@settings(max_examples=60, deadline=None)
@given(case=batches(), estimator=st.sampled_from(sorted(ESTIMATORS)))
def test_shuffling_trajectories_permutes_advantages_only(
    case: tuple[AdvantageInput, list[int]], estimator: str
) -> None:
    inp, perm = case
    base = compute_advantages(estimator, inp)
    shuffled = compute_advantages(estimator, permuted(inp, perm))
    p = torch.tensor(perm, dtype=torch.long)
    torch.testing.assert_close(
        shuffled.token_advantages, base.token_advantages[p], atol=1e-6, rtol=0
    )
    torch.testing.assert_close(shuffled.turn_advantages, base.turn_advantages[p], atol=1e-6, rtol=0)
    assert shuffled.metrics.keys() == base.metrics.keys()
    for key, value in base.metrics.items():
        assert shuffled.metrics[key] == pytest.approx(value, abs=1e-6), key
    assert bool((base.token_advantages[inp.token_turn_index == -1] == 0).all())


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize(
    "aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_masked_tokens_never_receive_gradient(name: str, aggregation: str) -> None:
    gen = torch.Generator().manual_seed(7)
    shape = (4, 9)
    mask = torch.rand(shape, generator=gen) < 0.6
    mask[3] = False  # a sequence with no assistant token at all
    logprobs = (-torch.rand(shape, generator=gen) * 3).requires_grad_()
    old = (logprobs.detach() + 0.3 * torch.randn(shape, generator=gen)).clone()
    ref = logprobs.detach() + 0.2 * torch.randn(shape, generator=gen)
    adv = torch.randn(shape, generator=gen)
    # Off-mask junk of every kind must neither leak into the loss nor into the gradient.
    old[~mask] = float("nan")
    ref[~mask] = float("inf")
    adv[~mask] = float("-inf")
    logits = torch.randn(*shape, 5, generator=gen)
    loss, metrics = policy_loss(
        name,
        logprobs,
        old,
        adv,
        mask,
        aggregation=aggregation,
        max_length=9,
        logits=logits,
        ref_logprobs=ref,
        kl_coef=0.05,
    )
    loss.backward()
    assert logprobs.grad is not None
    assert bool(torch.isfinite(loss))
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert bool((logprobs.grad[~mask] == 0).all())
    assert bool((logprobs.grad[mask] != 0).any())

    # Changing any off-mask value changes neither the loss nor the gradient.
    logprobs2 = logprobs.detach().clone()
    logprobs2[~mask] = -50.0
    logprobs2.requires_grad_()
    loss2, _ = policy_loss(
        name,
        logprobs2,
        old,
        adv,
        mask,
        aggregation=aggregation,
        max_length=9,
        ref_logprobs=ref,
        kl_coef=0.05,
    )
    loss2.backward()
    assert logprobs2.grad is not None
    torch.testing.assert_close(loss2, loss, atol=0, rtol=0)
    torch.testing.assert_close(logprobs2.grad, logprobs.grad, atol=0, rtol=0)
