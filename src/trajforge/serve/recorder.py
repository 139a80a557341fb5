"""What the gateway records: sessions, and in each the trajectories its calls grow.

A call whose conversation repeats a recorded trajectory message for message (the assistant
turns as the gateway returned them) and only appends user or tool messages continues that
trajectory: the new messages are rendered after the recorded context, whose ids (the sampled
ones included) are never re-tokenized, so the prompt the model sees extends the previous one
token for token. A call that continues none but rewrites the history of the session's
conversation (a compaction, as Claude Code's, or an earlier turn edited: the same system prompt
and tools, ``recording.rewrites``) starts the next segment of the session's episode, as a
rollout's context policy does: each segment token-exact on its own, the last one the episode's
trajectory. Any other call (a sub-agent, a harness's side call, a fork) starts a new trajectory
in the same session, linked to it by ``metadata["gateway"]`` and labelled with its exactness
(``continuation``: ``split`` where it departs from a recorded one after repeating its assistant
turns, or where the chat template rewrites the recorded turns once the new messages follow: the
recorded trajectory is kept as it is and the call's messages start the next piece, rendered
whole as the model is given them). Every trajectory is written to the store after each call
that changes it, so a crash loses at most the call in flight.

A turn cut at its token cap makes its trajectory ``truncated``, as ``eval`` decides it for an
episode (``rollout.cut_turn``); an agent run's session is opened, scored and ended through the
recorder's methods (``open``, ``set_reward``, ``score_each``, ``fail``, ``end``).

Memory stays bounded on a server that runs for days: a session keeps its last
``SESSION_RECORDINGS`` trajectories (``recording``), and a recorder told ``hold_sessions(n)``
forgets the least recently used idle sessions beyond that many. What is forgotten is in the
store already; a call continuing a forgotten trajectory starts a new one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from trajforge.policy import FinishReason, HistoryRewritten
from trajforge.rollout import EndReason, TurnCap, cut_turn
from trajforge.schema import (
    Evaluator,
    EvaluatorKind,
    Exactness,
    Fault,
    Message,
    Outcome,
    OutcomeStatus,
    Score,
    Task,
    ToolSpec,
    Trajectory,
)
from trajforge.serve.continuation import (
    SPLIT_INTO,
    exactness_of,
    rewrite_label,
    split_at_break,
)
from trajforge.serve.recording import (
    GatewaySession,
    Recording,
    StartConversation,
    recorded,
    recorded_nothing,
    rewrites,
    told,
)
from trajforge.serve.wire import WireError
from trajforge.store import TrajectoryStore

Scorer = Callable[[Trajectory], Awaitable[Score]]

SERVER_SESSIONS = 1024
"""Sessions a long-running server holds: far more than the agent runs in flight at once."""


def turn_cap(asked: int, room: int | None) -> TurnCap:
    """The cap of a reply asked for ``asked`` tokens with ``room`` left in the model's context:
    the context where it leaves no more (ties go to the context, as in an episode)."""
    if room is not None and room <= asked:
        return TurnCap(room, EndReason.MAX_CONTEXT_TOKENS)
    return TurnCap(asked)


@dataclass(eq=False, repr=False)
class Recorder:
    """Sessions of one gateway and the store their trajectories go to.

    Args:
        start: starts the conversation of a new trajectory from a call's messages and tools.
        model: the model recorded on trajectories.
        precision: the precision of the weights that sample (``None``: unknown, a server).
        store: where trajectories are written (``None``: kept in memory only).
        run_id: the run every trajectory belongs to.
        env: the environment name recorded on trajectories (``None`` for a free agent).
    """

    start: StartConversation
    model: str
    precision: str | None
    store: TrajectoryStore | None
    run_id: str
    env: str | None = None
    _keep_sessions: int | None = field(default=None, init=False)
    sessions: dict[str, GatewaySession] = field(default_factory=dict, init=False)
    """By last use, the most recent last."""

    def hold_sessions(self, most: int | None) -> None:
        """Hold at most ``most`` sessions from the next call on (the least recently used idle
        ones beyond are forgotten); ``None``, the default, holds all, as a collection that reads
        them at its end must."""
        self._keep_sessions = most

    def session(self, session_id: str) -> GatewaySession:
        """The session called ``session_id``, opened on first use."""
        found = self.sessions.pop(session_id, None) or GatewaySession(session_id)
        self.sessions[session_id] = found
        if self._keep_sessions is not None and len(self.sessions) > self._keep_sessions:
            excess = len(self.sessions) - self._keep_sessions
            idle = (k for k, s in self.sessions.items() if s is not found and s.idle)
            for key in list(islice(idle, excess)):
                del self.sessions[key]
        return found

    def find(self, session_id: str) -> GatewaySession:
        """The session called ``session_id``; a 404 where there is none."""
        found = self.sessions.get(session_id)
        if found is None:
            raise WireError(f"no session {session_id!r}", param="session", status=404)
        return found

    def open(
        self,
        session_id: str,
        task: Task | None,
        *,
        run_id: str | None = None,
        group_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        system_text: str | None = None,
        annotations: dict[str, Any] | None = None,
    ) -> GatewaySession:
        """Open a session for ``task`` (refused if the session has recorded calls already);
        ``run_id``, ``system_text`` and ``annotations`` as ``GatewaySession`` keeps them."""
        found = self.session(session_id)
        if found.recordings:
            raise WireError(
                f"session {session_id!r} has recorded calls already", param="session", status=409
            )
        found.task, found.run_id, found.group_id = task, run_id, group_id
        found.metadata = dict(metadata or {})
        found.system_text, found.annotations = system_text, dict(annotations or {})
        return found

    def end(self, session: GatewaySession) -> list[Trajectory]:
        """The session's trajectories (``trajectories``), the session forgotten: an agent run
        that ended takes what it recorded with it, so a long collection holds only the runs
        under way."""
        self.sessions.pop(session.id, None)
        return self.trajectories(session)

    def begin(
        self, session: GatewaySession, messages: list[Message], tools: list[ToolSpec]
    ) -> Recording:
        """The recording this call continues (with ``messages``' new ones rendered after its
        context), or a new one. Call under ``session.lock``."""
        for recording in reversed(session.recordings):
            if recording.extends(messages, tools):
                try:
                    recording.session.add_observations(messages[len(recording.session.messages) :])
                except HistoryRewritten as exc:  # kept as it is; the call starts a piece after it
                    label = split_at_break(recording.id, exc, messages)
                    piece = self.new_recording(session, messages, tools, label)
                    recording.notes[SPLIT_INTO] = piece.id
                    self.save(session, recording)
                    return piece
                recording.busy = True
                return recording
        rewritten = rewrites(session, messages, tools)
        if rewritten is not None:
            return self.next_segment(session, rewritten, messages, tools)
        return self.new_recording(session, messages, tools)

    def next_segment(
        self,
        session: GatewaySession,
        rewritten: Recording,
        messages: list[Message],
        tools: list[ToolSpec],
    ) -> Recording:
        """The next segment of the session's episode, started from ``messages``, which rewrite
        the history of its last segment ``rewritten``: the new segment takes the episode's id
        (the last segment's, as a rollout's does), ``rewritten`` a new one of its own, and
        ``rewritten`` is closed."""
        if not session.chain:
            session.chain.append(rewritten)
        episode_id, rewritten.id = rewritten.id, uuid.uuid4().hex
        rewritten.closed = True
        for other in session.recordings:
            if other.forked_from == episode_id:
                other.forked_from = rewritten.id
        kind, label = rewrite_label(rewritten.id, rewritten.session.messages, messages)
        segment = self.new_recording(session, messages, tools, label, recording_id=episode_id)
        segment.notes["rewrite"] = kind
        session.chain.append(segment)
        # The episode's row holds the old last segment until the new one's turn is stored.
        if self.store is not None:
            self.store.delete([episode_id])
        for earlier in session.chain[:-1]:
            self.save(session, earlier)
        return segment

    async def begin_call(
        self, session_id: str, messages: list[Message], tools: list[ToolSpec], n: int
    ) -> tuple[GatewaySession, list[Recording]]:
        """The session of a call of ``n`` choices and the recordings it grows: the one it
        continues (or a new one), then forks of it for the other choices. The session's
        ``system_text`` joins every call alike, so a conversation still continues its own."""
        session = self.session(session_id)
        messages = told(session, messages)
        async with session.lock:
            first = self.begin(session, messages, tools)
            return session, [first] + [self.fork(session, first) for _ in range(n - 1)]

    def new_recording(
        self,
        session: GatewaySession,
        messages: list[Message],
        tools: list[ToolSpec],
        exactness: Exactness | None = None,
        recording_id: str | None = None,
    ) -> Recording:
        """A new trajectory of the session (``recording_id``: its id, else a new one), starting
        from ``messages``, labelled ``exactness`` or with what ``messages`` are to the
        session's recorded trajectories."""
        recording = Recording(
            id=recording_id or uuid.uuid4().hex,
            session=self.start(messages, tools, session.task),
            sequence=next(session.sequences),
            exactness=exactness
            or exactness_of(
                [(r.id, r.session.messages) for r in reversed(session.recordings)], messages
            ),
        )
        recording.busy = True
        session.add(recording)
        return recording

    def fork(self, session: GatewaySession, recording: Recording) -> Recording:
        """A copy of a busy recording, for another sampled choice of the same call."""
        forked = Recording(
            id=uuid.uuid4().hex,
            session=recording.session.copy(),
            sequence=next(session.sequences),
            forked_from=recording.id,
            busy=True,
            exactness=recording.exactness,
            cut=recording.cut,
        )
        session.add(forked)
        return forked

    def finish(
        self,
        session: GatewaySession,
        recording: Recording,
        generation_s: float,
        cap: TurnCap | None,
        finish_reason: FinishReason | None = None,
    ) -> None:
        """The call's turn is in the recording's conversation: store the trajectory, truncated
        where the turn was cut at ``cap`` (``None``: the server's own, known by
        ``finish_reason``), as ``cut_turn`` decides for every episode."""
        if recording.cut is None:
            recording.cut = cut_turn(recording.session.messages[-1], cap, finish_reason)
        recording.generation_s += generation_s
        recording.calls += 1
        recording.busy = False
        self.save(session, recording)

    def abort(
        self,
        session: GatewaySession,
        recording: Recording,
        status: OutcomeStatus,
        why: str,
        fault: Fault,
    ) -> None:
        """Record that the call in flight never returned a turn (client gone, model error),
        and whose failure that is."""
        recording.busy = False
        recording.status, recording.reason, recording.fault = status, why, fault
        self.save(session, recording)

    def abort_all(
        self,
        session: GatewaySession,
        recordings: list[Recording],
        status: OutcomeStatus,
        why: str,
        fault: Fault,
    ) -> None:
        for recording in recordings:
            self.abort(session, recording, status, why, fault)

    @contextmanager
    def aborted_on_failure(
        self, session: GatewaySession, recordings: list[Recording]
    ) -> Iterator[None]:
        """Around a call to the model: where it never returns (the client gone, the model or
        its server failed), each of the call's ``recordings`` records why, as the
        infrastructure's failure, and the exception goes on."""
        try:
            yield
        except asyncio.CancelledError:
            why = "the client disconnected"
            self.abort_all(session, recordings, OutcomeStatus.TRUNCATED, why, Fault.INFRA)
            raise
        except Exception as exc:
            why = exc.message if isinstance(exc, WireError) else f"{type(exc).__name__}: {exc}"
            self.abort_all(session, recordings, OutcomeStatus.ERROR, why, Fault.INFRA)
            raise

    def set_reward(self, session: GatewaySession, reward: float, scores: dict[str, float]) -> int:
        """Give every trajectory of the session ``reward`` (and ``scores``); how many."""
        evaluator = Evaluator(kind=EvaluatorKind.ENV, name="gateway")
        session.reward = reward
        session.scores = [Score(name=k, value=v, evaluator=evaluator) for k, v in scores.items()]
        for recording in session.recordings:
            self.save(session, recording)
        return len(session.recordings)

    async def score_each(self, session: GatewaySession, scorer: Scorer) -> None:
        """Score each trajectory of the session on its own (the env's verifier, where the agent
        reported no reward): its reward the score's value."""
        for recording in session.recordings:
            if recording.closed:  # an earlier segment: the episode's score is its own
                continue
            score = await scorer(self.trajectory(session, recording))
            recording.reward, recording.scores = score.value, [score]
            self.save(session, recording)

    def fail(self, session: GatewaySession, status: OutcomeStatus, error: str) -> None:
        """Record on every trajectory of the session that its agent program failed (crashed or
        was killed: the infrastructure's failure, not the policy's)."""
        session.failure = Outcome(status=status, error=error, fault=Fault.INFRA)
        for recording in session.recordings:
            self.save(session, recording)

    def trajectories(self, session: GatewaySession) -> list[Trajectory]:
        """The session's trajectories; a session that made no call has one, empty, so that
        every agent run is accounted for."""
        if not session.recordings:
            return [recorded_nothing(session, self._run_id(session), self.model, self.env)]
        return [self.trajectory(session, r) for r in session.recordings]

    def _run_id(self, session: GatewaySession) -> str:
        return self.run_id if session.run_id is None else session.run_id

    def trajectory(self, session: GatewaySession, recording: Recording) -> Trajectory:
        run_id = self._run_id(session)
        episode = None
        if recording.closed:  # an earlier segment takes its episode's outcome
            episode = self.trajectory(session, session.chain[-1])
        return recorded(session, recording, run_id, self.model, self.precision, self.env, episode)

    def save(self, session: GatewaySession, recording: Recording) -> None:
        """Store the recording's trajectory; the earlier segments too where it is the last of
        its session's episode, whose outcome they carry."""
        if self.store is None or not recording.session.messages:
            return
        self.store.put(self.trajectory(session, recording))
        if session.chain and recording is session.chain[-1]:
            for earlier in session.chain[:-1]:
                self.store.put(self.trajectory(session, earlier))

    def save_all(self, session: GatewaySession) -> list[Trajectory]:
        """Store every trajectory of the session (an empty one if it made no call)."""
        trajectories = self.trajectories(session)
        if self.store is not None:
            for trajectory in trajectories:
                self.store.put(trajectory)
        return trajectories
