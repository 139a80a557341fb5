"""An episode split into linked segments where its context is rewritten.

Each turn extends the context token by token while the template renders the history the same
way once the env's observations follow it. Where it does not (Qwen 3 and gpt-oss drop past
reasoning, Phi 3.5 ends a past reply differently from the last one), the renderer says so
(``HistoryRewritten``) and the conversation so far is closed as a segment, exact as it stands;
the next turn is sampled from the template's whole rendering of the history, the start of a new
segment labelled ``split`` from the one before, with the reason naming the break. A context
policy (``trajforge.rollout.context``: keep-last-K, shortened tool outputs, a summary, the
agent's own fold) closes a segment the same way, the next one opened over the rewritten
history. Every segment is token-exact: the model samples from exactly the ids it holds.

The last segment is the episode's trajectory (its sample index, what RL and the run's
statistics count); the earlier ones are stored beside it with the episode's outcome, each
linked by ``segment`` (the episode's id and its index) and naming the segment after it in
``metadata["split_into"]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from trajforge.policy import ChatSession, HistoryRewritten, Policy, break_reason
from trajforge.schema import (
    Exactness,
    ExactnessKind,
    Message,
    Role,
    Segment,
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
        self.rewrite(policy, session, opened, reason)
        return opened

    def rewrite(
        self, policy: Policy, session: ChatSession, opened: ChatSession, reason: str
    ) -> None:
        """Close ``session`` as a segment; ``opened``, a session over the rewritten history
        (the context the model is given from now on), starts the next (``reason``: why the
        history was rewritten)."""
        self.closed.append(Piece(self.id, _through_last_reply(session.messages), self.exactness))
        policy.end_session(session)
        self.exactness = Exactness(
            kind=ExactnessKind.SPLIT,
            reason=reason,
            split_from=self.id,
            rendered_prefix=len(opened.messages),
        )
        self.id = new_id()

    @property
    def segment(self) -> Segment | None:
        """The growing piece's place in the episode's chain (``None``: never rewritten)."""
        return Segment(episode_id=self.id, index=len(self.closed)) if self.closed else None

    def trajectories(self, episode: Trajectory) -> list[Trajectory]:
        """The closed pieces as trajectories, ``episode`` (the last piece) aside: each with the
        episode's task, run, group and outcome, its place in the chain, no sample index (it is
        not the episode's own), and the id of the piece after it."""
        after = [p.id for p in self.closed[1:]] + [episode.id] if self.closed else []
        return [
            _piece_trajectory(p, episode, index, next_id)
            for index, (p, next_id) in enumerate(zip(self.closed, after, strict=True))
        ]


def _through_last_reply(messages: Sequence[Message]) -> list[Message]:
    """``messages`` up to the last assistant reply: what came after it was in no forward of
    this segment (the next one holds it, rewritten or not); all of them where none replied."""
    last = max((i for i, m in enumerate(messages) if m.role is Role.ASSISTANT), default=None)
    return list(messages if last is None else messages[: last + 1])


def _piece_trajectory(piece: Piece, episode: Trajectory, index: int, next_id: str) -> Trajectory:
    assistant = [m for m in piece.messages if m.role is Role.ASSISTANT]
    return Trajectory(
        id=piece.id,
        task=episode.task,
        env=episode.env,
        group_id=episode.group_id,
        run_id=episode.run_id,
        model=episode.model,
        tools=episode.tools,
        messages=piece.messages,
        outcome=episode.outcome.model_copy(),
        usage=Usage(
            completion_tokens=sum(len(m.token_ids or ()) for m in assistant),
            turns=len(assistant),
            tool_calls=sum(len(m.tool_calls) for m in assistant),
        ),
        exactness=piece.exactness,
        segment=Segment(episode_id=episode.id, index=index),
        metadata={**episode.metadata, SPLIT_INTO: next_id},
    )
