"""Layer 5: curation of trajectories into training sets (filters, groups, pairs, SFT sets)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trajforge.curate.filters import is_void_turn_free, keep, trajectory_value
from trajforge.curate.groups import (
    PreferencePair,
    best_of_group,
    by_group,
    group_key,
    preference_pairs,
    why_no_pairs,
)
from trajforge.curate.sft import sft_set
from trajforge.registry import lazy_names

if TYPE_CHECKING:
    from trajforge.curate.repair import repair_run

__all__ = [
    "PreferencePair",
    "best_of_group",
    "by_group",
    "group_key",
    "is_void_turn_free",
    "keep",
    "preference_pairs",
    "repair_run",
    "sft_set",
    "trajectory_value",
    "why_no_pairs",
]

# Loaded on first access (PEP 562): importing the package stays as light as it was; the
# TYPE_CHECKING imports above give mypy the names' types.
__getattr__ = lazy_names(
    __name__,
    {
        "repair_run": "repair",
    },
)
