"""Steps that train nothing, said at once and counted for the run's end.

A step trains nothing when no group of it has an advantage: every sample of a task scored the
same (all right, or all wrong), so the policy gradient is 0 whatever the loss; or when no episode
was left to train on. A run of such steps looks busy and learns nothing; what changes it is
more spread within the groups.
"""

from __future__ import annotations

from collections.abc import Sequence

from trajforge.curate import group_key
from trajforge.schema import Trajectory
from trajforge.train.rl.advantages import episode_reward

WHAT_TO_CHANGE = (
    "to give the groups different rewards, raise temperature or samples_per_group, or "
    "train on harder tasks"
)


class IdleSteps:
    """The steps of a run that trained nothing."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def check(self, step: int, batch: Sequence[Trajectory], metrics: dict[str, float]) -> str:
        """The line that says step ``step`` trained nothing (it is then counted), or ``""``.

        Args:
            step: The step.
            batch: The episodes it trained on, whole groups.
            metrics: Its metrics (``zero_adv_frac``: the share of groups without advantage).
        """
        if batch and metrics.get("zero_adv_frac", 0.0) < 1.0:
            return ""
        self.steps.append(step)
        rewards: dict[str, set[float]] = {}
        for t in batch:
            rewards.setdefault(group_key(t), set()).add(episode_reward(t))
        alike = sum(len(r) == 1 for r in rewards.values())
        if not batch and metrics.get("dropped_groups"):
            why = (
                f"every group left scored alike and was dropped ({metrics['dropped_groups']:g}), "
                "and the refill cap was reached (difficulty.max_refills, max_extra_groups)"
            )
        elif not batch:
            why = "no episode was left to train on (none tokenized, or all lost to the infrastructure)"
        elif alike == len(rewards):
            why = f"all {alike} groups scored alike (every sample of a task got the same reward)"
        else:
            why = (
                f"no group had an advantage ({alike} of {len(rewards)} groups scored alike, the "
                "others' advantages were weighted to 0)"
            )
        return f"rl step {step} trained nothing: {why}; {WHAT_TO_CHANGE}"

    def summary(self, made: int) -> str:
        """How many of the ``made`` steps trained nothing, or ``""`` when none."""
        if not self.steps:
            return ""
        shown = ", ".join(str(s) for s in self.steps[:5])
        more = f" and {len(self.steps) - 5} more" if len(self.steps) > 5 else ""
        return (
            f"rl: {len(self.steps)} of {made} steps trained nothing (steps {shown}{more}): "
            f"{WHAT_TO_CHANGE}"
        )
