"""An episode split into linked trajectories where the policy's chat template rewrites its history.

Each turn extends the context token by token while the template renders the history the same
way once the env's observations follow it. Where it does not (Qwen 3 and gpt-oss drop past
reasoning, Phi 3.5 ends a past reply differently from the last one), the renderer says so
(``HistoryRewritten``) and the conversation so far is closed as a piece, exact as it stands; the
next turn is sampled from the template's whole rendering of the history, the start of a new
piece labelled ``split`` from the one before, with the reason naming the break. Every piece is
token-exact: the model samples from exactly the ids it holds.

The last piece is the episode's trajectory (its sample index, reward and outcome, what RL and
the run's statistics count); the earlier ones are stored beside it as linked trajectories with
the episode's outcome, each naming the piece after it in ``metadata["split_into"]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from trajforge.policy import ChatSession, HistoryRewritten, Policy, break_reason
from trajforge.schema import (
    Exactness,
    ExactnessKind,
    Message,
    Outcome,
    OutcomeStatus,
    Role,
    Trajectory,
    Usage,
    new_id,
)

SPLIT_INTO = "split_into"
"""``Trajectory.metadata`` key of an earlier piece: the id of the piece after it."""


@dataclass(frozen=True)
class Piece:
    """A closed piece of an episode's conversation."""

    id: str
    messages: list[Message]
    exactness: Exactness


@dataclass
class Pieces:
    """The pieces of an episode: those closed at template breaks, and the one growing."""

    closed: list[Piece] = field(default_factory=list)
    id: str = field(default_factory=new_id)
    """The growing piece's id (the episode's trajectory's, once it ends)."""
    exactness: Exactness = field(default_factory=Exactness)
    """The growing piece's label."""

    def add_observations(
        self, policy: Policy, session: ChatSession, observations: Sequence[Message]
    ) -> ChatSession:
        """``session`` with ``observations`` added; where the template writes its turns
        differently once they follow, ``session`` is closed as a piece and a new session over
        the whole history (the prompt the model is now given) is returned."""
        try:
            session.add_observations(observations)
            return session
        except HistoryRewritten as exc:
            reason = break_reason(exc)
        history = [*session.messages, *observations]
        # Opened first: a history the template cannot render at all ends the episode unsplit.
        opened = policy.start_session(history, session.tools, task=session.task)
        self.closed.append(Piece(self.id, list(session.messages), self.exactness))
        policy.end_session(session)
        self.exactness = Exactness(
            kind=ExactnessKind.SPLIT,
            reason=reason,
            split_from=self.id,
            rendered_prefix=len(history),
        )
        self.id = new_id()
        return opened

    def trajectories(self, episode: Trajectory) -> list[Trajectory]:
        """The closed pieces as trajectories, ``episode`` (the last piece) aside: each with the
        episode's task, run, group and outcome, no sample index (it is not the episode's own),
        and the id of the piece after it."""
        after = [p.id for p in self.closed[1:]] + [episode.id] if self.closed else []
        return [
            _piece_trajectory(p, episode, next_id)
            for p, next_id in zip(self.closed, after, strict=True)
        ]


def _piece_trajectory(piece: Piece, episode: Trajectory, next_id: str) -> Trajectory:
    assistant = [m for m in piece.messages if m.role is Role.ASSISTANT]
    outcome, last = episode.outcome, piece.messages[-1]
    if last.role is Role.ASSISTANT and last.tool_calls:
        # The results of its last calls opened the next piece.
        outcome = Outcome(
            status=OutcomeStatus.TRUNCATED,
            reward=outcome.reward,
            reason=f"its last tool calls are answered in trajectory {next_id}, split off where "
            "the chat template rewrites this one's turns",
        )
    return Trajectory(
        id=piece.id,
        task=episode.task,
        env=episode.env,
        group_id=episode.group_id,
        run_id=episode.run_id,
        model=episode.model,
        tools=episode.tools,
        messages=piece.messages,
        outcome=outcome,
        usage=Usage(
            completion_tokens=sum(len(m.token_ids or ()) for m in assistant),
            turns=len(assistant),
            tool_calls=sum(len(m.tool_calls) for m in assistant),
        ),
        exactness=piece.exactness,
        metadata={**episode.metadata, SPLIT_INTO: next_id},
    )
