"""The advantages an estimator gives the samples of one group, as training would compute them:
from the same reward figure and input as RL (``trajforge.train.rl.advantages``).

Importing this module loads torch (the estimators are tensor functions); the app imports it
only when a group page asks for advantages, so ``trajforge view`` starts without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from trajforge.algos import compute_advantages, drop_from_groups
from trajforge.curate import group_key
from trajforge.schema import Trajectory, is_infra_failure
from trajforge.train import advantage_input


def group_advantages(trajs: Sequence[Trajectory], estimator: str) -> dict[str, Any]:
    """Per trajectory its turn advantages (``turns``) and their mean over its assistant tokens
    (``mean``), plus the estimator's metrics. As RL does by default, an episode lost to the
    infrastructure is left out (and a group it leaves with one sample): its ``mean`` is None.
    So is an earlier segment of an episode: the episode, its last segment, is the sample."""
    lost = torch.tensor([is_infra_failure(t) for t in trajs], dtype=torch.bool)
    keep, _ = drop_from_groups([group_key(t) for t in trajs], lost)
    kept = [b for b in range(len(trajs)) if keep[b] and not trajs[b].is_earlier_segment]
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
