"""Role-conditioned advantage estimation (RAE) for self-play: a baseline per game and role.

In a zero-sum game played by one policy in every seat, the seats' returns differ by design
(the first mover of tic-tac-toe wins more often; in Kuhn poker the second seat has the edge),
so one baseline shared by every seat would credit a seat for the luck of its role. RAE keeps an
exponential moving average ``b_{G,p}`` of the return of each game ``G`` and role ``p`` across
training steps, and measures each trajectory against its own role's baseline.

For the trajectories ``i = 1..B`` of a step, in order, with role ``p = p(i)`` and return
``R_i``:

    b_{G,p} <- alpha * b_{G,p} + (1 - alpha) * R_i
    A_i     =  R_i - b_{G,p}

(baselines start at 0). Every turn of trajectory ``i`` gets ``A_i``. There is no division by
a standard deviation: the baseline only reduces variance, and the estimate stays unbiased.

Liu et al. 2025, "SPIRAL: Self-Play on Zero-Sum Games Incentivizes Reasoning via Multi-Agent
Multi-Turn Reinforcement Learning", arXiv:2506.24119 (section 3.3, role-conditioned advantage
estimation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from trajforge.algos._groups import finish, per_trajectory
from trajforge.algos.types import AdvantageInput, AdvantageOutput, AlgosInputError

if TYPE_CHECKING:
    from torch import Tensor

DEFAULT_ALPHA = 0.95


def role_baseline_advantages(
    rewards: Tensor,
    roles: Sequence[str],
    baselines: Mapping[str, float],
    *,
    alpha: float = DEFAULT_ALPHA,
) -> tuple[Tensor, dict[str, float]]:
    """RAE's advantage of each return and the baselines after the step.

    Args:
        rewards: ``[B]`` return of each trajectory.
        roles: ``B`` role keys (game and seat, e.g. ``tictactoe:x``).
        baselines: Each role's baseline before the step (a role not in it starts at 0).
        alpha: The moving average's decay, in ``[0, 1)``.

    Returns:
        ``[B]`` advantages (float64) and every role's baseline after the step.
    """
    if rewards.dim() != 1 or len(roles) != rewards.shape[0]:
        raise AlgosInputError(
            f"roles: {len(roles)} roles for rewards of shape {list(rewards.shape)}"
        )
    if not 0.0 <= alpha < 1.0:
        raise AlgosInputError(f"alpha: must lie in [0, 1), got {alpha}")
    after = dict(baselines)
    advantages = torch.zeros(len(roles), dtype=torch.float64)
    for i, (role, reward) in enumerate(zip(roles, rewards.tolist(), strict=True)):
        after[role] = alpha * after.get(role, 0.0) + (1.0 - alpha) * reward
        advantages[i] = reward - after[role]
    return advantages, after


def rae_advantages(
    inp: AdvantageInput,
    roles: Sequence[str],
    baselines: Mapping[str, float],
    *,
    alpha: float = DEFAULT_ALPHA,
) -> tuple[AdvantageOutput, dict[str, float]]:
    """RAE over a training batch: ``role_baseline_advantages`` on ``inp.rewards``, each
    trajectory's advantage given to every turn (and token) of it; returns the baselines after
    the step too, which the caller keeps for the next one."""
    adv, after = role_baseline_advantages(inp.rewards, roles, baselines, alpha=alpha)
    return finish(inp, per_trajectory(inp, adv)), after
