"""The report's 95% intervals: Wilson's for a success rate and for a mean reward whose rewards
all lie in [0, 1] (the interval stays inside what the mean can be), the evaluation's own Student-t
interval for rewards on another scale."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trajforge.judge import format_rate, format_reward, format_success, wilson_ci95


def success_text(summary: dict[str, Any]) -> str:
    """``62.5% [30.6%, 86.3%]``: the success rate over every episode, with its interval; ``n/a``
    when none was scored (a summary written before ``scored`` was recorded counts them all)."""
    rate = summary["success"]
    episodes = int(summary["episodes"])
    scored = summary.get("scored")
    scored = episodes if scored is None else int(scored)
    if rate is None or episodes == 0 or scored == 0:
        return format_success(rate, scored, episodes)
    low, high = wilson_ci95(rate * episodes, episodes)
    return f"{format_rate(rate)} [{format_rate(low)}, {format_rate(high)}]"


def reward_text(summary: dict[str, Any], rewards: Sequence[float] | None) -> str:
    """The mean reward with its interval: Wilson's over the scored episodes when ``rewards``
    (the stage's scored rewards, when its trajectories are at hand) all lie in [0, 1], else the
    one the evaluation recorded."""
    mean = summary["reward_mean"]
    if mean is not None and rewards and all(0.0 <= r <= 1.0 for r in rewards):
        low, high = wilson_ci95(sum(rewards), len(rewards))
        return format_reward(mean, low, high)
    return format_reward(mean, summary["reward_ci_low"], summary["reward_ci_high"])
