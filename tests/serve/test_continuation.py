"""Each trajectory the gateway records carries its exactness: a call that edits an earlier turn
starts a ``split`` trajectory linked to the one it broke off, assistant turns sent as text make
a ``re-rendered`` one, and a conversation grown call by call stays ``exact``."""

from __future__ import annotations

import asyncio

from serve_helpers import MODEL

from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import ExactnessKind, Message, Role, Segment, Task, Trajectory
from trajforge.serve.gateway import ChatCall, Gateway
from trajforge.serve.recorder import Recorder
from trajforge.serve.wire import ChatRequest


def _reply(task: Task | None, messages: list[Message]) -> str:
    return f"answer {sum(1 for m in messages if m.role is Role.USER)}"


def _user(text: str) -> Message:
    return Message(role=Role.USER, content=text)


def _assistant(text: str) -> Message:
    return Message(role=Role.ASSISTANT, content=text)


def _call(gateway: Gateway, session: str, messages: list[Message]) -> str:
    request = ChatRequest(model=MODEL, messages=[{"role": "user", "content": "-"}])
    (choice,) = asyncio.run(gateway.chat(ChatCall(session, request, messages, [])))
    return choice.trajectory_id


def _trajectories(recorder: Recorder, session: str) -> dict[str, Trajectory]:
    return {t.id: t for t in recorder.trajectories(recorder.session(session))}


def _gateway() -> Gateway:
    return Gateway(ScriptedPolicy(_reply, load_tokenizer(), name=MODEL), None, run_id="gw")


def test_a_conversation_grown_call_by_call_is_one_exact_trajectory() -> None:
    gateway = _gateway()
    first = _call(gateway, "s", [_user("hi")])
    again = _call(gateway, "s", [_user("hi"), _assistant("answer 1"), _user("more")])
    assert again == first
    (only,) = _trajectories(gateway.recorder, "s").values()
    assert only.exactness.kind is ExactnessKind.EXACT and only.exactness.is_exact


def _chain(recorder: Recorder, session: str) -> list[Trajectory]:
    found = _trajectories(recorder, session).values()
    return sorted(found, key=lambda t: -1 if t.segment is None else t.segment.index)


def test_editing_an_earlier_turn_starts_the_next_segment_of_the_sessions_episode() -> None:
    gateway = _gateway()
    episode = _call(gateway, "s", [_user("hi")])
    _call(gateway, "s", [_user("hi"), _assistant("answer 1"), _user("more")])
    edited = [_user("hi"), _assistant("answer 1"), _user("less"), _assistant("answer 2")]
    # The edited history is the episode's next segment: it takes the episode's id.
    assert _call(gateway, "s", [*edited, _user("go on")]) == episode
    first, split = _chain(gateway.recorder, "s")
    assert first.exactness.is_exact and first.id != episode
    assert first.segment == Segment(episode_id=episode, index=0)
    assert split.segment == Segment(episode_id=episode, index=1)
    label = split.exactness
    assert label.kind is ExactnessKind.SPLIT and label.split_from == first.id
    assert label.reason is not None and "message 2 differs" in label.reason
    assert split.metadata["gateway"]["rewrite"] == "edit"
    # Its five opening messages were rendered from text; the reply after them was sampled.
    assert label.rendered_prefix == 5
    # Going back to an earlier point of the conversation rewrites it again.
    _call(gateway, "s", [_user("hi"), _assistant("answer 1"), _user("more")])
    chain = _chain(gateway.recorder, "s")
    assert [t.segment.index for t in chain if t.segment] == [0, 1, 2]
    assert chain[2].id == episode and chain[2].exactness.split_from == chain[1].id
    assert chain[1].metadata["gateway"]["split_into"] == episode


def test_assistant_turns_sent_as_text_make_a_re_rendered_trajectory() -> None:
    gateway = _gateway()
    made_up = _call(gateway, "s", [_user("hi"), _assistant("a reply never sampled"), _user("ok")])
    label = _trajectories(gateway.recorder, "s")[made_up].exactness
    assert label.kind is ExactnessKind.RE_RENDERED
    assert label.reason == "1 assistant turn(s) sent as text were rendered by the chat template"
    # Another conversation in the same session (its own system prompt: a sub-agent) shares no
    # turn with it: exact, a trajectory of its own rather than a rewrite of the first.
    sub_agent = [Message(role=Role.SYSTEM, content="You are a sub-agent."), _user("other")]
    other_id = _call(gateway, "s", sub_agent)
    other = _trajectories(gateway.recorder, "s")[other_id]
    assert other.exactness.is_exact and other.segment is None
