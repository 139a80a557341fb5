"""The recorder's memory stays bounded on a long-running server: a session keeps its last
recordings, and a bounded recorder forgets the least recently used idle sessions."""

from __future__ import annotations

import pytest
from serve_helpers import MODEL, adder_reply

from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import Fault, Message, OutcomeStatus, Role
from trajforge.serve.gateway import Gateway
from trajforge.serve.recorder import Recorder
from trajforge.serve.recording import SESSION_RECORDINGS, GatewaySession, Recording
from trajforge.serve.wire import WireError


def _recorder(keep_sessions: int | None = None) -> Recorder:
    recorder = Gateway(
        ScriptedPolicy(adder_reply, load_tokenizer(), name=MODEL), None, run_id="gw"
    ).recorder
    recorder.hold_sessions(keep_sessions)
    return recorder


def _call(recorder: Recorder, session: GatewaySession, text: str, *, finish: bool) -> Recording:
    recording = recorder.new_recording(session, [Message(role=Role.USER, content=text)], [])
    if finish:
        recorder.finish(session, recording, 0.0, None)
    return recording


def test_a_session_keeps_its_last_recordings_and_any_busy_one() -> None:
    recorder = _recorder()
    session = recorder.session("default")
    busy = _call(recorder, session, "still answering", finish=False)
    for i in range(SESSION_RECORDINGS + 10):
        _call(recorder, session, f"question {i}", finish=True)
    assert len(session.recordings) == SESSION_RECORDINGS
    assert session.recordings[0] is busy
    # Sequence numbers go on counting: no two trajectories of the session share one.
    assert [r.sequence for r in session.recordings[1:]] == list(range(12, SESSION_RECORDINGS + 11))


def test_a_bounded_recorder_forgets_the_least_recently_used_idle_sessions() -> None:
    recorder = _recorder(keep_sessions=2)
    _call(recorder, recorder.session("a"), "hi", finish=True)
    _call(recorder, recorder.session("b"), "hi", finish=False)
    recorder.session("c")
    assert list(recorder.sessions) == ["b", "c"]
    recorder.session("b")  # used again: now the most recent
    recorder.session("d")
    assert list(recorder.sessions) == ["b", "d"]
    recorder.session("e")  # b is busy: kept beyond the bound rather than lost mid-call
    assert list(recorder.sessions) == ["b", "e"]


def test_an_unbounded_recorder_holds_every_session() -> None:
    recorder = _recorder()
    for i in range(SESSION_RECORDINGS + 1):
        recorder.session(f"run-{i}")
    assert len(recorder.sessions) == SESSION_RECORDINGS + 1


def test_an_agent_runs_session_is_opened_in_its_run_found_and_ended_through_the_recorder() -> None:
    recorder = _recorder()
    with pytest.raises(WireError, match=r"no session 'run\.t\.0'") as missing:
        recorder.find("run.t.0")
    assert missing.value.status == 404
    session = recorder.open("run.t.0", None, run_id="run")
    assert recorder.find("run.t.0") is session
    _call(recorder, session, "hi", finish=True)
    (traj,) = recorder.end(session)
    # The session's run, not the recorder's ("gw"); the session leaves with its trajectories.
    assert traj.run_id == "run" and recorder.sessions == {}


def test_a_call_that_never_returns_is_recorded_on_each_of_its_recordings() -> None:
    recorder = _recorder()
    session = recorder.session("s")
    recordings = [_call(recorder, session, f"q{k}", finish=False) for k in range(2)]
    with pytest.raises(RuntimeError), recorder.aborted_on_failure(session, recordings):
        raise RuntimeError("the model fell over")
    outcomes = [recorder.trajectory(session, r).outcome for r in recordings]
    assert {(o.status, o.reason, o.fault) for o in outcomes} == {
        (OutcomeStatus.ERROR, "RuntimeError: the model fell over", Fault.INFRA)
    }
    assert not any(r.busy for r in recordings)
