"""The advantages an estimator gives the samples of one group, as training would compute them.

Importing this module loads torch (the estimators are tensor functions); the app imports it
only when a group page asks for advantages, so ``trajforge view`` starts without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from trajforge.algos import AdvantageInput, compute_advantages, drop_from_groups
from trajforge.curate import group_key
from trajforge.schema import Role, Trajectory, is_infra_failure


def advantage_input(trajs: Sequence[Trajectory]) -> AdvantageInput:
    """The estimators' input for ``trajs``: outcome rewards (0 when unscored, as RL counts
    them), per-turn rewards and state keys, and each context token's assistant turn."""
    turns = [[m for m in t.messages if m.role is Role.ASSISTANT] for t in trajs]
    k = max(1, *(len(a) for a in turns))
    turn_rewards = torch.zeros((len(trajs), k))
    turn_mask = torch.zeros((len(trajs), k), dtype=torch.bool)
    rows: list[list[int]] = []
    for b, traj in enumerate(trajs):
        row: list[int] = []
        turn = 0
        for msg in traj.messages:
            sampled = msg.role is Role.ASSISTANT
            if sampled:
                turn_mask[b, turn] = True
                turn_rewards[b, turn] = msg.reward or 0.0
            # An untokenized message still stands for one position, so its turn is counted.
            width = len(msg.token_ids) if msg.token_ids is not None else 1
            row.extend([turn if sampled else -1] * width)
            turn += sampled
        rows.append(row)
    length = max(1, *(len(r) for r in rows))
    index = torch.full((len(trajs), length), -1, dtype=torch.long)
    for b, row in enumerate(rows):
        index[b, : len(row)] = torch.tensor(row, dtype=torch.long)
    return AdvantageInput(
        rewards=torch.tensor([t.outcome.reward or 0.0 for t in trajs], dtype=torch.float32),
        group_ids=[group_key(t) for t in trajs],
        turn_rewards=turn_rewards,
        turn_mask=turn_mask,
        state_keys=[[m.state_key for m in a] for a in turns],
        token_turn_index=index,
    )


def group_advantages(trajs: Sequence[Trajectory], estimator: str) -> dict[str, Any]:
    """Per trajectory its turn advantages (``turns``) and their mean over its assistant tokens
    (``mean``), plus the estimator's metrics. As RL does by default, an episode lost to the
    infrastructure is left out (and a group it leaves with one sample): its ``mean`` is None."""
    lost = torch.tensor([is_infra_failure(t) for t in trajs], dtype=torch.bool)
    keep, _ = drop_from_groups([group_key(t) for t in trajs], lost)
    kept = [b for b in range(len(trajs)) if keep[b]]
    rows: list[dict[str, Any]] = [{"turns": [], "mean": None} for _ in trajs]
    metrics: dict[str, float] = {}
    if kept:
        inp = advantage_input([trajs[b] for b in kept])
        out = compute_advantages(estimator, inp)
        for row, b in enumerate(kept):
            n_turns = trajs[b].num_turns
            on_turn = inp.token_turn_index[row] >= 0
            tokens = out.token_advantages[row][on_turn]
            rows[b] = {
                "turns": [float(v) for v in out.turn_advantages[row, :n_turns]],
                "mean": float(tokens.mean()) if bool(on_turn.any()) else 0.0,
            }
        metrics = {k: float(v) for k, v in out.metrics.items()}
    return {"estimator": estimator, "trajectories": rows, "metrics": metrics}
