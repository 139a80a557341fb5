"""How old the weights that sampled a step's tokens are, and which episodes are stale samples.

Weights carry a version, the trainer's update count: the rollout weights after update ``k`` are
version ``k``, and a step ``s`` trains weights of version ``s - 1``. Every sampled turn records
the version that sampled it (``WEIGHTS_VERSIONS`` in a trajectory's metadata, one entry per
assistant message): an episode under way when new weights load samples its later turns from
them (a partial rollout), so its turns may differ. A trajectory without per-turn versions
counts its ``POLICY_VERSION`` (the version a Ray actor started it with) for every turn, and one
with neither is taken as sampled by the trained weights.

A token's staleness is the updates between its version and the trained one. ``max_staleness``
bounds it: tokens beyond the bound leave the loss (``update``), and an episode every sampled
token of which is beyond it is a stale sample, dropped or rolled out again
(``stale_samples``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from trajforge.curate import group_key
from trajforge.distributed import POLICY_VERSION
from trajforge.rollout import WEIGHTS_VERSIONS
from trajforge.schema import Role, Task, Trajectory


def turn_versions(traj: Trajectory) -> list[int | None]:
    """The weights version of each assistant message of ``traj`` (``None``: not known)."""
    turns = sum(m.role is Role.ASSISTANT for m in traj.messages)
    recorded = traj.metadata.get(WEIGHTS_VERSIONS)
    if isinstance(recorded, list) and len(recorded) == turns:
        fallback = traj.metadata.get(POLICY_VERSION)
        return [fallback if v is None else int(v) for v in recorded]
    started = traj.metadata.get(POLICY_VERSION)
    return [None if started is None else int(started)] * turns


def turn_staleness(traj: Trajectory, trained: int) -> list[int]:
    """Updates between the weights that sampled each assistant message and version
    ``trained`` (0 where not known)."""
    return [0 if v is None else max(0, trained - v) for v in turn_versions(traj)]


def token_staleness(traj: Trajectory, turn_index: Sequence[int], trained: int) -> list[int]:
    """Each token's staleness, from the turn it belongs to (``turn_index``: the assistant turn
    of each token, -1 off the turns, as ``encode_trajectory`` gives it)."""
    per_turn = turn_staleness(traj, trained)
    return [per_turn[t] if 0 <= t < len(per_turn) else 0 for t in turn_index]


def is_stale(traj: Trajectory, trained: int, bound: int) -> bool:
    """Whether every sampled turn of ``traj`` is beyond ``bound`` (a trajectory without sampled
    turns never is)."""
    sampled = [
        s
        for s, m in zip(
            turn_staleness(traj, trained),
            (m for m in traj.messages if m.role is Role.ASSISTANT),
            strict=True,
        )
        if m.logprobs is not None
    ]
    return bool(sampled) and min(sampled) > bound


def staleness_metrics(trajs: Sequence[Trajectory], trained: int) -> dict[str, float]:
    """The step's ``policy_staleness_max`` (updates the oldest sampled turn lags), and the
    assistant tokens' mean staleness (``token_staleness_mean``), where versions are known."""
    tokens = 0
    total = 0
    oldest: int | None = None
    for traj in trajs:
        assistant = [m for m in traj.messages if m.role is Role.ASSISTANT]
        for version, m in zip(turn_versions(traj), assistant, strict=True):
            if version is None:
                continue
            lag = max(0, trained - version)
            oldest = lag if oldest is None else max(oldest, lag)
            n = len(m.token_ids or ())
            tokens += n
            total += lag * n
    if oldest is None:
        return {}
    return {
        "policy_staleness_max": float(oldest),
        "token_staleness_mean": total / tokens if tokens else 0.0,
    }


def resample_stale(
    trajs: list[Trajectory],
    trained: int,
    bound: int,
    rollout: Callable[[list[Task]], list[Trajectory]],
) -> int:
    """Replace in ``trajs`` every group holding a stale sample by a new rollout of its task
    (``rollout(tasks)``, from the weights just trained); how many groups."""
    stale = {group_key(t) for t in trajs if is_stale(t, trained, bound)}
    if not stale:
        return 0
    tasks = list({group_key(t): t.task for t in trajs if group_key(t) in stale}.values())
    fresh = rollout(tasks)
    trajs[:] = [t for t in trajs if group_key(t) not in stale] + fresh
    return len(stale)
