"""How an ended episode is recorded: its outcome, the weights that sampled each turn, and the
part of a broken conversation that can still be kept."""

from __future__ import annotations

from collections.abc import Sequence

from trajforge.policy import ChatSession
from trajforge.rollout.limits import EndReason
from trajforge.schema import Fault, Message, Outcome, OutcomeStatus, Role, check_conversation

WEIGHTS_VERSIONS = "weights_versions"
"""``Trajectory.metadata`` key: the weights version that sampled each assistant message, in
order (``None`` for one not sampled here), where the policy counts its weights. An episode
under way when new weights load samples its later turns from them; RL reads each token's
version from this."""


def weights_versions(session: ChatSession, messages: Sequence[Message]) -> list[int | None]:
    """The version that sampled each assistant message of ``messages``, in order."""
    versions = session.sampled_versions
    return [versions.get(i) for i, m in enumerate(messages) if m.role is Role.ASSISTANT]


def episode_outcome(
    status: OutcomeStatus,
    reason: EndReason | None,
    reward: float | None,
    error: str | None,
    fault: Fault | None,
    infra_fault: str | None,
) -> Outcome:
    """The outcome of an episode that ended with ``status`` for ``reason``; ``infra_fault``
    (what of the infrastructure failed under it) makes the fault the infrastructure's."""
    if infra_fault is not None:
        fault, error = Fault.INFRA, error or infra_fault
    if reward is None and status is OutcomeStatus.TRUNCATED and fault is Fault.POLICY:
        # The policy ran out of turns or tokens before answering: its failure, worth 0,
        # not an unscored episode (which would read as failed work).
        reward = 0.0
    return Outcome(
        status=status,
        reward=reward,
        error=error,
        reason=None if reason is EndReason.DONE else reason,
        fault=fault,
    )


def valid_prefix(messages: list[Message]) -> list[Message]:
    """The longest prefix of ``messages`` that is a valid (possibly cut-off) conversation."""
    for end in range(len(messages), -1, -1):
        try:
            check_conversation(messages[:end], allow_open_calls=True)
        except ValueError:
            continue
        return messages[:end]
    return []
