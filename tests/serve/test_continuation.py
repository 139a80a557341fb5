"""Each trajectory the gateway records carries its exactness: a call that edits an earlier turn
starts a ``split`` trajectory linked to the one it broke off, assistant turns sent as text make
a ``re-rendered`` one, and a conversation grown call by call stays ``exact``."""

from __future__ import annotations

import asyncio

from serve_helpers import MODEL

from trajforge.policy.models.smollm2 import load_tokenizer
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import ExactnessKind, Message, Role, Task, Trajectory
from trajforge.serve.gateway import Gateway
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
    (choice,) = asyncio.run(gateway.chat(session, request, messages, []))
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


def test_editing_an_earlier_turn_records_a_split_trajectory_linked_to_the_first() -> None:
    gateway = _gateway()
    first = _call(gateway, "s", [_user("hi")])
    _call(gateway, "s", [_user("hi"), _assistant("answer 1"), _user("more")])
    edited = [_user("hi"), _assistant("answer 1"), _user("less"), _assistant("answer 2")]
    split = _call(gateway, "s", [*edited, _user("go on")])
    assert split != first
    found = _trajectories(gateway.recorder, "s")
    assert found[first].exactness.is_exact
    label = found[split].exactness
    assert label.kind is ExactnessKind.SPLIT and label.split_from == first
    assert label.reason is not None and "message 2 differs" in label.reason
    # Its five opening messages were rendered from text; the reply after them was sampled.
    assert label.rendered_prefix == 5
    # Going back to an earlier point of the conversation is a split too.
    back = _call(gateway, "s", [_user("hi"), _assistant("answer 1"), _user("more")])
    label = _trajectories(gateway.recorder, "s")[back].exactness
    assert label.kind is ExactnessKind.SPLIT and label.split_from == split


def test_assistant_turns_sent_as_text_make_a_re_rendered_trajectory() -> None:
    gateway = _gateway()
    made_up = _call(gateway, "s", [_user("hi"), _assistant("a reply never sampled"), _user("ok")])
    label = _trajectories(gateway.recorder, "s")[made_up].exactness
    assert label.kind is ExactnessKind.RE_RENDERED
    assert label.reason == "1 assistant turn(s) sent as text were rendered by the chat template"
    # Another conversation in the same session shares no turn with it: exact.
    other = _call(gateway, "s", [_user("something else")])
    assert _trajectories(gateway.recorder, "s")[other].exactness.is_exact
