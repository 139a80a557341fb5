"""What docs/templates.md says the gateway does where a template is not prefix-safe: a template
that rewrites the history splits the conversation at the break (the recorded trajectory kept,
the call's messages starting a linked one rendered whole, as the model is given them), and one
whose generation prompt opens text the reply's rendering drops keeps the sampled ids, exactly."""

from __future__ import annotations

import asyncio

from serve_helpers import MODEL

from template_doubles import (
    OPENS_IN_PROMPT,
    REWRITES_HISTORY,
    library_text,
    needs_library,
    smollm2_with,
)
from trajforge.policy.check import check_label, check_trajectory
from trajforge.policy.scripted import ScriptedPolicy
from trajforge.schema import ExactnessKind, Message, OutcomeStatus, Role, Task
from trajforge.serve.gateway import ChatCall, Gateway
from trajforge.serve.wire import ChatRequest


def _reply(task: Task | None, messages: list[Message]) -> str:
    return f"answer {sum(1 for m in messages if m.role is Role.USER)}"


def _gateway(template: str) -> Gateway:
    return Gateway(ScriptedPolicy(_reply, smollm2_with(template), name=MODEL), None, run_id="gw")


def _call(gateway: Gateway, messages: list[Message]) -> None:
    request = ChatRequest(model=MODEL, messages=[{"role": "user", "content": "-"}])
    asyncio.run(gateway.chat(ChatCall("s", request, messages, [])))


def _turns(*texts: str) -> list[Message]:
    roles = [Role.USER, Role.ASSISTANT] * len(texts)
    return [Message(role=r, content=t) for r, t in zip(roles, texts, strict=False)]


def test_a_template_that_rewrites_the_history_splits_at_the_break() -> None:
    gateway = _gateway(REWRITES_HISTORY)
    renderer = gateway.policy.renderer
    _call(gateway, _turns("hi"))
    call = _turns("hi", "answer 1", "more")
    _call(gateway, call)
    first, second = gateway.recorder.trajectories(gateway.recorder.session("s"))
    assert len(first.messages) == 2 and first.exactness.is_exact
    label = second.exactness
    assert label.kind is ExactnessKind.SPLIT and label.split_from == first.id
    assert label.rendered_prefix == 3
    assert label.reason is not None
    assert "message 1 (assistant)" in label.reason and "'answer 1<|im_end|>" in label.reason
    assert "'(earlier reply)<|im_end|>" in label.reason
    # The second piece's prompt is the fresh whole rendering the model was given.
    prompt = [t for m in second.messages[:3] for t in m.token_ids or []]
    assert prompt == renderer.encode(renderer.render_text(call, [], add_generation_prompt=True))
    assert second.messages[1].logprobs is None and second.messages[3].logprobs is not None
    assert second.messages[3].content == "answer 2"
    for piece in (first, second):
        assert check_trajectory(piece, renderer) == []
    assert check_label(second) == []


def test_a_split_piece_is_continued_and_split_again_at_the_next_break() -> None:
    gateway = _gateway(REWRITES_HISTORY)
    _call(gateway, _turns("hi"))
    _call(gateway, _turns("hi", "answer 1", "more"))
    _call(gateway, _turns("hi", "answer 1", "more", "answer 2", "again"))
    pieces = gateway.recorder.trajectories(gateway.recorder.session("s"))
    assert [len(p.messages) for p in pieces] == [2, 4, 6]
    assert [p.exactness.split_from for p in pieces] == [None, pieces[0].id, pieces[1].id]
    assert pieces[2].exactness.reason is not None
    assert "message 3 (assistant)" in pieces[2].exactness.reason
    for piece in pieces:
        assert check_trajectory(piece, gateway.policy.renderer) == []


def test_a_piece_whose_calls_are_answered_after_the_break_says_where() -> None:
    def calls_once(task: Task | None, messages: list[Message]) -> str:
        if any(m.role is Role.TOOL for m in messages):
            return "done"
        return '<tool_call>{"name": "look", "arguments": {}}</tool_call>'

    policy = ScriptedPolicy(calls_once, smollm2_with(REWRITES_HISTORY), name=MODEL)
    gateway = Gateway(policy, None, run_id="gw")
    _call(gateway, _turns("hi"))
    (first,) = gateway.recorder.trajectories(gateway.recorder.session("s"))
    reply = first.messages[1].model_copy(update={"token_ids": None, "logprobs": None})
    (call,) = reply.tool_calls
    answer = Message(role=Role.TOOL, content="seen", tool_call_id=call.id)
    _call(gateway, [first.messages[0], reply, answer])
    first, second = gateway.recorder.trajectories(gateway.recorder.session("s"))
    assert first.outcome.status is OutcomeStatus.TRUNCATED and first.outcome.fault is None
    assert first.outcome.reason is not None and second.id in first.outcome.reason
    assert first.metadata["gateway"]["split_into"] == second.id
    assert second.outcome.status is OutcomeStatus.OK and second.messages[-1].content == "done"
    for piece in (first, second):
        assert check_trajectory(piece, gateway.policy.renderer) == []


def test_a_tampered_split_piece_fails_the_check() -> None:
    gateway = _gateway(REWRITES_HISTORY)
    _call(gateway, _turns("hi"))
    _call(gateway, _turns("hi", "answer 1", "more"))
    second = gateway.recorder.trajectories(gateway.recorder.session("s"))[1]
    renderer = gateway.policy.renderer
    tampered = second.model_copy(deep=True)
    tampered.messages[1].token_ids = renderer.encode("answer 1")
    (found,) = check_trajectory(tampered, renderer)
    assert found.message_index == 1 and found.kind == "tokens"


@needs_library
def test_qwen3_splits_where_it_drops_a_past_turns_thinking_block() -> None:
    gateway = _gateway(library_text("Qwen-Qwen3-0.6B"))
    _call(gateway, _turns("hi"))
    _call(gateway, _turns("hi", "answer 1", "more"))
    first, second = gateway.recorder.trajectories(gateway.recorder.session("s"))
    assert first.exactness.is_exact and second.exactness.split_from == first.id
    assert second.exactness.reason is not None
    assert "message 1 (assistant)" in second.exactness.reason
    assert "'<think>" in second.exactness.reason
    for piece in (first, second):
        assert check_trajectory(piece, gateway.policy.renderer) == []


def test_a_prompt_that_opens_thinking_keeps_the_sampled_ids_exactly() -> None:
    gateway = _gateway(OPENS_IN_PROMPT)
    _call(gateway, _turns("hi"))
    _call(gateway, _turns("hi", "answer 1", "more"))
    (traj,) = gateway.recorder.trajectories(gateway.recorder.session("s"))
    assert [m.role for m in traj.messages] == [Role.USER, Role.ASSISTANT] * 2
    assert traj.exactness.is_exact
    assert check_trajectory(traj, gateway.policy.renderer) == []
    text = gateway.policy.renderer.decode([t for m in traj.messages for t in m.token_ids or []])
    assert text.count("<think>\n") == 2
