"""Layer 5: curation of trajectories into training sets (filters, groups, pairs, SFT sets)."""

from __future__ import annotations

from trajforge.curate.filters import is_void_turn_free, keep, trajectory_value
from trajforge.curate.groups import (
    PreferencePair,
    best_of_group,
    by_group,
    group_key,
    preference_pairs,
)
from trajforge.curate.sft import sft_set

__all__ = [
    "PreferencePair",
    "best_of_group",
    "by_group",
    "group_key",
    "is_void_turn_free",
    "keep",
    "preference_pairs",
    "sft_set",
    "trajectory_value",
]
