"""Layer 4: the rollout engine — asynchronous multi-turn episodes, a lockstep baseline, limits,
fault isolation and resumable runs."""

from __future__ import annotations

from trajforge.rollout.engine import (
    RolloutError,
    RolloutPlan,
    arollout,
    plan_rollout,
    rollout,
    rollout_stream,
)
from trajforge.rollout.episode import Episode, EpisodeKey
from trajforge.rollout.limits import EndReason, Limits
from trajforge.rollout.progress import RolloutProgress, RolloutStats
from trajforge.rollout.seeding import derive_seed, group_id_for, new_run_id

__all__ = [
    "EndReason",
    "Episode",
    "EpisodeKey",
    "Limits",
    "RolloutError",
    "RolloutPlan",
    "RolloutProgress",
    "RolloutStats",
    "arollout",
    "derive_seed",
    "group_id_for",
    "new_run_id",
    "plan_rollout",
    "rollout",
    "rollout_stream",
]
