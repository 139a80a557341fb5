"""Shared pieces of the estimators: set-wise normalisation, discounted returns, broadcasting.

Internally everything is computed in float64 so that hand-computed expectations hold to 1e-6
whatever dtype the caller uses.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import torch

from trajforge.algos.types import AdvantageOutput, AlgosInputError

if TYPE_CHECKING:
    from torch import Tensor

    from trajforge.algos.types import AdvantageInput


def index_sets(keys: Sequence[Hashable]) -> tuple[Tensor, int]:
    """Map each key to a dense set id, numbered in order of first appearance."""
    ids: dict[Hashable, int] = {}
    out = [ids.setdefault(key, len(ids)) for key in keys]
    return torch.tensor(out, dtype=torch.long), len(ids)


def drop_from_groups(
    group_ids: Sequence[Hashable], dropped: Tensor, *, min_size: int = 2
) -> tuple[Tensor, int]:
    """The rows left for the advantages once the ``dropped`` ones are taken out of their groups.

    A row stays when it is not dropped and its group kept at least ``min_size`` rows; a group
    that lost rows and kept fewer is skipped whole (one sample has no baseline to compare
    against). A group that lost nothing stays as it is, whatever its size. Returns the ``[B]``
    bool mask of the rows that stay and the number of groups skipped.
    """
    if len(group_ids) != dropped.shape[0]:
        raise AlgosInputError(f"dropped: {dropped.shape[0]} flags for {len(group_ids)} group ids")
    gone = dropped.bool()
    set_index, n_sets = index_sets(group_ids)
    kept = torch.zeros(n_sets, dtype=torch.long).index_add_(0, set_index, (~gone).long())
    lost = torch.zeros(n_sets, dtype=torch.long).index_add_(0, set_index, gone.long())
    skipped = (lost > 0) & (kept < min_size)
    return ~gone & ~skipped[set_index], int(skipped.sum())


def normalise_in_sets(
    values: Tensor, set_index: Tensor, n_sets: int, *, scale_by_std: bool, eps: float
) -> tuple[Tensor, Tensor]:
    """``(x - mean_S) / (std_S + eps)`` (or ``x - mean_S``) within each set ``S``.

    ``std_S`` is the sample standard deviation (Bessel-corrected, as ``torch.std``, TRL and
    verl use). A set whose values are all equal — including a set of one — gets exactly 0, never
    a division by zero. Returns the normalised values and a ``[n_sets]`` bool tensor marking
    the sets whose values were all equal.
    """
    x = values.to(torch.float64)
    count = torch.zeros(n_sets, dtype=torch.float64).index_add_(0, set_index, torch.ones_like(x))
    total = torch.zeros(n_sets, dtype=torch.float64).index_add_(0, set_index, x)
    mean = total / count.clamp(min=1.0)
    centred = x - mean[set_index]
    hi = torch.full((n_sets,), -torch.inf, dtype=torch.float64).scatter_reduce(
        0, set_index, x, reduce="amax"
    )
    lo = torch.full((n_sets,), torch.inf, dtype=torch.float64).scatter_reduce(
        0, set_index, x, reduce="amin"
    )
    constant = hi <= lo
    if scale_by_std:
        sq = torch.zeros(n_sets, dtype=torch.float64).index_add_(0, set_index, centred**2)
        std = (sq / (count - 1.0).clamp(min=1.0)).sqrt()
        centred = centred / (std[set_index] + eps)
    # Equal values must give exactly 0; the float mean of equal numbers need not equal them.
    normalised = torch.where(constant[set_index], torch.zeros_like(centred), centred)
    return normalised, constant


def outcome_with_turn_rewards(inp: AdvantageInput) -> Tensor:
    """``[B, K]`` float64 per-turn rewards with the outcome added to each last valid turn."""
    mask = inp.turn_mask
    r = torch.where(mask, inp.turn_rewards.to(torch.float64), 0.0)
    if not inp.num_turns:
        return r
    positions = torch.arange(inp.num_turns).expand_as(mask)
    last = torch.where(mask, positions, -1).max(dim=1).values
    rows = torch.nonzero(last >= 0).squeeze(1)
    r[rows, last[rows]] += inp.rewards.to(torch.float64)[rows]
    return r


def discounted_returns(step_rewards: Tensor, turn_mask: Tensor, gamma: float) -> Tensor:
    """``G_k = r_k + gamma * G_{k'}`` where ``k'`` is the next valid turn; 0 on absent turns."""
    returns = torch.zeros_like(step_rewards)
    running = torch.zeros(step_rewards.shape[0], dtype=step_rewards.dtype)
    for k in reversed(range(step_rewards.shape[1])):
        valid = turn_mask[:, k]
        running = torch.where(valid, step_rewards[:, k] + gamma * running, running)
        returns[:, k] = torch.where(valid, running, 0.0)
    return returns


def finish(
    inp: AdvantageInput, turn_adv: Tensor, extra: dict[str, float] | None = None
) -> AdvantageOutput:
    """Broadcast turn advantages to tokens and compute the common metrics."""
    out_dtype = inp.rewards.dtype if inp.rewards.dtype.is_floating_point else torch.float32
    turn_adv = torch.where(inp.turn_mask, turn_adv.to(torch.float64), 0.0)
    idx = inp.token_turn_index
    on_turn = idx >= 0
    if inp.num_turns:
        token_adv = torch.where(on_turn, torch.gather(turn_adv, 1, idx.clamp(min=0)), 0.0)
    else:
        token_adv = torch.zeros(idx.shape, dtype=torch.float64)

    group_index, n_groups = index_sets(inp.group_ids)
    nonzero = (turn_adv != 0).any(dim=1).to(torch.float64)
    group_nonzero = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, group_index, nonzero)
    zero_groups = int((group_nonzero == 0).sum())
    token_values = token_adv[on_turn]
    rewards = inp.rewards.to(torch.float64)
    metrics = {
        "groups": float(n_groups),
        "zero_adv_groups": float(zero_groups),
        "zero_adv_group_frac": zero_groups / n_groups if n_groups else 0.0,
        "adv_mean": float(token_values.mean()) if token_values.numel() else 0.0,
        "adv_std": float(token_values.std(unbiased=False)) if token_values.numel() else 0.0,
        "reward_mean": float(rewards.mean()) if rewards.numel() else 0.0,
        "reward_std": float(rewards.std(unbiased=False)) if rewards.numel() else 0.0,
    }
    metrics.update(extra or {})
    return AdvantageOutput(
        token_advantages=token_adv.to(out_dtype),
        turn_advantages=turn_adv.to(out_dtype),
        metrics=metrics,
    )


def per_trajectory(inp: AdvantageInput, values: Tensor) -> Tensor:
    """Broadcast one value per trajectory ``[B]`` to every turn ``[B, K]``."""
    return values.unsqueeze(1).expand(inp.batch_size, inp.num_turns)
