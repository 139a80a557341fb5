"""Layer 4: the rollout engine — a ``RolloutSpec`` run by one entry point (``run_rollout``,
``arun_rollout``, or ``open_rollout`` to stream), asynchronous multi-turn episodes, a lockstep
baseline, limits, fault isolation, and hooks for store bookkeeping, resume and progress."""

from __future__ import annotations

from trajforge.rollout.engine import (
    EpisodeRunner,
    LiveParts,
    LocalRunner,
    PlayedEpisode,
    RolloutStream,
    arun_rollout,
    as_they_finish,
    new_episode,
    open_rollout,
    run_rollout,
)
from trajforge.rollout.episode import EpisodeKey
from trajforge.rollout.hooks import RolloutHook, RolloutRun, StoreHook
from trajforge.rollout.limits import EndReason, Limits, TurnCap, cut_turn
from trajforge.rollout.progress import RolloutProgress
from trajforge.rollout.seeding import derive_seed, group_id_for, is_generated_run_id, new_run_id
from trajforge.rollout.spec import PolicyRef, RolloutError, RolloutSpec, Sampling, TaskSample
from trajforge.rollout.stats import RolloutStats

__all__ = [
    "EndReason",
    "EpisodeKey",
    "EpisodeRunner",
    "Limits",
    "LiveParts",
    "LocalRunner",
    "PlayedEpisode",
    "PolicyRef",
    "RolloutError",
    "RolloutHook",
    "RolloutProgress",
    "RolloutRun",
    "RolloutSpec",
    "RolloutStats",
    "RolloutStream",
    "Sampling",
    "StoreHook",
    "TaskSample",
    "TurnCap",
    "arun_rollout",
    "as_they_finish",
    "cut_turn",
    "derive_seed",
    "group_id_for",
    "is_generated_run_id",
    "new_episode",
    "new_run_id",
    "open_rollout",
    "run_rollout",
]
