"""Layer 4: the rollout engine — a ``RolloutSpec`` run by one entry point (``run_rollout``,
``arun_rollout``, or ``open_rollout`` to stream), asynchronous multi-turn episodes, a lockstep
baseline, limits, fault isolation, and hooks for store bookkeeping, resume and progress."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajforge.registry import lazy_names
from trajforge.rollout.context import FOLD_REASON, ContextSpec, ContextStrategy, SummaryBy
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
    user_policy_for,
)
from trajforge.rollout.episode_key import EpisodeKey
from trajforge.rollout.episode_record import WEIGHTS_VERSIONS
from trajforge.rollout.hooks import RolloutHook, RolloutRun, StoreHook
from trajforge.rollout.limits import EndReason, Limits, TurnCap, cut_turn
from trajforge.rollout.progress import RolloutProgress
from trajforge.rollout.seeding import derive_seed, group_id_for, is_generated_run_id, new_run_id
from trajforge.rollout.spec import PolicyRef, RolloutError, RolloutSpec, Sampling, TaskSample
from trajforge.rollout.stats import RolloutStats

if TYPE_CHECKING:
    from trajforge.rollout.multiseat import MultiSeatRunner, play_by_seat, play_facing, play_game
    from trajforge.rollout.tree import Branched, BranchPoint, branch_points, branch_rollout

__all__ = [
    "FOLD_REASON",
    "WEIGHTS_VERSIONS",
    "BranchPoint",
    "Branched",
    "ContextSpec",
    "ContextStrategy",
    "EndReason",
    "EpisodeKey",
    "EpisodeRunner",
    "Limits",
    "LiveParts",
    "LocalRunner",
    "MultiSeatRunner",
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
    "SummaryBy",
    "TaskSample",
    "TurnCap",
    "arun_rollout",
    "as_they_finish",
    "branch_points",
    "branch_rollout",
    "cut_turn",
    "derive_seed",
    "group_id_for",
    "is_generated_run_id",
    "new_episode",
    "new_run_id",
    "open_rollout",
    "play_by_seat",
    "play_facing",
    "play_game",
    "run_rollout",
    "user_policy_for",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "MultiSeatRunner": "multiseat",
        "play_by_seat": "multiseat",
        "play_facing": "multiseat",
        "play_game": "multiseat",
        "BranchPoint": "tree",
        "Branched": "tree",
        "branch_points": "tree",
        "branch_rollout": "tree",
    },
)
