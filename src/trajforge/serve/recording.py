"""What the recorder keeps: a session (an agent run: its task, reward and trajectories) and in it
the recordings (one trajectory each, the conversation it grows and how it is ending), and the
trajectory each recording is (``recorded``).

A session keeps its last ``SESSION_RECORDINGS`` recordings: the default session, which every
call without a session shares, would otherwise hold every conversation ever served.

A program that rewrites its own history (a harness that compacts its context, as Claude Code
does, or edits an earlier turn) makes its session's episode a chain of segments (``chain``),
as a rollout under a context policy does: the last segment carries the episode's id, the
earlier ones take its outcome (``rewrites``, ``recorded``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Any, Protocol

from trajforge.schema import (
    Exactness,
    Fault,
    Message,
    Outcome,
    OutcomeStatus,
    Role,
    Score,
    Segment,
    Task,
    ToolSpec,
    Trajectory,
    Usage,
    with_system_text,
)
from trajforge.serve.continuation import SPLIT_INTO, keeps_history, same_message, unanswered_calls

SESSION_RECORDINGS = 256
DEFAULT_SESSION = "default"
"""The session of every call that names none: many programs' conversations, no one episode."""


class Conversation(Protocol):
    """What a recording grows: messages with their token ids, and the tools offered.
    ``RenderedSession`` (an in-process policy) and ``UpstreamConversation`` (a proxied server)
    are the two kinds."""

    messages: list[Message]
    tools: list[ToolSpec]

    @property
    def num_tokens(self) -> int: ...

    def add_observations(self, observations: Sequence[Message]) -> list[Message]: ...

    def copy(self) -> Conversation: ...


StartConversation = Callable[[list[Message], list[ToolSpec], Task | None], Conversation]


@dataclass
class Recording:
    """One trajectory the gateway is growing."""

    id: str
    session: Conversation
    sequence: int
    forked_from: str | None = None
    started_at: float = field(default_factory=time.time)
    generation_s: float = 0.0
    calls: int = 0
    busy: bool = False
    status: OutcomeStatus = OutcomeStatus.OK
    reason: str | None = None
    fault: Fault | None = None
    reward: float | None = None
    """This trajectory's own reward (a verifier's), used when the session has none."""
    rendering: str | None = None
    """``raw`` for a text completion: its ids are no chat rendering (``check`` knows)."""
    notes: dict[str, Any] = field(default_factory=dict)
    """Recorded in ``metadata["gateway"]`` (``drift``: started because the server's prompt did
    not extend the context)."""
    scores: list[Score] = field(default_factory=list)
    exactness: Exactness = field(default_factory=Exactness)
    closed: bool = False
    """An earlier segment of the session's episode: no call continues it."""
    cut: Outcome | None = None
    """How the trajectory ends where a turn of it was cut at its token cap (the first one):
    truncated, as an episode of ``eval`` is (``rollout.cut_turn``). The agent may go on after
    it, as it may after any reply; the conversation still continues."""

    @property
    def turn(self) -> int:
        """The next turn's number, which names its tool calls (``call_{turn}_{k}``): past every
        turn of the conversation and every call id its messages hold (a history the client
        sent as text, a compacted one keeping its last turn, would otherwise collide)."""
        messages = self.session.messages
        turn = sum(1 for m in messages if m.role is Role.ASSISTANT)
        taken = {c.id for m in messages for c in m.tool_calls}
        while any(i.startswith(f"call_{turn}_") for i in taken):
            turn += 1
        return turn

    def extends(self, messages: list[Message], tools: list[ToolSpec]) -> bool:
        recorded = self.session.messages
        return (
            not self.busy
            and not self.closed
            and self.status is OutcomeStatus.OK
            and self.session.tools == tools
            and len(recorded) < len(messages)
            and recorded[-1].role is Role.ASSISTANT
            and all(same_message(r, s) for r, s in zip(recorded, messages, strict=False))
            and all(m.role is not Role.ASSISTANT for m in messages[len(recorded) :])
            and _answers_every_call(recorded[-1], messages[len(recorded) :])
        )


def _answers_every_call(assistant: Message, appended: list[Message]) -> bool:
    """Whether the appended messages answer each of the turn's calls (a call the client never
    saw, a nameless one, cannot be answered: the call then starts a new trajectory)."""
    answered = {m.tool_call_id for m in appended if m.role is Role.TOOL}
    return all(call.id in answered for call in assistant.tool_calls)


@dataclass
class GatewaySession:
    """An agent run: its task, its trajectories, its reward."""

    id: str
    task: Task | None = None
    run_id: str | None = None
    """The run its trajectories belong to (``None``: the recorder's)."""
    group_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    recordings: list[Recording] = field(default_factory=list)
    reward: float | None = None
    scores: list[Score] = field(default_factory=list)
    failure: Outcome | None = None
    """How the agent program failed (error, timeout), which every trajectory then records."""
    system_text: str | None = None
    """Added to the system message of every call (``with_system_text``): what the run tells
    the model beside the program's own prompt, an experience memory's lessons for the task."""
    annotations: dict[str, Any] = field(default_factory=dict)
    """Top-level metadata of every trajectory of the session (what memory was retrieved)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    sequences: Iterator[int] = field(default_factory=count)
    """The sequence numbers of its recordings, in the order they start."""
    chain: list[Recording] = field(default_factory=list)
    """The segments of its episode, in order, where the program rewrote its history (empty
    until it does); the last carries the episode's id."""

    @property
    def idle(self) -> bool:
        return not self.lock.locked() and not any(r.busy for r in self.recordings)

    def add(self, recording: Recording) -> None:
        """Keep ``recording``, forgetting the oldest idle ones beyond ``SESSION_RECORDINGS``."""
        self.recordings.append(recording)
        excess = len(self.recordings) - SESSION_RECORDINGS
        if excess > 0:
            old = {id(r) for r in [r for r in self.recordings[:-1] if not r.busy][:excess]}
            self.recordings = [r for r in self.recordings if id(r) not in old]


def _system(messages: list[Message]) -> Message | None:
    return messages[0] if messages and messages[0].role is Role.SYSTEM else None


def rewrites(
    session: GatewaySession, messages: list[Message], tools: list[ToolSpec]
) -> Recording | None:
    """The recording a call that continues none rewrites, the call then the next segment of the
    session's episode: the chain's last segment, else (no chain yet) the latest trajectory
    with the call's system prompt and tools; either idle, ended well, no fork and not split at
    a template break. ``None``: the call is another conversation of the session (a sub-agent, a
    harness's side call with its own prompt or tools), a trajectory of its own, as is every
    call of ``DEFAULT_SESSION``."""
    if session.id == DEFAULT_SESSION:
        return None
    candidates = session.chain[-1:] or [r for r in reversed(session.recordings) if r.calls]
    system = _system(messages)
    for recording in candidates:
        recorded = recording.session.messages
        head = _system(recorded)
        if (
            not keeps_history(recorded, messages)
            and not recording.busy
            and recording.status is OutcomeStatus.OK
            and recording.forked_from is None
            and SPLIT_INTO not in recording.notes
            and recording.session.tools == tools
            and (
                head is None if system is None else head is not None and same_message(head, system)
            )
        ):
            return recording
    return None


def told(session: GatewaySession, messages: list[Message]) -> list[Message]:
    """``messages`` as the model is given them in ``session``: with its ``system_text``."""
    return with_system_text(messages, session.system_text) if session.system_text else messages


def session_task(session: GatewaySession, messages: list[Message]) -> Task:
    """The session's task, else one named after the session, its prompt the first user text."""
    return session.task or Task(
        id=f"session-{session.id}",
        prompt=next((m.text for m in messages if m.role is Role.USER), ""),
    )


def recorded_nothing(
    session: GatewaySession, run_id: str, model: str, env: str | None
) -> Trajectory:
    """The trajectory of a session that made no model call: no messages, how it ended."""
    outcome = session.failure or Outcome(reason="the agent made no model call")
    return Trajectory(
        id=uuid.uuid5(uuid.NAMESPACE_URL, f"{run_id}/{session.id}").hex,
        task=session_task(session, []),
        env=env or (session.task.env if session.task else None),
        run_id=run_id,
        group_id=session.group_id,
        model=model,
        outcome=outcome.model_copy(update={"reward": session.reward}),
        scores=list(session.scores),
        metadata={
            **session.annotations,
            "gateway": {"session": session.id, "calls": 0, **session.metadata},
        },
    )


def recorded(
    session: GatewaySession,
    recording: Recording,
    run_id: str,
    model: str,
    precision: str | None,
    env: str | None,
    episode: Trajectory | None = None,
) -> Trajectory:
    """``recording`` as the trajectory of run ``run_id``, sampled by ``model`` at
    ``precision``, in ``env`` (``None``: the task's); an earlier segment of the session's
    episode takes the outcome and scores of ``episode``, its last segment, as a rollout's do."""
    messages = list(recording.session.messages)
    task = session_task(session, messages)
    # The first end wins: a cut turn, else how the last call ended.
    outcome = recording.cut or Outcome(
        status=recording.status, reason=recording.reason, fault=recording.fault
    )
    last = messages[-1]
    if outcome.status is OutcomeStatus.OK and last.role is Role.ASSISTANT and last.tool_calls:
        outcome = unanswered_calls(recording.notes.get(SPLIT_INTO))
    if session.failure is not None:
        outcome = session.failure
    outcome = outcome.model_copy(
        update={"reward": recording.reward if session.reward is None else session.reward}
    )
    scores = [*session.scores, *recording.scores]
    if episode is not None:
        outcome, scores = episode.outcome.model_copy(), list(episode.scores)
    segment, links = _chained(session, recording)
    assistant = [m for m in messages if m.role is Role.ASSISTANT]
    completion_tokens = sum(len(m.token_ids or ()) for m in assistant)
    return Trajectory(
        id=recording.id,
        task=task,
        env=env or task.env,
        run_id=run_id,
        group_id=session.group_id,
        model=model,
        tools=recording.session.tools,
        messages=messages,
        outcome=outcome,
        scores=scores,
        exactness=recording.exactness,
        segment=segment,
        usage=Usage(
            prompt_tokens=recording.session.num_tokens - completion_tokens,
            completion_tokens=completion_tokens,
            turns=len(assistant),
            tool_calls=sum(len(m.tool_calls) for m in assistant),
            generation_time_s=recording.generation_s,
            wall_time_s=time.time() - recording.started_at,
        ),
        created_at=recording.started_at,
        metadata={
            **session.annotations,
            "precision": precision,
            **({"rendering": recording.rendering} if recording.rendering else {}),
            "gateway": {
                "session": session.id,
                "sequence": recording.sequence,
                "forked_from": recording.forked_from,
                "calls": recording.calls,
                "text_only": any(m.token_ids is None for m in messages),
                **recording.notes,
                **links,
                **session.metadata,
            },
        },
    )


def _chained(
    session: GatewaySession, recording: Recording
) -> tuple[Segment | None, dict[str, Any]]:
    """Where ``recording`` sits in the session's episode (``None``: in none) and what its
    ``metadata["gateway"]`` says of the chain: its length, and the segment after it."""
    chain = session.chain
    index = next((i for i, r in enumerate(chain) if r is recording), None)
    if index is None:
        return None, {}
    links: dict[str, Any] = {"segments": len(chain)}
    if index + 1 < len(chain):
        links[SPLIT_INTO] = chain[index + 1].id
    return Segment(episode_id=chain[-1].id, index=index), links
