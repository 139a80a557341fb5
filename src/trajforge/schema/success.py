"""The one definition of an episode's success, which eval, ``stats``, ``ls``, RL (its
``success_rate``, replay and validation), the viewer, the pipeline and the report all call; and
the same definition as an SQL predicate, for the store's aggregations."""

from __future__ import annotations

from trajforge.schema.trajectory import OutcomeStatus

SUCCESS_THRESHOLD = 1.0
"""The reward at which an episode that ended ``ok`` succeeded (a task's full reward)."""

SUCCESS_STATUS = OutcomeStatus.OK
"""The one status an episode that succeeded ended with."""


def is_success(
    status: OutcomeStatus | str, reward: float | None, threshold: float = SUCCESS_THRESHOLD
) -> bool:
    """Whether an episode succeeded: it ended ``ok`` with a reward of at least ``threshold``.

    An episode cut short (``truncated`` at a turn or token limit, ``timeout``, ``error``) never
    succeeded, whatever its reward: a verifier still scores a cut-off conversation (a ``ToolEnv``
    checks the state it reached), so a truncated episode may carry reward 1, and that reward is
    the episode's reward everywhere (means, advantages) while it counts as a failure in every
    success figure. An unscored episode (no reward) never succeeded either. ``status`` may be
    the enum or its text, as store rows carry it.
    """
    return status == SUCCESS_STATUS and reward is not None and reward >= threshold


def success_sql(
    status_column: str, reward_column: str, threshold: float = SUCCESS_THRESHOLD
) -> tuple[str, list[str | float]]:
    """``is_success`` as an SQL predicate over a status (text) and a reward (real or NULL)
    column: the clause and its parameters, in order."""
    clause = f"({status_column} = ? AND {reward_column} IS NOT NULL AND {reward_column} >= ?)"
    return clause, [SUCCESS_STATUS.value, float(threshold)]
