"""GiGPO: episode-level group advantage plus step-level advantage from anchor-state groups."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

import torch

from trajforge.algos._groups import (
    discounted_returns,
    finish,
    index_sets,
    normalise_in_sets,
    outcome_with_turn_rewards,
)

if TYPE_CHECKING:
    from trajforge.algos.types import AdvantageInput, AdvantageOutput


def gigpo(
    inp: AdvantageInput,
    *,
    omega: float = 1.0,
    gamma: float = 0.95,
    scale_by_std: bool = False,
    eps: float = 1e-6,
) -> AdvantageOutput:
    """GiGPO (Group-in-Group Policy Optimization), equations 3-8 of the paper.

    Per-step rewards ``r_t^(i)`` are the turn rewards with the outcome ``R_i`` added to the
    last step. For the ``N`` trajectories ``tau_i`` of one group:

    Episode level (eq. 3): ``R(tau_i) = sum_t r_t^(i)`` and
    ``A^E(tau_i) = (R(tau_i) - mean_j R(tau_j)) / F_norm({R(tau_j)})``.

    Anchor-state groups (eq. 6): for each distinct state ``s~`` in the group,
    ``G^S(s~) = {(a_t^(i), R_t^(i)) | s_t^(i) = s~}`` over every trajectory ``i`` and step ``t``
    of the group (two steps of one trajectory from the same state both join), where (eq. 5)
    ``R_t^(i) = sum_{k >= t} gamma^(k-t) r_k^(i)`` is the discounted return from that step.

    Step level (eq. 7): ``A^S(a_t^(i)) = (R_t^(i) - mean_{G^S(s~)} R) / F_norm(G^S(s~))``.

    Combined (eq. 8): ``A(a_t^(i)) = A^E(tau_i) + omega * A^S(a_t^(i))``.

    ``F_norm`` is ``std + eps`` (sample std) with ``scale_by_std=True`` and 1 otherwise, the
    paper's choice for its agent benchmarks (verl-agent ``mode=mean_norm``). A step whose state
    is None or occurs once in its group has ``A^S = 0`` and keeps the episode advantage; a set
    whose values are all equal gets 0. Defaults follow the paper's ALFWorld setting
    (``omega = 1``, ``gamma = 0.95``).

    Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training",
    arXiv:2505.10978.
    """
    group_index, n_groups = index_sets(inp.group_ids)
    mask = inp.turn_mask
    turn_rewards = torch.where(mask, inp.turn_rewards.to(torch.float64), 0.0)
    episode_return = inp.rewards.to(torch.float64) + turn_rewards.sum(dim=1)
    episode_adv, _ = normalise_in_sets(
        episode_return, group_index, n_groups, scale_by_std=scale_by_std, eps=eps
    )

    step_returns = discounted_returns(outcome_with_turn_rewards(inp), mask, gamma)
    rows, cols = torch.nonzero(mask, as_tuple=True)
    anchors: list[Hashable] = []
    for b, k in zip(rows.tolist(), cols.tolist(), strict=True):
        keys = inp.state_keys[b]
        state = keys[k] if k < len(keys) else None
        # A step without a state key must not share a set with any other step.
        anchors.append(("state", inp.group_ids[b], state) if state is not None else ("step", b, k))
    anchor_index, n_anchors = index_sets(anchors)
    step_adv_flat, _ = normalise_in_sets(
        step_returns[rows, cols], anchor_index, n_anchors, scale_by_std=scale_by_std, eps=eps
    )
    step_adv = torch.zeros_like(step_returns)
    step_adv[rows, cols] = step_adv_flat

    adv = episode_adv.unsqueeze(1) + omega * step_adv
    sizes = torch.bincount(anchor_index, minlength=n_anchors)
    shared = int((sizes > 1).sum())
    steps_in_shared = int(sizes[sizes > 1].sum())
    n_steps = int(rows.numel())
    extra = {
        "anchor_groups": float(shared),
        "anchor_step_frac": steps_in_shared / n_steps if n_steps else 0.0,
    }
    return finish(inp, adv, extra)
