"""Inputs and outputs of the advantage estimators, aligned with the training token layout.

A batch holds ``B`` trajectories, each with up to ``K`` assistant turns and ``T`` context tokens
(the concatenation of every message's ``token_ids``, right-padded). ``token_turn_index[b, t]`` is
the index of the assistant turn that token ``t`` belongs to, or ``-1`` for every other token
(system, user, tool, template and padding tokens), so the per-token advantage is the advantage of
the token's turn and exactly zero off the loss mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from trajforge.errors import TrajforgeError

if TYPE_CHECKING:
    from torch import Tensor


class AlgosInputError(TrajforgeError):
    """Tensors handed to an estimator or a loss do not fit together; the message names which."""


@dataclass(frozen=True)
class AdvantageInput:
    """One batch of trajectories as the estimators see it.

    Attributes:
        rewards: ``[B]`` outcome reward of each trajectory (the verifier's verdict).
        group_ids: ``B`` group ids; trajectories sampled for the same task share one.
        turn_rewards: ``[B, K]`` intermediate per-turn rewards. They must *not* repeat the
            outcome: estimators that use per-turn rewards add ``rewards[b]`` to the last valid
            turn themselves. Zero where a turn has no reward of its own.
        turn_mask: ``[B, K]`` bool, True for turns that exist.
        state_keys: ``B`` lists; ``state_keys[b][k]`` identifies the environment state before
            turn ``k`` (GiGPO's anchor state), or None. A list may be shorter than ``K``; the
            missing entries count as None.
        token_turn_index: ``[B, T]`` long, the assistant turn of each token, ``-1`` elsewhere.
    """

    rewards: Tensor
    group_ids: list[str]
    turn_rewards: Tensor
    turn_mask: Tensor
    state_keys: list[list[str | None]]
    token_turn_index: Tensor

    def __post_init__(self) -> None:
        if self.rewards.dim() != 1:
            raise AlgosInputError(f"rewards: expected shape [B], got {list(self.rewards.shape)}")
        b = self.rewards.shape[0]
        if len(self.group_ids) != b:
            raise AlgosInputError(f"group_ids: {len(self.group_ids)} ids for {b} rewards")
        if self.turn_rewards.dim() != 2 or self.turn_rewards.shape[0] != b:
            raise AlgosInputError(
                f"turn_rewards: expected shape [{b}, K], got {list(self.turn_rewards.shape)}"
            )
        k = self.turn_rewards.shape[1]
        if tuple(self.turn_mask.shape) != (b, k):
            raise AlgosInputError(
                f"turn_mask: expected shape [{b}, {k}], got {list(self.turn_mask.shape)}"
            )
        if len(self.state_keys) != b:
            raise AlgosInputError(f"state_keys: {len(self.state_keys)} lists for {b} trajectories")
        for i, keys in enumerate(self.state_keys):
            if len(keys) > k:
                raise AlgosInputError(f"state_keys[{i}]: {len(keys)} keys for {k} turns")
        idx = self.token_turn_index
        if idx.dim() != 2 or idx.shape[0] != b:
            raise AlgosInputError(
                f"token_turn_index: expected shape [{b}, T], got {list(idx.shape)}"
            )
        if idx.dtype.is_floating_point or idx.dtype == torch.bool:
            raise AlgosInputError(f"token_turn_index: expected an integer dtype, got {idx.dtype}")
        if idx.numel() and (int(idx.min()) < -1 or int(idx.max()) >= k):
            raise AlgosInputError(
                f"token_turn_index: values must lie in [-1, {k - 1}], "
                f"got [{int(idx.min())}, {int(idx.max())}]"
            )
        if not bool(torch.isfinite(self.rewards).all()):
            raise AlgosInputError("rewards: every reward must be finite")
        if not bool(torch.isfinite(self.turn_rewards).all()):
            raise AlgosInputError("turn_rewards: every reward must be finite")
        mask = self.turn_mask.bool()
        object.__setattr__(self, "turn_mask", mask)
        if idx.numel():
            on_turn = idx >= 0
            rows = torch.arange(b).unsqueeze(1).expand_as(idx)
            valid = mask[rows[on_turn], idx[on_turn]]
            if not bool(valid.all()):
                bad = int(rows[on_turn][~valid][0])
                raise AlgosInputError(
                    f"token_turn_index[{bad}]: a token points to a turn that turn_mask marks absent"
                )

    @property
    def batch_size(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def num_turns(self) -> int:
        return int(self.turn_rewards.shape[1])


@dataclass(frozen=True)
class AdvantageOutput:
    """What an estimator returns.

    Attributes:
        token_advantages: ``[B, T]`` advantage of each token; exactly 0 where
            ``token_turn_index == -1``.
        turn_advantages: ``[B, K]`` advantage of each turn; 0 for absent turns.
        metrics: scalar diagnostics: ``groups``, ``zero_adv_groups`` (groups whose every
            advantage is 0, e.g. all rewards equal), ``zero_adv_group_frac``, ``adv_mean`` and
            ``adv_std`` over assistant tokens, ``reward_mean``, ``reward_std``, plus any
            estimator-specific entries.
    """

    token_advantages: Tensor
    turn_advantages: Tensor
    metrics: dict[str, float] = field(default_factory=dict)
