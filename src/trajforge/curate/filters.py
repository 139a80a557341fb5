"""Trajectory filters: keep by outcome status, reward or score; drop void turns."""

from __future__ import annotations

from collections.abc import Iterable

from trajforge.schema import OutcomeStatus, Role, Trajectory


def is_void_turn_free(traj: Trajectory) -> bool:
    """True when no assistant turn is void.

    A void turn (SimpleTIR) is an assistant message that neither calls a tool nor says anything
    (blank content): it moves the episode nowhere, and training on it teaches the model to stall.
    """
    return not any(
        m.role is Role.ASSISTANT and not m.tool_calls and not m.text.strip() for m in traj.messages
    )


def trajectory_value(traj: Trajectory, score: str | None = None) -> float | None:
    """The outcome reward, or the value of the most recent score called ``score``."""
    if score is None:
        return traj.outcome.reward
    s = traj.score(score)
    return None if s is None else s.value


def keep(
    trajs: Iterable[Trajectory],
    *,
    status: OutcomeStatus | str | None = None,
    min_reward: float | None = None,
    max_reward: float | None = None,
    score: str | None = None,
    min_score: float | None = None,
    drop_void_turns: bool = False,
    tokenized_only: bool = False,
) -> list[Trajectory]:
    """The trajectories that pass every given condition, in their original order.

    A trajectory without a reward (or without the named score) fails any bound on it.
    """
    wanted = OutcomeStatus(status) if status is not None else None
    out = []
    for t in trajs:
        if wanted is not None and t.outcome.status is not wanted:
            continue
        reward = t.outcome.reward
        if min_reward is not None and (reward is None or reward < min_reward):
            continue
        if max_reward is not None and (reward is None or reward > max_reward):
            continue
        if min_score is not None:
            value = trajectory_value(t, score)
            if value is None or value < min_score:
                continue
        if drop_void_turns and not is_void_turn_free(t):
            continue
        if tokenized_only and not t.is_tokenized:
            continue
        out.append(t)
    return out
