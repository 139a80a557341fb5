"""Advantage estimators: one function each, chosen by name with ``compute_advantages``.

Notation: trajectory ``i`` of group ``g(i)`` (the ``G`` samples of one task) has outcome reward
``R_i``, per-turn rewards ``r_{i,k}`` and turns ``k = 0..K_i-1``. Every estimator returns a
per-turn advantage ``A_{i,k}``; each token of turn ``k`` receives ``A_{i,k}`` and every token
outside an assistant turn receives 0. ``eps`` keeps divisions finite; a set of values that are
all equal (a group whose rewards are all equal, a group of one) gets advantage exactly 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from trajforge.algos._groups import (
    discounted_returns,
    finish,
    index_sets,
    normalise_in_sets,
    outcome_with_turn_rewards,
    per_trajectory,
)
from trajforge.algos.gigpo import gigpo
from trajforge.algos.names import Estimator
from trajforge.algos.types import AdvantageInput, AdvantageOutput
from trajforge.registry import Registry, keyword_options, refuse_unknown_options

if TYPE_CHECKING:
    from torch import Tensor


def _group_normalised(inp: AdvantageInput, *, scale_by_std: bool, eps: float) -> Tensor:
    group_index, n_groups = index_sets(inp.group_ids)
    adv, _ = normalise_in_sets(
        inp.rewards, group_index, n_groups, scale_by_std=scale_by_std, eps=eps
    )
    return adv


def grpo(inp: AdvantageInput, *, scale_by_std: bool = True, eps: float = 1e-6) -> AdvantageOutput:
    """GRPO: outcome reward normalised within its group.

    ``A_i = (R_i - mean_{j in g(i)} R_j) / (std_{j in g(i)} R_j + eps)`` for every turn of ``i``;
    ``std`` is the sample (Bessel-corrected) standard deviation. With ``scale_by_std=False``
    the division is dropped.

    Shao et al. 2024, "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
    Language Models", arXiv:2402.03300 (outcome supervision, section 4.1.2).
    """
    adv = _group_normalised(inp, scale_by_std=scale_by_std, eps=eps)
    return finish(inp, per_trajectory(inp, adv))


def dr_grpo(inp: AdvantageInput) -> AdvantageOutput:
    """Dr. GRPO: GRPO without the std division, ``A_i = R_i - mean_{j in g(i)} R_j``.

    The paper's other half, no per-response length normalisation, lives in the loss: use
    aggregation ``seq-mean-token-sum-norm`` with a constant ``max_length``.

    Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective",
    arXiv:2503.20783.
    """
    adv = _group_normalised(inp, scale_by_std=False, eps=0.0)
    return finish(inp, per_trajectory(inp, adv))


def rloo(inp: AdvantageInput) -> AdvantageOutput:
    """RLOO: leave-one-out baseline, ``A_i = R_i - 1/(G-1) * sum_{j in g(i), j != i} R_j``.

    Equivalently ``A_i = G/(G-1) * (R_i - mean_{j in g(i)} R_j)``; a group of one gets 0.

    Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
    from Human Feedback in LLMs", arXiv:2402.14740 (after Kool et al. 2019, "Buy 4 REINFORCE
    Samples, Get a Baseline for Free!").
    """
    group_index, n_groups = index_sets(inp.group_ids)
    centred, _ = normalise_in_sets(inp.rewards, group_index, n_groups, scale_by_std=False, eps=0.0)
    size = torch.zeros(n_groups, dtype=torch.float64).index_add_(
        0, group_index, torch.ones(inp.batch_size, dtype=torch.float64)
    )[group_index]
    adv = torch.where(size > 1, centred * size / (size - 1.0).clamp(min=1.0), 0.0)
    return finish(inp, per_trajectory(inp, adv))


def reinforce_pp(inp: AdvantageInput, *, gamma: float = 1.0, eps: float = 1e-6) -> AdvantageOutput:
    """REINFORCE++: discounted return, normalised over the whole batch (no group baseline).

    ``G_{i,k} = sum_{j >= k} gamma^(j-k) r'_{i,j}`` with ``r'_{i,j} = r_{i,j}`` plus ``R_i`` on the
    last turn; ``A_{i,k} = (G_{i,k} - mu) / (sigma + eps)`` where ``mu`` and ``sigma`` (population
    std) are taken over every assistant *token* of the batch, each token carrying its turn's
    return, as REINFORCE++ whitens over all action tokens. The paper discounts over tokens with
    the reward on the last token; here the discount runs over turns, the agent's steps. A KL
    penalty, when wanted, goes into the rewards first (``apply_kl_penalty``).

    Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language
    Models", arXiv:2501.03262.
    """
    returns = discounted_returns(outcome_with_turn_rewards(inp), inp.turn_mask, gamma)
    idx = inp.token_turn_index
    on_turn = idx >= 0
    if inp.num_turns:
        token_returns = torch.gather(returns, 1, idx.clamp(min=0))[on_turn]
    else:
        token_returns = torch.zeros(0, dtype=torch.float64)
    adv = torch.zeros_like(returns)
    if token_returns.numel() and bool(token_returns.max() > token_returns.min()):
        mu = token_returns.mean()
        sigma = token_returns.std(unbiased=False)
        adv = (returns - mu) / (sigma + eps)
    return finish(inp, adv)


def turn_returns(
    inp: AdvantageInput, *, gamma: float = 1.0, scale_by_std: bool = True, eps: float = 1e-6
) -> AdvantageOutput:
    """Discounted turn returns normalised within the group, across all its turns.

    ``G_{i,k} = sum_{j >= k} gamma^(j-k) r'_{i,j}`` with ``r'_{i,j} = r_{i,j}`` plus ``R_i`` on the
    last turn. For the set ``S_g`` of every turn of every trajectory in group ``g`` (each turn
    counted once, whatever its length):
    ``A_{i,k} = (G_{i,k} - mean_{S_g} G) / (std_{S_g} G + eps)``, ``std`` the sample
    (Bessel-corrected) standard deviation, dropped with ``scale_by_std=False``.

    Turn-level credit from per-step rewards, as used by SPA-RL (Wang et al. 2025, "SPA-RL:
    Reinforcing LLM Agents via Stepwise Progress Attribution", arXiv:2505.20732); the return is
    the classic discounted return (Sutton & Barto, "Reinforcement Learning", ch. 3) and the
    normalisation GRPO's (arXiv:2402.03300), applied per turn instead of per trajectory.
    """
    returns = discounted_returns(outcome_with_turn_rewards(inp), inp.turn_mask, gamma)
    group_index, n_groups = index_sets(inp.group_ids)
    rows, cols = torch.nonzero(inp.turn_mask, as_tuple=True)
    normalised, _ = normalise_in_sets(
        returns[rows, cols], group_index[rows], n_groups, scale_by_std=scale_by_std, eps=eps
    )
    adv = torch.zeros_like(returns)
    adv[rows, cols] = normalised
    return finish(inp, adv)


EstimatorFn = Callable[..., AdvantageOutput]

ESTIMATORS: Registry[EstimatorFn] = Registry("estimator")
for _name, _fn in (
    (Estimator.GRPO, grpo),
    (Estimator.DR_GRPO, dr_grpo),
    (Estimator.RLOO, rloo),
    (Estimator.REINFORCE_PP, reinforce_pp),
    (Estimator.TURN_RETURNS, turn_returns),
    (Estimator.GIGPO, gigpo),
):
    ESTIMATORS.add(_name, _fn)


def weight_by_sign(advantages: Tensor, *, positive: float = 1.0, negative: float = 1.0) -> Tensor:
    """Scale positive and negative advantages separately (Zhu et al. 2025, "The Surprising
    Effectiveness of Negative Reinforcement in LLM Reasoning", arXiv:2506.01347).

    The paper splits the policy gradient into positive-sample reinforcement (PSR, ``A > 0``)
    and negative-sample reinforcement (NSR, ``A < 0``). ``positive=1, negative=1`` is the
    estimator unchanged; ``negative=0`` is PSR alone (rejection-sampling fine-tuning weighted by
    advantage); ``positive=0.1`` is their W-REINFORCE, which favours NSR to keep exploring.
    """
    return torch.where(advantages < 0, advantages * negative, advantages * positive)


def estimator_options(estimator: str) -> list[str]:
    """The keyword options an estimator accepts (besides the input)."""
    return keyword_options(ESTIMATORS.get(estimator))


def compute_advantages(estimator: str, inp: AdvantageInput, **kwargs: object) -> AdvantageOutput:
    """Run the estimator called ``estimator`` (a name in ``ESTIMATORS``) on ``inp``.

    Raises:
        ConfigError: the estimator is unknown, or an option is not one it takes.
    """
    fn = ESTIMATORS.get(estimator)
    refuse_unknown_options(f"estimator {estimator!r}", fn, kwargs)
    return fn(inp, **kwargs)
